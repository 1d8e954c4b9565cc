"""The ``flopsight`` command: MODEL kinds, options and their validation, output files,
modes, ``list``, ``--version``, the progress bar and ``make demo``'s path.

Most cases call ``main(argv)`` in-process on tiny configs or on the meta device; a few run
``python -m flopsight`` in a subprocess, as a user (and ``make demo``) would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import flopsight
from flopsight.cli import build as cli_build
from flopsight.cli import main, zoo

HEADER = "\n" + " DeepSpeed Flops Profiler ".center(78, "-") + "\n"
TINY_LLAMA = dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)


def needs_transformers():
    return pytest.importorskip("transformers")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def flopsight_command(*argv: str, prelude: str | None = None) -> list[str]:
    """``python -m flopsight ARGV`` with this interpreter (the venv's), or ``prelude`` first."""
    if prelude is None:
        return [sys.executable, "-m", "flopsight", *argv]
    code = f"{prelude}\nimport runpy, sys\nsys.argv = ['flopsight', *{list(argv)!r}]\n" \
           "runpy.run_module('flopsight', run_name='__main__', alter_sys=True)"
    return [sys.executable, "-c", code]


def subprocess_run(*argv: str, prelude: str | None = None, **kwargs) -> subprocess.CompletedProcess:
    """``python -m flopsight ARGV`` (see :func:`flopsight_command`), run to its end."""
    return subprocess.run(flopsight_command(*argv, prelude=prelude), capture_output=True, text=True, timeout=300,
                          **kwargs)


@pytest.fixture
def factory_file(tmp_path):
    """A factory file whose functions record each call in ``calls.txt`` beside it."""
    path = tmp_path / "models_for_cli.py"
    path.write_text(textwrap.dedent(f"""
        import time
        import torch
        CALLS = {str(tmp_path / "calls.txt")!r}
        STARTED = {str(tmp_path / "forward_started")!r}

        def _called(name):
            with open(CALLS, "a") as f:
                f.write(name + "\\n")

        def pair(batch_size=2):
            _called("pair")
            model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
            return model, torch.ones(batch_size, 8)

        def bare():
            _called("bare")
            return torch.nn.Linear(6, 3)

        def with_kwargs(seq_len=4, **options):
            _called("with_kwargs " + ",".join(sorted(options)))
            ids = torch.zeros(options.get("batch_size", 1), seq_len, dtype=torch.long)
            return torch.nn.Embedding(10, 4), {{"input": ids}}

        class Broken(torch.nn.Module):
            def forward(self, x):
                raise RuntimeError("the model is broken")

        def broken():
            return Broken(), torch.ones(1)

        class Interrupted(torch.nn.Module):
            def forward(self, x):
                raise KeyboardInterrupt  # what Ctrl-C raises while the model runs

        def interrupted():
            return Interrupted(), torch.ones(1)

        class Sleepy(torch.nn.Module):
            def forward(self, x):
                open(STARTED, "w").close()  # the model runs: Ctrl-C may come now
                for _ in range(12000):  # 2 minutes at most
                    time.sleep(0.01)
                return x

        def sleepy():
            return Sleepy(), torch.ones(1)
    """))
    return path


def calls(factory_file) -> list[str]:
    path = factory_file.parent / "calls.txt"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def config_file(tmp_path, name="config.json", **fields) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({**TINY_LLAMA, **fields}))
    return str(path)


# -- MODEL: a zoo name ---------------------------------------------------------------------------------
def llama_macs(L, H, heads, kv_heads, I, layers, V):
    """Llama's forward MACs for L tokens: q and o L*H*H each, k and v L*H*kv each (kv =
    H/heads*kv_heads), scores and weighted sum 2*L*L*H, gate, up and down 3*L*H*I; lm_head L*H*V."""
    kv = H // heads * kv_heads
    return layers * (2 * L * H * H + 2 * L * H * kv + 2 * L * L * H + 3 * L * H * I) + L * H * V


def test_llama_3_70b_on_meta_matches_its_hyper_parameters(capsys, tmp_path):
    needs_transformers()
    out = tmp_path / "llama.json"
    code, _, err = run(capsys, "profile", "llama-3-70b", "--device", "meta", "--seq-len", "16", "-o", str(out))
    assert code == 0, err
    result = flopsight.load(out)
    assert result.metadata.device == "meta" and result.metadata.model == "LlamaForCausalLM"
    assert result.total.params == 70_553_706_496
    assert result.total.forward.macs == llama_macs(16, 8192, 64, 8, 28672, 80, 128256)
    assert result.metadata.warm_up == 0  # nothing to warm up on meta


# published parameter counts (model cards and papers), counted on the meta device
PUBLISHED_PARAMS = {
    "bert-base": 109_482_240, "bert-large": 335_141_888, "roberta-base": 124_645_632, "gpt2": 124_439_808,
    "gpt2-xl": 1_557_611_200, "llama-2-7b": 6_738_415_616, "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096, "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512, "t5-small": 60_506_624, "t5-base": 222_903_552, "bart-base": 139_420_416,
    "whisper-small": 241_734_912, "vit-base": 86_567_656, "clip": 151_277_313, "convnext-tiny": 28_589_128,
    "resnet-18": 11_689_512, "resnet-50": 25_557_032,
}


def test_the_zoo_has_the_issue_s_models_and_list_prints_them_in_its_order():
    from flopsight.cli.catalog import CATALOG

    assert set(PUBLISHED_PARAMS) <= set(zoo.ZOO)
    assert [row.name for row in CATALOG] == list(zoo.ZOO)


@pytest.mark.parametrize("name", sorted(zoo.ZOO))
def test_every_zoo_model_profiles_on_meta_with_every_op_counted(name, capsys, tmp_path):
    from flopsight.cli.catalog import CATALOG

    entry = zoo.ZOO[name]
    if entry.needs_transformers:
        needs_transformers()
    size = ["--seq-len", "8"] if entry.seq_len else ["--input-shape", "3,32,32"] if entry.inputs == "tensor" else []
    out = tmp_path / "r.json"
    code, _, err = run(capsys, "profile", name, "--device", "meta", "-o", str(out), *size)
    assert code == 0, err
    result = flopsight.load(out)
    assert result.total.forward.macs > 0 and result.unsupported_ops == {}
    # its published size, and what `flopsight list` prints of it (cli/catalog.py, which imports no torch)
    assert result.total.params == PUBLISHED_PARAMS.get(name, result.total.params)
    config = entry.config()
    if config is not None:  # what a config says it takes agrees with the table
        assert zoo.input_kind(config) == entry.inputs
    [row] = [row for row in CATALOG if row.name == name]
    inputs = zoo.describe_specs(zoo.input_specs(entry.inputs, config, seq_len=entry.seq_len or 128))
    assert (row.family, row.params, row.inputs, row.source, row.needs_transformers) == \
        (entry.family, result.total.params, inputs, entry.source, entry.needs_transformers)


def test_old_names_are_aliases_and_names_ignore_case_and_dashes():
    assert zoo.lookup("resnet18").name == "resnet-18"
    assert zoo.lookup("ResNet_50").name == "resnet-50"
    assert zoo.lookup("Llama3-70B").name == "llama-3-70b"


def test_unknown_names_get_a_did_you_mean(capsys):
    code, out, err = run(capsys, "profile", "lama-3-8b")
    assert code == 2 and out == ""
    assert "argument MODEL: unknown model 'lama-3-8b'; did you mean llama-3-8b" in err
    assert "resnet-18" in run(capsys, "profile", "resnet-81")[2]


# -- MODEL: a factory ------------------------------------------------------------------------------------
def test_factory_from_a_file_returning_model_and_inputs(capsys, factory_file):
    code, out, _ = run(capsys, "profile", f"{factory_file}:pair", "--no-detailed", "--warm-up", "0")
    assert code == 0 and out.startswith(HEADER)
    assert "fwd MACs per GPU:".ljust(70) + "  80 MACs" in out  # batch 2 (the factory's default) * (8*4 + 4*2)
    assert calls(factory_file) == ["pair"]


def test_factory_from_a_module_takes_the_options_it_names(capsys, factory_file, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.json"
    code, _, err = run(capsys, "profile", "models_for_cli:pair", "--batch-size", "3", "--seq-len", "5", "-o", str(out))
    assert code == 0, err
    assert flopsight.load(out).total.forward.macs == 3 * (8 * 4 + 4 * 2)
    assert "--seq-len did not apply" in err  # pair() takes batch_size only
    code, _, err = run(capsys, "profile", "models_for_cli:with_kwargs", "--batch-size", "2", "-o", str(out))
    assert code == 0, err
    assert calls(factory_file)[-1] == "with_kwargs batch_size"  # only what the user set, through **options


def test_factory_returning_a_bare_model_needs_an_input_shape(capsys, factory_file):
    code, _, err = run(capsys, "profile", f"{factory_file}:bare")
    assert code == 2 and "argument --input-shape: the factory returned a model without inputs" in err
    code, out, _ = run(capsys, "profile", f"{factory_file}:bare", "--input-shape", "6", "--batch-size", "2",
                       "--no-detailed")
    assert code == 0 and "fwd MACs per GPU:".ljust(70) + "  36 MACs" in out


def test_factory_returning_a_bare_transformers_model_gets_its_default_inputs(capsys, tmp_path, monkeypatch):
    needs_transformers()
    (tmp_path / "hf_factory_for_cli.py").write_text(textwrap.dedent("""
        import transformers
        def gpt2():
            return transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=50))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "r.json"
    assert run(capsys, "profile", "hf_factory_for_cli:gpt2", "--seq-len", "8", "-o", str(out))[0] == 0
    result = flopsight.load(out)
    assert result.metadata.inputs["kwargs"] == {"input_ids": "int64[1, 8]"}
    # c_attn 8*32*96, attention 2*8*8*32, c_proj 8*32*32, mlp 2*8*32*128; lm_head 8*32*50
    assert result.total.forward.macs == 8 * 32 * 96 + 2 * 8 * 8 * 32 + 8 * 32 * 32 + 2 * 8 * 32 * 128 + 8 * 32 * 50


def test_a_failing_model_is_exit_status_1_with_the_error(capsys, factory_file):
    code, out, err = run(capsys, "profile", f"{factory_file}:broken")
    assert code == 1 and out == ""
    # one line: what, in which module (path and class), the message
    assert (err.startswith("flopsight: error: RuntimeError raised in module '<root>' (Broken): ")
            and "the model is broken" in err)
    assert len(err.strip().splitlines()) == 1 and "--traceback" in err
    with pytest.raises(RuntimeError, match="the model is broken"):
        main(["profile", f"{factory_file}:broken", "--traceback"])


def test_an_interrupted_run_is_exit_status_130_with_one_line(capsys, factory_file):
    """A KeyboardInterrupt in the forward (what Ctrl-C raises there): one line, as shells expect
    of SIGINT 128 + 2; ``--traceback`` lets it through whole."""
    try:
        code, out, err = run(capsys, "profile", f"{factory_file}:interrupted")
    except KeyboardInterrupt:  # not let through to pytest, which would stop the whole run
        pytest.fail("the KeyboardInterrupt escaped main()")
    assert (code, out, err) == (130, "", "flopsight: interrupted\n")
    with pytest.raises(KeyboardInterrupt):
        main(["profile", f"{factory_file}:interrupted", "--traceback"])


def _read_terminal(leader: int, chunks: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            return
        if not chunk:
            return
        chunks.append(chunk)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_ctrl_c_in_the_forward_erases_the_bar_and_prints_one_line(factory_file):
    """SIGINT while the model runs (its forward writes a marker, then sleeps), stderr a
    terminal so that the progress bar is drawn: the bar is erased, then one line, status 130."""
    import pty

    started = factory_file.parent / "forward_started"
    leader, follower = pty.openpty()
    # a shell's foreground command gets Python's handler; one started from a background job inherits SIGINT ignored
    prelude = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"
    process = subprocess.Popen(flopsight_command("profile", f"{factory_file}:sleepy", "--warm-up", "0",
                                                 prelude=prelude),
                               stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_terminal, args=(leader, chunks), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not started.exists():  # inside the forward
            assert process.poll() is None, "flopsight ended before the model ran"
            assert time.monotonic() < deadline, "the model never ran"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=10)
    os.close(leader)
    out = process.stdout.read().decode()
    drawn = b"".join(chunks).decode()
    assert code == 130 and out == ""
    assert "Traceback" not in drawn and "2/3 profile" in drawn  # the bar was drawn
    # the bar's line is erased ("\r\x1b[K"), then one line (a terminal ends it with "\r\n")
    assert drawn.rsplit("\r\x1b[K", 1)[1] == "flopsight: interrupted\r\n"
    assert drawn.count("\n") == 1


def test_factory_errors_are_usage_errors(capsys, factory_file, tmp_path):
    assert "has no function 'nope'" in run(capsys, "profile", f"{factory_file}:nope")[2]
    assert "no such file" in run(capsys, "profile", f"{tmp_path}/missing.py:f")[2]
    code, _, err = run(capsys, "profile", "no_such_module_for_cli:f")
    assert code == 2 and "cannot import module 'no_such_module_for_cli'" in err


def test_a_factory_file_that_is_not_python_is_a_usage_error(capsys, tmp_path):
    data = tmp_path / "weights.bin"
    data.write_bytes(b"\0")
    code, _, err = run(capsys, "profile", f"{data}:f")
    assert code == 2 and "not a Python file" in err


# -- MODEL: a transformers config JSON --------------------------------------------------------------------
def test_a_config_of_a_model_type_with_several_classes_builds_the_first():
    needs_transformers()
    import transformers

    from flopsight.cli.models import model_class_for

    # funnel's type maps to (FunnelModel, FunnelBaseModel): AutoModel builds the first
    assert isinstance(transformers.MODEL_MAPPING[transformers.FunnelConfig], tuple)
    assert model_class_for(transformers.FunnelConfig()) == "FunnelModel"


def test_config_json_builds_the_architecture_it_lists(capsys, tmp_path):
    needs_transformers()
    out = tmp_path / "r.json"
    path = config_file(tmp_path, architectures=["LlamaForCausalLM"], torch_dtype="bfloat16")
    code, _, err = run(capsys, "profile", path, "--seq-len", "8", "-o", str(out))
    assert code == 0, err
    result = flopsight.load(out)
    assert result.metadata.model == "LlamaForCausalLM" and result.metadata.dtype == "float32"
    assert result.total.forward.macs == llama_macs(8, 32, 4, 2, 64, 2, 64)
    # no architectures: the bare model (AutoModel's), no lm_head; a directory works too
    bare_dir = tmp_path / "bare"
    bare_dir.mkdir()
    config_file(bare_dir)
    assert run(capsys, "profile", str(bare_dir), "--seq-len", "8", "-o", str(out))[0] == 0
    assert flopsight.load(out).metadata.model == "LlamaModel"
    assert flopsight.load(out).total.forward.macs == llama_macs(8, 32, 4, 2, 64, 2, 0)


def test_what_a_config_takes_is_read_from_its_fields():
    from types import SimpleNamespace as Config

    assert zoo.input_kind(Config(vocab_size=10, num_mel_bins=80)) == "speech"
    assert zoo.input_kind(Config(text_config=Config(), vision_config=Config())) == "text+image"
    with pytest.raises(ValueError, match="cannot tell what a SimpleNamespace model takes"):
        zoo.input_kind(Config(hidden_size=8))


def test_config_json_errors_are_usage_errors(capsys, tmp_path):
    needs_transformers()
    (tmp_path / "no_type.json").write_text('{"hidden_size": 8}')
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "wrong.json").write_text('{"model_type": "llama", "vocab_size": "many"}')
    (tmp_path / "unknown.json").write_text('{"model_type": "no-such-model"}')
    assert "has no \"model_type\"" in run(capsys, "profile", str(tmp_path / "no_type.json"))[2]
    assert "not valid JSON" in run(capsys, "profile", str(tmp_path / "bad.json"))[2]
    code, _, err = run(capsys, "profile", str(tmp_path / "wrong.json"))
    assert code == 2 and "transformers cannot make a" in err
    code, _, err = run(capsys, "profile", str(tmp_path / "unknown.json"))
    assert code == 2 and "unknown model_type 'no-such-model'" in err
    code, _, err = run(capsys, "profile", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err


def test_too_large_for_memory_runs_on_meta_and_says_so(capsys, tmp_path, monkeypatch):
    needs_transformers()
    monkeypatch.setattr(cli_build, "available_memory", lambda: 10_000)  # bytes: nothing fits
    out = tmp_path / "r.json"
    code, _, err = run(capsys, "profile", config_file(tmp_path), "--seq-len", "8", "-o", str(out))
    assert code == 0
    assert "more than the 10 KB of memory available: profiling on the meta device" in err
    assert flopsight.load(out).metadata.device == "meta"
    causal = config_file(tmp_path, architectures=["LlamaForCausalLM"])
    code, _, err = run(capsys, "profile", causal, "--mode", "generate")
    assert code == 2 and "argument --mode:" in err and "cannot run on the meta device" in err


# -- options: validated before anything is built ---------------------------------------------------------
BAD_OPTIONS = [
    (["--batch-size", "0"], "--batch-size"),
    (["--warm-up", "-1"], "--warm-up"),
    (["--top", "0"], "--top"),
    (["--depth", "-5"], "--depth"),
    (["--seq-len", "0"], "--seq-len"),
    (["--seq-len", "ten"], "--seq-len"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--input-shape", "3,x"], "--input-shape"),
    (["--dtype", "float8"], "--dtype"),
    (["--device", "tpu"], "--device"),
    (["--mode", "eval"], "--mode"),
    (["--attention", "sparse"], "--attention"),
    (["--peak", "no-such-gpu"], "--peak"),
    (["--peak", "-3"], "--peak"),
    (["--detail-depth", "-1"], "--detail-depth"),
    (["--ops", "-2"], "--ops"),
    (["--format", "pdf"], "--format"),
    (["--mode", "generate", "--device", "meta"], "--device"),
]


@pytest.mark.parametrize("options, option", BAD_OPTIONS, ids=[" ".join(o) for o, _ in BAD_OPTIONS])
def test_invalid_values_are_usage_errors_naming_the_option_before_building(options, option, capsys, factory_file):
    code, out, err = run(capsys, "profile", f"{factory_file}:pair", *options)
    assert code == 2 and out == ""
    assert f"argument {option}" in err and "Traceback" not in err
    assert calls(factory_file) == []  # the factory was never called


def test_output_path_and_cuda_are_checked_before_building(capsys, factory_file, tmp_path):
    code, _, err = run(capsys, "profile", f"{factory_file}:pair", "-o", str(tmp_path))
    assert code == 2 and "argument -o/--output:" in err and "is a directory" in err
    if not torch.cuda.is_available():
        code, _, err = run(capsys, "profile", f"{factory_file}:pair", "--device", "cuda")
        assert code == 2 and "argument --device: CUDA is not available" in err
    assert calls(factory_file) == []


def test_options_a_zoo_model_cannot_use_are_usage_errors(capsys):
    needs_transformers()
    assert "argument --seq-len: resnet-18 takes images" in run(capsys, "profile", "resnet-18", "--seq-len", "4")[2]
    assert "argument --input-shape: bert-base takes token ids" in run(capsys, "profile", "bert-base",
                                                                       "--input-shape", "3,4")[2]
    assert "argument --seq-len: gpt2 has 1024 learned positions" in run(capsys, "profile", "gpt2",
                                                                        "--seq-len", "2048")[2]
    code, _, err = run(capsys, "profile", "bert-base", "--mode", "generate")
    assert code == 2 and "argument --mode: bert-base (BertModel) has no generate()" in err


def test_help_shows_the_defaults(capsys):
    code, out, _ = run(capsys, "profile", "--help")
    assert code == 0
    flat = " ".join(out.split())
    for text in ("samples per call (default: 1;", "(default: forward)", "(default: float32;", "(default: 3)",
                 "(default: -1)", "(default: 1; 0 on the meta device)", "(default: resnet-18)", "(default: 16)"):
        assert text in flat, text
    assert "profile" in run(capsys, "--help")[1] and "list" in run(capsys, "--help")[1]


def test_version(capsys):
    for argv in (["--version"], ["profile", "--version"]):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and out.startswith(f"flopsight {flopsight.__version__} (torch ")


# -- output ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, check", [
    ("report.txt", lambda text: text.startswith(HEADER)),
    ("report.json", lambda text: json.loads(text)["metadata"]["model"] == "Sequential"),
    ("report.csv", lambda text: text.splitlines()[0].startswith("rank,module") or "," in text.splitlines()[0]),
    ("report.ops.csv", lambda text: "op" in text.splitlines()[0]),
    ("report.md", lambda text: text.lstrip().startswith("#") or "|" in text),
    ("report.html", lambda text: text.lstrip().lower().startswith("<!doctype html>")),
    ("report.trace.json", lambda text: "traceEvents" in json.loads(text)),
])
def test_output_format_follows_the_extension(name, check, capsys, factory_file, tmp_path):
    path = tmp_path / "sub" / name  # a missing directory is made, as DeepSpeed does
    code, out, err = run(capsys, "profile", f"{factory_file}:pair", "-o", str(path), "--warm-up", "0")
    assert code == 0 and out == ""
    assert err == f"flopsight: wrote {path}\n"
    assert check(path.read_text())


def test_format_option_writes_to_stdout(capsys, factory_file):
    code, out, _ = run(capsys, "profile", f"{factory_file}:pair", "--format", "json", "--warm-up", "0")
    assert code == 0 and json.loads(out)["metadata"]["batch_size"] == 2


def test_text_options_reach_the_report(capsys, factory_file):
    code, out, _ = run(capsys, "profile", f"{factory_file}:pair", "--depth", "0", "--top", "1", "--no-detailed",
                       "--peak", "1e12", "--ops", "1", "--warm-up", "0")
    assert code == 0
    assert "depth 0:" in out and "depth 1:" not in out and "Detailed Profile" not in out
    assert "1 TFLOPS" in out  # the peak, beside the efficiency lines


# -- modes ------------------------------------------------------------------------------------------------
def test_train_mode_measures_forward_backward_and_step(capsys, tmp_path):
    needs_transformers()
    out = tmp_path / "r.json"
    path = config_file(tmp_path, architectures=["LlamaForCausalLM"])
    code, text, err = run(capsys, "profile", path, "--mode", "train", "--seq-len", "8", "--warm-up", "0")
    assert code == 0, err
    assert "bwd latency:" in text and "step latency:" in text
    # the built-in model computes its own loss from the labels it is given: its input ids
    assert err == "flopsight: note: --mode train: the loss is the model's own .loss (labels = its input ids)\n"
    assert run(capsys, "profile", path, "--mode", "train", "--seq-len", "8", "--device", "meta", "-o", str(out))[0] == 0
    result = flopsight.load(out)
    assert result.total.forward.macs == llama_macs(8, 32, 4, 2, 64, 2, 64)
    assert result.total.backward.macs > result.total.forward.macs
    assert result.module("").step.flops > 0  # AdamW's update, its own phase


def test_train_mode_says_once_that_the_loss_is_the_mean_of_the_output(capsys, factory_file, tmp_path):
    """A model without a loss of its own (a factory's Sequential returns a tensor): backward()
    runs on the mean of its output, and the command says so once for its three steps (one
    warm-up, two measured), before the report is written."""
    report = tmp_path / "r.json"
    code, out, err = run(capsys, "profile", f"{factory_file}:pair", "--mode", "train", "--warm-up", "1",
                         "--repeat", "2", "-o", str(report))
    assert code == 0 and out == ""
    assert err.splitlines() == ["flopsight: note: --mode train: the loss is the mean of the model's output "
                                "(it returns no .loss)", f"flopsight: wrote {report}"]


@pytest.mark.parametrize("mode", ["forward", "train"])
def test_repeat_measures_several_calls_or_steps(capsys, tmp_path, mode):
    needs_transformers()
    out = tmp_path / "r.json"
    path = config_file(tmp_path, architectures=["LlamaForCausalLM"])
    code, text, err = run(capsys, "profile", path, "--mode", mode, "--seq-len", "8", "--repeat", "3", "-o", str(out))
    assert code == 0, err
    result = flopsight.load(out)
    assert result.samples.count == 3 and result.samples.unit == ("step" if mode == "train" else "pass")
    assert result.total.forward.macs == llama_macs(8, 32, 4, 2, 64, 2, 64)  # one call's, not three


def test_generate_mode_profiles_prefill_and_decode(capsys, tmp_path):
    needs_transformers()
    out = tmp_path / "r.json"
    path = config_file(tmp_path, architectures=["LlamaForCausalLM"])
    code, _, err = run(capsys, "profile", path, "--mode", "generate", "--seq-len", "4", "--max-new-tokens", "3",
                       "--warm-up", "0", "-o", str(out))
    assert code == 0, err
    result = flopsight.load(out)
    assert result.metadata.mode == "generate" and len(result.calls) == 3  # prefill and two decode steps


# -- list, progress, make demo ------------------------------------------------------------------------------
def test_list_shows_the_zoo_with_parameter_counts(capsys):
    needs_transformers()
    code, out, _ = run(capsys, "list")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(rows) == set(zoo.ZOO)
    assert "70.55 B" in rows["llama-3-70b"] and "input_ids [1, 128]" in rows["llama-3-70b"]
    assert "11.69 M" in rows["resnet-18"] and "x [1, 3, 224, 224]" in rows["resnet-18"]
    assert "input_ids [1, 77], pixel_values [1, 3, 224, 224]" in rows["clip"]


def test_without_transformers_the_plain_torch_models_still_work(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers: ImportError
    code, out, _ = run(capsys, "list")
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line}
    assert code == 0 and "(needs transformers)" in rows["bert-base"] and "11.69 M" in rows["resnet-18"]
    code, _, err = run(capsys, "profile", "gpt2")
    assert code == 2 and "gpt2 is built by transformers, which is not installed" in err
    assert run(capsys, "profile", "resnet18", "--input-shape", "3,32,32", "--no-detailed")[0] == 0


def test_no_progress_bar_without_a_terminal(capsys, factory_file):
    code, out, err = run(capsys, "profile", f"{factory_file}:pair", "--warm-up", "0")
    assert code == 0 and err == ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_on_a_terminal(factory_file):
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "flopsight", "profile", f"{factory_file}:pair", "--warm-up", "2",
                                "--repeat", "1"],
                               stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    out = process.stdout.read().decode()
    assert process.wait(timeout=120) == 0
    os.close(leader)
    drawn = drawn.decode()
    assert "1/3 build" in drawn and "2/3 profile 0/3" in drawn and "3/3 render" in drawn
    assert drawn.endswith("\r\x1b[K")  # erased before the report is printed
    assert out.startswith(HEADER)


def test_make_demo_prints_the_report_and_nothing_else():
    done = subprocess_run()
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(HEADER) and "fwd MACs per GPU:".ljust(70) + "  1.81 GMACs" in done.stdout


def test_make_demo_without_numpy_prints_no_warning():
    # a torch-only venv has no numpy: torch warns "Failed to initialize NumPy" on import
    done = subprocess_run("--no-detailed", prelude="import sys; sys.modules['numpy'] = None")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(HEADER)


def test_the_output_never_replaces_the_models_own_files(capsys, factory_file, tmp_path):
    source = factory_file.read_text()
    code, _, err = run(capsys, "profile", f"{factory_file}:pair", "-o", str(factory_file), "--force")
    assert code == 2 and "is the model's factory: the report would replace it" in err
    assert factory_file.read_text() == source
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    code, _, err = run(capsys, "profile", f"{factory_file}:pair", "-o", str(notes))
    assert code == 2 and "not a report flopsight or DeepSpeed wrote" in err and notes.read_text() == '{"mine": true}'
    calls = tmp_path / "calls.txt"
    assert not calls.exists()  # refused before the model was built
    assert run(capsys, "profile", f"{factory_file}:pair", "-o", str(notes), "--force")[0] == 0
    assert flopsight.load(notes).total.forward.macs == 2 * 8 * 4 + 2 * 4 * 2
    code, _, err = run(capsys, "profile", f"{factory_file}:pair", "-o", str(tmp_path / "r.yaml"))
    assert code == 2 and "names no report format" in err


# -- a quick command line: parsing imports no torch -------------------------------------------------------------
def test_the_options_name_what_the_modules_define():
    from flopsight.cli import options
    from flopsight.cli.build import DTYPES
    from flopsight.formulas.attention import ATTENTION_CONVENTIONS
    from flopsight.renderers import FORMATS

    assert options.FORMATS == tuple(FORMATS)
    assert options.DTYPE_NAMES == tuple(DTYPES)
    assert options.ATTENTION == tuple(ATTENTION_CONVENTIONS)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["list"], ["profile", "--help"],
                                  ["profile", "gpt2", "--batch-size", "0"], ["profile", "--mode", "fly"]])
def test_help_version_list_and_usage_errors_import_no_torch(argv):
    script = ("import sys\nfrom flopsight.cli.main import main\ncode = main(sys.argv[1:])\n"
              "print('TORCH', 'torch' in sys.modules, code)")
    proc = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("TORCH False"), (argv, last, proc.stderr[-500:])
    assert last.endswith(" 2") == (argv[0] == "profile" and "--help" not in argv)  # usage errors: exit status 2


def test_a_config_of_an_unknown_model_type_is_one_short_line(capsys, tmp_path):
    needs_transformers()
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "lama", "hidden_size": 64}')
    code, _, err = run(capsys, "profile", str(config))
    line = err.strip().splitlines()[-1]
    assert code == 2 and "unknown model_type 'lama'" in line and "closest known: llama" in line
    assert len(line) < 300


def test_a_factory_that_returns_something_else_says_what_it_got_and_what_is_accepted(capsys, tmp_path):
    factory = tmp_path / "wrong_factories.py"
    factory.write_text("import torch\n"
                       "def number():\n    return 3\n"
                       "def triple():\n    return torch.nn.Linear(2, 2), (torch.ones(1, 2),), 'x'\n"
                       "def pairs():\n    return [1, 'a', 2.0, None]\n")
    for name, got in [("number", "the factory returned int;"), ("triple", "the factory returned (model, args, str);"),
                      ("pairs", "the factory returned a list of 4 (int, str, float, ...);")]:
        code, _, err = run(capsys, "profile", f"{factory}:{name}")
        assert code == 2 and got in err and "expected a torch.nn.Module, (model, inputs)" in err, err
