"""Bytes moved per op (docs/conventions/bytes.md), each expected number derived by hand."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import flopsight


def moved(fn, *args, phase="forward"):
    """Bytes per op of ``fn(*args)`` profiled as a module's forward (and backward if asked)."""
    class Call(nn.Module):
        def forward(self, *a):
            return fn(*a)

    model = Call()
    with flopsight.Profiler(model) as prof:
        out = model(*args)
        if phase == "backward":
            out.sum().backward()
    return prof.result.modules[""].bytes_moved.get(phase, {})


def test_linear_reads_bias_input_weight_and_writes_output():
    # addmm(bias 8, x 3x4, weight.t() 4x8) -> 3x8, fp32: (8 + 12 + 32 + 24) * 4 = 304; t() is a view
    model = nn.Linear(4, 8)
    result = flopsight.profile(model, torch.ones(3, 4), warm_up=0)
    assert result.modules[""].bytes_moved == {"forward": {"aten.addmm": 304}}


def test_convolution_by_hand():
    # input 2*3*16*16 = 1536, weight 8*3*3*3 = 216, bias 8, output 2*8*16*16 = 4096 values:
    # 5856 * 4 bytes = 23424
    result = flopsight.profile(nn.Conv2d(3, 8, 3, padding=1), torch.ones(2, 3, 16, 16), warm_up=0)
    assert result.modules[""].bytes_moved == {"forward": {"aten.convolution": 23424}}


def test_broadcast_operand_is_read_once():
    # x 3x4 + b 4 (expanded, stride 0): 12 + 4 read, 12 written: 28 * 4 = 112
    assert moved(torch.add, torch.ones(3, 4), torch.ones(4)) == {"aten.add": 112}


def test_embedding_reads_the_rows_it_gathers_not_the_table():
    # 5 int64 indices (40 bytes) + 5 rows of 16 fp32 read (320), 320 written: 680
    emb = nn.Embedding(1000, 16)
    result = flopsight.profile(emb, torch.tensor([1, 2, 3, 4, 5]), warm_up=0)
    assert result.modules[""].bytes_moved == {"forward": {"aten.embedding": 680}}


def test_views_move_nothing_and_copies_move_both_ways():
    x = torch.ones(4, 6)
    assert moved(lambda t: t.view(6, 4).t(), x) == {}
    # clone: 24 values read, 24 written, fp32: 192
    assert moved(torch.clone, x) == {"aten.clone": 192}
    # copy_(dst, src): src 24 values read, dst 24 written: 192 (dst is not read)
    assert moved(lambda d, s: d.copy_(s), torch.zeros(4, 6), x) == {"aten.copy_": 192}
    # zero_ writes its 24 values only; empty writes nothing
    assert moved(lambda d: d.zero_(), torch.ones(4, 6)) == {"aten.zero_": 96}
    assert moved(lambda: torch.empty(4, 6)) == {}


def test_in_place_foreach_writes_its_first_list():
    # _foreach_add_([a, b], [c, d]): reads 4 tensors of 3 fp32 (48), writes a and b (24): 72
    a, b, c, d = (torch.ones(3) for _ in range(4))
    assert moved(lambda *t: torch._foreach_add_([t[0], t[1]], [t[2], t[3]]), a, b, c, d) == {"aten._foreach_add_": 72}


def test_attention_counted_whole_moves_its_arguments_and_output():
    # q, k, v 1x2x8x4 fp32 (64 values each) read, output 64 written: 256 * 4 = 1024 forward;
    # backward: the output's gradient (64) and q, k, v again (192), their gradients (192): 448 * 4
    q, k, v = (torch.ones(1, 2, 8, 4, requires_grad=True) for _ in range(3))
    fwd = moved(F.scaled_dot_product_attention, q, k, v)
    assert fwd["scaled_dot_product_attention"] == 1024
    bwd = moved(F.scaled_dot_product_attention, q, k, v, phase="backward")
    assert bwd["scaled_dot_product_attention.backward"] == 1792


def test_same_bytes_on_meta():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    cpu = flopsight.profile(model, torch.ones(3, 4), warm_up=0)
    meta = flopsight.profile(model.to("meta"), torch.ones(3, 4, device="meta"), warm_up=0)
    assert {p: m.bytes_moved for p, m in cpu.modules.items()} == {p: m.bytes_moved for p, m in meta.modules.items()}
