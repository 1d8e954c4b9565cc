"""The attention convention option on every front-end: validated, recorded, applied."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import flopsight
from flopsight import get_model_profile


class Causal(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)


# (batch 1, 2 heads, 8 positions, head dim 4): dense scores 2 * 8 * 8 = 128, QK^T and AV
# 128 * 4 MACs each = 1024 MACs. Causal keeps 8 * 9 / 2 = 36 of 64 entries per head: 72
# scores, 72 * 4 * 2 = 576 MACs.
Q = torch.ones(1, 2, 8, 4)


def test_profile_counts_dense_by_default_and_effective_when_asked():
    dense = flopsight.profile(Causal(), Q, warm_up=0)
    effective = flopsight.profile(Causal(), Q, warm_up=0, attention="effective")
    assert (dense.total.forward.macs, effective.total.forward.macs) == (1024, 576)
    assert (dense.metadata.attention, effective.metadata.attention) == ("dense", "effective")


def test_profiler_and_get_model_profile_take_the_option_too():
    model = Causal()
    with flopsight.Profiler(model, attention="effective") as prof:
        model(Q)
    assert prof.result.total.forward.macs == 576
    _, macs, _ = get_model_profile(model, args=[Q], attention="effective", print_profile=False, as_string=False)
    assert macs == 576


@pytest.mark.parametrize("call", [
    lambda: flopsight.profile(Causal(), Q, attention="sparse"),
    lambda: flopsight.Profiler(Causal(), attention=None),
    lambda: get_model_profile(Causal(), args=[Q], attention="causal", print_profile=False),
])
def test_an_unknown_convention_is_named_before_the_model_runs(call):
    with pytest.raises(ValueError, match="attention: expected one of 'dense', 'effective'"):
        call()
