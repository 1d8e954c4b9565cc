"""Training steps: the backward pass measured per module, recompute, optimizer step, spans."""

import pytest
import torch
from helpers import gpt2_small
from torch import nn
from torch.utils.checkpoint import checkpoint

import flopsight

B = 5  # batch size in these tests


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 8), nn.Linear(8, 4))


def linear_backward(i, o, *, grad_input=True, grad_weight=True, bias=True):
    """(MACs, FLOPs) of a Linear(i, o) backward on a batch of B rows: grad_input = g @ W
    (B*o*i MACs), grad_weight = g^T @ x (o*B*i MACs), grad_bias = g summed over the batch
    (B*o adds)."""
    macs = B * i * o * (int(grad_input) + int(grad_weight))
    return macs, 2 * macs + (B * o if bias and grad_weight else 0)


def train_step(model, x, **kwargs):
    with flopsight.Profiler(model, **kwargs) as prof:
        model(x).sum().backward()
    return prof.result


def test_first_layer_backward_is_1x_its_forward_and_later_layers_2x():
    result = train_step(mlp(), torch.randn(B, 16))
    for i, (fan_in, fan_out) in enumerate([(16, 32), (32, 8), (8, 4)]):
        stats = result.module(str(i))
        assert stats.forward.macs == B * fan_in * fan_out
        # the input of the first layer needs no gradient: only grad_weight is computed
        assert (stats.backward.macs, stats.backward.flops) == linear_backward(fan_in, fan_out, grad_input=i > 0)
    assert result.total.backward.macs == B * (16 * 32 + 2 * 32 * 8 + 2 * 8 * 4)
    assert result.unsupported_ops == {}


def test_frozen_layer_computes_only_its_input_gradient():
    model = mlp()
    model[1].requires_grad_(False)
    result = train_step(model, torch.randn(B, 16))
    assert (result.module("1").backward.macs, result.module("1").backward.flops) == linear_backward(
        32, 8, grad_weight=False
    )
    assert result.module("2").backward.macs == 2 * B * 8 * 4


def test_backward_latency_is_measured_per_module_and_as_a_span():
    result = train_step(mlp(), torch.randn(B, 16))
    assert all(result.module(str(i)).backward.latency > 0 for i in range(3))
    assert len(result.spans["backward"]) == 1 and result.iteration.backward.latency > 0
    # per-module backward time is the time of its own kernels: within the whole pass
    assert result.total.backward.latency <= result.iteration.backward.latency


class Checkpointed(nn.Module):
    """Linear -> checkpointed Sequential(Linear, Linear) -> Linear."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.head = nn.Linear(16, 32)
        self.block = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
        self.tail = nn.Linear(32, 4)

    def forward(self, x):
        h = checkpoint(self.block, self.head(x), use_reentrant=self.reentrant)
        return self.tail(h)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recompute_is_its_own_phase(reentrant):
    torch.manual_seed(0)
    model = Checkpointed(reentrant)
    x = torch.randn(B, 16, requires_grad=reentrant)  # the reentrant variant needs an input that requires grad
    result = train_step(model, x)
    block = B * 32 * 32  # MACs of one Linear(32, 32)
    assert result.module("block").forward.macs == 2 * block
    assert result.module("block").backward.macs == 2 * 2 * block
    # reentrant re-runs the whole block; non-reentrant stops as soon as it has what backward
    # needs: the second Linear saves its *input*, the first Linear's output, so only the
    # first Linear is re-run
    assert result.module("block").recompute.macs == (2 * block if reentrant else block)
    assert result.module("block.1").recompute.macs == (block if reentrant else 0)
    it = result.iteration
    assert it.recompute.macs == result.module("block").recompute.macs
    assert it.flops == it.model_flops + it.recompute.flops  # hardware vs model FLOPs
    assert result.module("head").backward.macs == (2 if reentrant else 1) * B * 16 * 32


def test_gradient_accumulation_reports_totals_over_the_same_span():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    micro = [torch.randn(B, 16) for _ in range(4)]
    with flopsight.Profiler(model, optimizer=opt) as prof:
        for x in micro:
            (model(x).sum() / 4).backward()
        opt.step()
    result = prof.result
    single = train_step(mlp(), micro[0])
    it = result.iteration
    assert it.micro_batches == 4 and len(result.spans["backward"]) == 4 and result.step.calls == 1
    assert it.forward.macs == 4 * single.total.forward.macs
    assert it.backward.macs == 4 * single.total.backward.macs
    assert it.samples == 4 * B
    # FLOPs and time over the same span: the rate is the whole span's
    assert it.flops_per_second == pytest.approx(it.flops / it.latency)
    assert it.latency >= it.forward.latency + it.backward.latency + it.step.latency


def test_optimizer_step_is_measured_without_changing_the_loop():
    model = mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with flopsight.Profiler(model) as prof:  # no optimizer given: any optimizer's step counts
        model(torch.randn(B, 16)).sum().backward()
        opt.step()
    step = prof.result.step
    assert step.calls == 1 and step.latency > 0 and step.flops > 0
    assert prof.result.total.self.step.flops == step.flops  # the step's ops belong to the root
    assert prof.result.unsupported_ops == {}


def test_only_the_given_optimizer_is_the_step_phase():
    model = mlp()
    mine = torch.optim.SGD(model.parameters(), lr=0.1)
    other = torch.optim.SGD([nn.Parameter(torch.ones(3))], lr=0.1)
    with flopsight.Profiler(model, optimizer=mine) as prof:
        model(torch.randn(B, 16)).sum().backward()
        other.param_groups[0]["params"][0].grad = torch.ones(3)
        other.step()
    assert prof.result.step.calls == 0 and "step" not in prof.result.spans


def test_batch_size_is_read_from_the_inputs_unless_given():
    model = mlp()
    assert train_step(model, torch.randn(B, 16)).iteration.samples == B
    assert train_step(model, torch.randn(B, 16), batch_size=64).iteration.samples == 64


def test_backward_of_an_unprofiled_forward_warns_and_goes_to_the_root():
    model = mlp()
    loss = model(torch.randn(B, 16)).sum()  # forward outside the profiled span
    with pytest.warns(flopsight.UnprofiledForwardWarning, match="Start profiling before the forward pass"):
        with flopsight.Profiler(model) as prof:
            loss.backward()
    result = prof.result
    assert result.total.backward.macs == result.total.self.backward.macs == B * (16 * 32 + 2 * 32 * 8 + 2 * 8 * 4)


def test_a_loss_that_does_not_require_grad_raises_torchs_error_and_leaves_nothing_behind():
    model = mlp()
    prof = flopsight.Profiler(model)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):  # torch's words
        with prof:
            with torch.no_grad():
                loss = model(torch.randn(B, 16)).sum()
            loss.backward()
    assert not prof.running


def test_training_result_round_trips():
    result = train_step(mlp(), torch.randn(B, 16))
    again = flopsight.ProfileResult.from_dict(result.to_dict())
    assert again == result and again.iteration == result.iteration


transformers = pytest.importorskip("transformers")


def test_gpt2_small_generate_prefill_and_decode_steps_derived_by_hand():
    H, V, P, N, layers = 768, 50257, 8, 4, 12  # GPT-2 small: the default GPT2Config
    model = gpt2_small()
    ids = torch.randint(2, V, (1, P))
    generate = {"max_new_tokens": N, "min_new_tokens": N, "do_sample": False, "pad_token_id": 0}
    with torch.no_grad():
        result = flopsight.profile(model, ids, kwargs=generate, mode="generate", warm_up=0)
    gen = result.generation

    def layer(new, keys):
        # c_attn new*H*3H, QK^T and AV new*keys*H each, c_proj new*H*H, MLP 2*new*H*4H
        return 12 * new * H * H + 2 * new * keys * H

    # generate() asks for logits of the last position only: H*V per call
    prefill = layers * layer(P, P) + H * V
    steps = [layers * layer(1, P + t) + H * V for t in range(1, N)]  # the KV cache holds P + t keys
    assert gen.prefill.macs == prefill == 719_254_272
    assert [c.stats.macs for c in result.root_calls[1:]] == steps
    assert gen.decode.macs == sum(steps) and gen.decode.calls == N - 1
    assert gen.per_step.macs == round(sum(steps) / (N - 1))
    assert gen.new_tokens == N and gen.batch_size == 1
    assert gen.total.macs == result.total.forward.macs >= prefill + sum(steps)
    assert gen.prefill.latency > 0 and gen.total.latency >= gen.prefill.latency + gen.decode.latency


def test_bert_sequence_classification_training_step():
    L, H, I, N = 32, 768, 3072, 2
    config = transformers.BertConfig(num_hidden_layers=N)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    inputs = {"input_ids": torch.ones(2, L, dtype=torch.long), "labels": torch.zeros(2, dtype=torch.long)}
    with flopsight.Profiler(model, optimizer=opt) as prof:
        model(**inputs).loss.backward()
        opt.step()
    result = prof.result
    assert result.unsupported_ops == {}
    B = 2
    layer = B * (4 * L * H * H + 2 * L * L * H + 2 * L * H * I)  # per encoder layer, forward
    for i in range(N):
        stats = result.module(f"bert.encoder.layer.{i}")
        assert stats.forward.macs == layer
        # every Linear's input descends from trainable embeddings, so it needs a gradient:
        # grad_input and grad_weight, 2x; attention computes dQ, dK, dV and dP, 2x too
        assert stats.backward.macs == 2 * layer
    assert result.total.backward.macs == 2 * result.total.forward.macs  # embeddings have no MACs
    assert result.module("bert.embeddings.word_embeddings").backward.flops > 0  # rows added into the grad
    params = sum(p.numel() for p in model.parameters())
    assert result.step.calls == 1 and result.step.flops == 14 * params + len(list(model.parameters()))  # AdamW
    it = result.iteration
    assert it.samples == B and it.backward.latency > 0 and it.step.latency > 0
