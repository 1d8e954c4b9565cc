"""The result is plain data: inclusive totals derived, serialisation round-trips."""

import json

import pytest
import torch
from models import LeNet, Stack

import flopsight
from flopsight.result import SCHEMA_VERSION


@pytest.fixture
def result():
    return flopsight.profile(LeNet(), torch.ones(2, 3, 32, 32), clock=flopsight.FakeClock())


def test_save_and_load_round_trip(result, tmp_path):
    path = tmp_path / "lenet.json"
    result.save(path)
    loaded = flopsight.load(path)
    assert loaded == result
    assert loaded.module("conv1").forward == result.module("conv1").forward
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["modules"][0]["name"] == ""


def test_to_dict_is_json_ready_and_from_dict_inverts_it(result):
    again = flopsight.ProfileResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    assert [s.name for s in again.walk()] == [s.name for s in result.walk()]


def test_unknown_schema_version_is_rejected(result):
    data = result.to_dict()
    data["schema_version"] = 99
    with pytest.raises(ValueError, match="data: unsupported flopsight schema_version 99"):
        flopsight.ProfileResult.from_dict(data)


def test_save_into_a_missing_directory_creates_it(result, tmp_path):
    path = tmp_path / "missing" / "deeper" / "r.json"
    result.save(path)
    assert flopsight.load(path) == result


def test_contract_fields(result):
    conv = result.module("conv1")
    assert (conv.name, conv.type_name, conv.params, conv.calls) == ("conv1", "Conv2d", 456, 1)
    assert conv.forward.macs == 6 * 28 * 28 * 3 * 25 * 2
    assert conv.forward.flops == 2 * conv.forward.macs + 6 * 28 * 28 * 2
    assert conv.forward.latency > 0
    assert result.total is result.module("")
    assert result.unsupported_ops == {}
    assert result.metadata.device == "cpu" and result.metadata.batch_size == 2


def test_walk_with_depth_limit_and_per_op_totals():
    result = flopsight.profile(Stack(width=8, depth=2), torch.ones(2, 8))
    assert [s.name for s in result.walk(max_depth=1)] == ["", "layers", "norms", "head"]
    ops = {name: o for name, o in result.ops().items()}
    assert ops["aten.addmm"].calls == 3
    assert ops["aten.addmm"].macs == result.total.forward.macs


def test_unsupported_ops_are_listed_with_call_counts():
    lib = torch.library.Library("flopsight_test_unsupported", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
    op = torch.ops.flopsight_test_unsupported.twice

    class UsesCustomOp(torch.nn.Module):
        def forward(self, x):
            return op(op(x))

    with pytest.warns(flopsight.UnsupportedOpWarning, match="flopsight_test_unsupported.twice"):
        result = flopsight.profile(UsesCustomOp(), torch.ones(3), warm_up=0)
    assert result.unsupported_ops == {"flopsight_test_unsupported.twice": 2}


def test_custom_op_formula_and_zero_cost_marking():
    lib = torch.library.Library("flopsight_test_custom", "DEF")
    lib.define("scaled_mm(Tensor a, Tensor b, float s) -> Tensor")
    lib.define("tag(Tensor x) -> Tensor")
    lib.impl("scaled_mm", lambda a, b, s: (a @ b) * s, "CompositeExplicitAutograd")
    lib.impl("tag", lambda x: x.clone(), "CompositeExplicitAutograd")
    ns = torch.ops.flopsight_test_custom
    registry = flopsight.REGISTRY.copy()

    @flopsight.register_formula(ns.scaled_mm, registry=registry)
    def scaled_mm(out, a, b, s):
        # m*k*n products, then one scale multiply per output element
        return flopsight.Cost.of_product(a.shape[0] * a.shape[1] * b.shape[1], extra_flops=out.numel())

    flopsight.mark_zero_cost("flopsight_test_custom::tag", registry=registry)

    class UsesBoth(torch.nn.Module):
        def forward(self, a, b):
            return ns.tag(ns.scaled_mm(a, b, 0.5))

    result = flopsight.profile(UsesBoth(), (torch.ones(4, 5), torch.ones(5, 6)), registry=registry)
    assert result.total.forward.macs == 4 * 5 * 6
    assert result.total.forward.flops == 2 * 4 * 5 * 6 + 4 * 6
    assert result.unsupported_ops == {}
    assert not flopsight.REGISTRY.is_registered(ns.scaled_mm)  # the global registry is untouched


def test_modules_are_read_only_so_the_tree_cannot_go_stale(result):
    before = result.module("conv1").forward
    with pytest.raises(TypeError):
        result.modules["conv1"] = result.modules["fc1"]
    with pytest.raises(TypeError):
        del result.modules["conv1"]
    assert result.module("conv1").forward == before == result.modules["conv1"].phases["forward"]


def test_a_misspelt_attribute_suggests_the_closest_one(result):
    with pytest.raises(AttributeError, match=r"no attribute 'fowrard' \(did you mean 'forward'\?\)"):
        result.total.fowrard  # noqa: B018 (the attribute read is what is tested)
    with pytest.raises(AttributeError, match=r"did you mean 'params'\?"):
        result.module("conv1").parms  # noqa: B018


def test_memory_parallel_and_inputs_are_typed_records_that_round_trip(tmp_path):
    model = Stack()
    with flopsight.Profiler(model, memory=True, parallel={"tp": 2}, clock=flopsight.FakeClock()) as prof:
        model(torch.ones(3, 8))
    result = prof.result
    memory = result.modules["head"].memory  # its own: a ModuleMemory, None when not tracked
    assert isinstance(memory, flopsight.result.memory.ModuleMemory) and memory.peak > 0
    meta = result.metadata
    assert (meta.parallel.world, meta.parallel.tp, meta.parallel.pp) == (1, 2, None)
    assert meta.inputs.args[0] == flopsight.result.metadata.TensorSpec("float32", (3, 8))
    result.save(tmp_path / "r.json")
    again = flopsight.load(tmp_path / "r.json")
    assert again.modules["head"].memory == memory and again.metadata.parallel == {"world": 1, "tp": 2}
    assert again.metadata.inputs.args == meta.inputs.args
    untracked = flopsight.profile(model, torch.ones(3, 8), clock=flopsight.FakeClock())
    assert untracked.modules["head"].memory is None and untracked.module("head").memory is None


def test_layer_sizes_are_read_off_the_modules_and_come_back_from_a_file(tmp_path):
    class Projection(torch.nn.Module):  # linear by its attributes; its repr says nothing of them
        def __init__(self):
            super().__init__()
            self.in_features, self.out_features = 6, 3
            self.weight = torch.nn.Parameter(torch.ones(3, 6))

        def forward(self, x):
            return x @ self.weight.t()

        def extra_repr(self):
            return "a projection"

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 6), Projection())
    result = flopsight.profile(model, torch.ones(2, 5, dtype=torch.long), clock=flopsight.FakeClock())
    layers = {name: result.module(name).layer for name in ("0", "1", "2")}
    assert layers == {"0": ("embedding", 10, 4), "1": ("linear", 4, 6), "2": ("linear", 6, 3)}
    assert result.total.layer is None
    result.save(tmp_path / "r.json")  # the file does not repeat what extra_repr says
    again = flopsight.load(tmp_path / "r.json")
    assert again == result and "layer" not in json.loads((tmp_path / "r.json").read_text())["modules"][1]
    assert [again.module(name).layer for name in ("0", "1")] == [layers["0"], layers["1"]]
    assert again.module("2").layer is None  # a custom repr: the sizes are not in the file
