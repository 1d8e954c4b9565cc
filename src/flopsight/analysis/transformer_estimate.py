"""The analytic FLOPs of a transformer language model beside the measured count.

Two estimates, per forward and backward of the profiled tokens:

* PaLM (Chowdhery et al. 2022, appendix B): ``6N + 12·L·H·Q·T`` FLOPs per token for a
  training step (``2N + 4·L·H·Q·T`` forward only), N every parameter once, L layers, H·Q
  the query width (heads x head dim), T the sequence length;
* Megatron-LM (Narayanan et al. 2021): ``72·B·s·l·h²·(1 + s/6h + V/12hl)`` per training
  step (a third of it forward only), which assumes multi-head attention and a 4h MLP.

The difference from the measured FLOPs is explained by part: embeddings (lookups cost no
FLOPs but their parameters are in N), the LM head (tied to the embedding, its product is
measured but its parameters are counted there), the attention score and value products
(the 12·L·H·Q·T term; less under ``attention="effective"``), MoE routing (only the active
experts run; N counts all of them), and the rest (norms, activations, softmax, residual
adds and biases, which are not 2 FLOPs per parameter). The parts add up to the difference
exactly. What is read from where is in ``docs/efficiency.md``; the report's wording of the
check is :mod:`flopsight.renderers.efficiency_lines`'s.

>>> import torch, flopsight
>>> transformer_check(flopsight.profile(torch.nn.Linear(4, 4), torch.ones(1, 4))) is None   # not a transformer LM
True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._checks import check_int
from ..result.metadata import Inputs, TensorSpec
from ..result.profile_result import ProfileResult
from ..result.tree import ModuleNode

__all__ = ["TransformerShape", "Part", "TransformerCheck", "transformer_shape", "transformer_check"]

_STACKS = ("ModuleList", "Sequential", "ModuleDict")
_QUERY_NAMES = ("q_proj", "query", "q", "wq", "q_lin", "to_q", "q_attn")


@dataclass(frozen=True)
class TransformerShape:
    """What the estimates need, and where each figure came from (``sources``: ``config``,
    ``given``, ``module tree``, ``inputs`` or ``measured``)."""

    layers: int  # L (Megatron's l)
    hidden: int  # h
    attention_width: int  # H·Q: query heads x head dim
    vocab: int  # V
    batch: int  # B, per forward call
    seq_len: int  # T (Megatron's s)
    calls: int  # forward calls of the model in the profile (micro-batches)
    params: int  # N: every parameter once
    embedding_params: int
    head_params: int  # the LM head's parameters not shared with an embedding (0 when tied)
    tied: bool
    expert_params: int = 0  # every routed expert's parameters (0 for a dense model)
    active_expert_fraction: float | None = None  # k/E
    sources: dict[str, str] = field(default_factory=dict)
    #: module paths of each part: the layer stack, embeddings, LM head, attention, experts
    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Tokens over the whole profile: batch x sequence x forward calls."""
        return self.batch * self.seq_len * self.calls

    @property
    def active_params(self) -> float:
        """N less the experts that do not run: N - (1 - k/E) x expert params."""
        if not self.expert_params or self.active_expert_fraction is None:
            return float(self.params)
        return self.params - (1 - self.active_expert_fraction) * self.expert_params


@dataclass(frozen=True)
class Part:
    """One part of the model: the FLOPs the PaLM estimate gives it, those measured, and why
    they differ, as a key the renderers word: ``"lookups"`` (embeddings cost no FLOPs),
    ``"tied"`` or ``"untied"`` (the LM head's params counted under the embedding, or its
    own), ``"dense"`` or ``"effective"`` (how the attention products were counted),
    ``"routed"`` (only the routed experts run), ``"other"`` (FLOPs not 2 per param)."""

    name: str
    estimate: float
    measured: int
    explanation: str

    @property
    def difference(self) -> float:
        return self.measured - self.estimate


@dataclass(frozen=True)
class TransformerCheck:
    """The estimates beside the measured model FLOPs (forward, plus backward when trained;
    recompute and the optimizer step left out), the difference split into ``parts``."""

    shape: TransformerShape
    training: bool
    palm: float
    palm_active: float | None  # MoE only: with N_active in place of N
    megatron: float
    measured: int
    parts: list[Part]
    attention: str  # the result's counting convention, "dense" or "effective"


# -- reading the result --------------------------------------------------------------------
def _linear_dims(node: ModuleNode) -> tuple[int, int] | None:
    """(in, out) of a linear layer (nn.Linear, transformers' Conv1D), as capture recorded it."""
    layer = node.layer
    return (layer.inputs, layer.outputs) if layer is not None and layer.kind == "linear" else None


def _embedding_dims(node: ModuleNode) -> tuple[int, int] | None:
    """(vocabulary, width) of an embedding table with parameters, as capture recorded it."""
    layer = node.layer
    if node.children or not node.params or layer is None or layer.kind != "embedding":
        return None
    return layer.inputs, layer.outputs


def _is_attention(node: ModuleNode) -> bool:
    if any("attention" in op.lower() for ops in node.record.ops.values() for op in ops):
        return True
    return "Attention" in node.type_name and bool(node.children)


def _under(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor + ".") or ancestor == ""


def _tokens_of_inputs(inputs: Inputs | None) -> tuple[int, int] | None:
    """(batch, sequence) of the first 2-D integer tensor among the recorded inputs (the
    token ids): the first argument, ``input_ids``, then the other arguments."""
    if not inputs:
        return None
    for spec in [*inputs.args[:1], inputs.kwargs.get("input_ids"), *inputs.args[1:]]:
        if isinstance(spec, TensorSpec) and len(spec.shape) == 2 and spec.dtype.startswith(("int", "uint")):
            return spec.shape
    return None


def _config_value(config: Any, *names: str) -> Any:
    for name in names:
        value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
        if value is not None:
            return value
    return None


def _phases(result: ProfileResult) -> tuple[str, ...]:
    return ("forward", "backward") if "backward" in result.phases else ("forward",)


def _flops(node: ModuleNode, phases: tuple[str, ...]) -> int:
    return sum(node.inclusive[p].flops for p in phases)


def transformer_shape(result: ProfileResult, config: Any = None, **given: Any) -> TransformerShape | None:
    """The figures of a transformer LM, from ``given`` numbers first, then an HF ``config``
    (a ``PretrainedConfig`` or a dict), then the module tree and the recorded inputs; None
    for a model that is not a single stack of attention layers over a token embedding (an
    encoder-decoder, a CNN), for a generate() profile, or without the token count.
    ``given`` keys are those of :func:`transformer_check`."""
    if result.metadata.mode == "generate":
        return None
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    nodes = list(result.walk())
    embedding_dims = {n.name: dims for n in nodes if (dims := _embedding_dims(n))}  # path -> (vocabulary, width)
    embeddings = [n for n in nodes if n.name in embedding_dims]
    attention = [n.name for n in nodes if _is_attention(n)]
    stacks = [n for n in nodes if n.type_name in _STACKS and n.children
              and len({result.module(c).type_name for c in n.children}) == 1
              and all(any(_under(a, c) for a in attention) for c in n.children)]
    if not embeddings or len(stacks) != 1:
        return None
    stack = stacks[0]
    sources: dict[str, str] = {}

    def pick(key: str, config_names: tuple[str, ...], fallback: Any, fallback_source: str) -> Any:
        if given.get(key) is not None:
            sources[key] = "given"
            return given[key]
        value = _config_value(config, *config_names) if config is not None else None
        if value is not None:
            sources[key] = "config"
            return value
        sources[key] = fallback_source
        return fallback

    # the token embedding: the one the LM head projects back to, else the largest
    heads_out = {dims[1]: n for n in nodes
                 if not n.children and not _under(n.name, stack.name) and (dims := _linear_dims(n))}
    token = next((e for e in embeddings if embedding_dims[e.name][0] in heads_out),
                 max(embeddings, key=lambda e: e.params))
    vocab_tree, hidden_tree = embedding_dims[token.name]
    vocab = pick("vocab", ("vocab_size",), vocab_tree, "module tree")
    hidden = pick("hidden", ("hidden_size", "n_embd", "d_model"), hidden_tree, "module tree")
    layers = pick("layers", ("num_hidden_layers", "n_layer", "num_layers"), len(stack.children), "module tree")

    # H·Q: heads x head dim where both are given or configured; else the query projection's
    # output; else the hidden size (a fused QKV projection hides the query's share)
    heads = given.get("heads") or (_config_value(config, "num_attention_heads", "n_head")
                                   if config is not None else None)
    head_dim = given.get("head_dim") or (_config_value(config, "head_dim") if config is not None else None)
    first_attention = next(result.module(a) for a in attention if _under(a, stack.children[0]))
    query = [_linear_dims(result.module(c)) for c in first_attention.children if c.rsplit(".", 1)[-1] in _QUERY_NAMES]
    if heads and head_dim:
        width, sources["attention_width"] = heads * head_dim, "given" if given.get("heads") else "config"
    elif query and query[0]:
        width, sources["attention_width"] = query[0][1], "module tree"
    else:
        width, sources["attention_width"] = hidden, "hidden size"

    recorded = _tokens_of_inputs(result.metadata.inputs) or (None, None)
    batch = pick("batch_size", (), recorded[0], "inputs")
    seq_len = pick("seq_len", (), recorded[1], "inputs")
    if not batch or not seq_len:
        return None
    calls = max(len(result.root_calls), 1)

    head = heads_out.get(vocab)
    n_params = result.total.params
    n_embed = sum(e.params for e in embeddings)
    tied = given.get("tied_embeddings")
    if tied is None and config is not None:
        tied = _config_value(config, "tie_word_embeddings")
    head_dims = None if head is None else _linear_dims(head)  # a linear layer's: heads_out holds only those
    head_weight = 0
    if head_dims is not None:
        fan_in, fan_out = head_dims
        head_weight = fan_in * fan_out
    if tied is None:
        # a weight shared between modules is counted in each module but once in the model:
        # tied when the head's weight is the token embedding's size and that much is shared
        shared = sum(n.params for n in nodes if not n.children) - n_params
        tied = head is not None and head_weight == token.params and shared >= head_weight
    # tied: the weight is counted under the embeddings; a bias stays the head's own
    head_params = 0 if head is None else head.params - (head_weight if tied else 0)

    experts = [n for n in nodes if n.name.rsplit(".", 1)[-1] == "experts"
               and not any(_under(n.name, e.name) and n is not e
                           for e in nodes if e.name.rsplit(".", 1)[-1] == "experts")]
    expert_params = sum(e.params for e in experts)
    fraction = None
    if experts:
        n_experts = given.get("experts") or (_config_value(config, "num_local_experts", "num_experts",
                                                           "n_routed_experts", "moe_num_experts")
                                             if config is not None else None)
        top_k = given.get("experts_per_token") or (_config_value(config, "num_experts_per_tok", "moe_top_k")
                                                    if config is not None else None)
        if n_experts and top_k:
            fraction = top_k / n_experts
            sources["active_expert_fraction"] = "given" if given.get("experts") else "config"
        else:  # each token runs k of the E experts: their forward MACs are k/E of params x tokens
            macs = sum(e.forward.macs for e in experts)
            fraction = macs / (batch * seq_len * calls * expert_params) if expert_params else 0.0
            sources["active_expert_fraction"] = "measured"
    return TransformerShape(
        layers=int(layers), hidden=int(hidden), attention_width=int(width), vocab=int(vocab), batch=int(batch),
        seq_len=int(seq_len), calls=calls, params=n_params, embedding_params=n_embed, head_params=head_params,
        tied=bool(tied), expert_params=expert_params, active_expert_fraction=fraction, sources=sources,
        paths={"stack": (stack.name,), "embeddings": tuple(e.name for e in embeddings),
               "head": (head.name,) if head is not None else (), "attention": tuple(attention),
               "experts": tuple(e.name for e in experts)},
    )


# -- the check -----------------------------------------------------------------------------
def transformer_check(result: ProfileResult, config: Any = None, *, layers: int | None = None,
                      hidden: int | None = None, heads: int | None = None, head_dim: int | None = None,
                      vocab: int | None = None, batch_size: int | None = None, seq_len: int | None = None,
                      experts: int | None = None, experts_per_token: int | None = None,
                      tied_embeddings: bool | None = None) -> TransformerCheck | None:
    """The PaLM and Megatron-LM estimates beside the measured FLOPs, explained by part;
    None for a model that is not a transformer LM (see :func:`transformer_shape`).

    ``config``: an HF config (or dict) to read the hyperparameters from; the keywords give
    them explicitly (they win). Without either, they are read from the module tree (layers
    from the layer stack, vocab and hidden size from the token embedding, H·Q from the
    query projection, else the hidden size) and the tokens from the recorded inputs.
    """
    given = dict(layers=layers, hidden=hidden, heads=heads, head_dim=head_dim, vocab=vocab, batch_size=batch_size,
                 seq_len=seq_len, experts=experts, experts_per_token=experts_per_token, tied_embeddings=tied_embeddings)
    for key, value in given.items():
        if key != "tied_embeddings":
            check_int(value, key, low=1, optional=True)
    if not isinstance(result, ProfileResult):
        raise TypeError(f"result: expected a flopsight ProfileResult, got {type(result).__name__}")
    shape = transformer_shape(result, config, **given)
    if shape is None:
        return None
    phases = _phases(result)
    training = phases == ("forward", "backward")
    per_param, per_attention = (6, 12) if training else (2, 4)
    tokens = shape.tokens
    def nodes(part: str) -> list[ModuleNode]:
        return [result.module(p) for p in shape.paths[part]]

    embed_nodes, head_nodes, expert_nodes, attention_nodes = (
        nodes("embeddings"), nodes("head"), nodes("experts"), nodes("attention"))
    measured_total = _flops(result.total, phases)
    embed = sum(_flops(n, phases) for n in embed_nodes)
    head = sum(_flops(n, phases) for n in head_nodes)
    # the experts' products, 2 FLOPs per MAC (their activations and the routing weights'
    # multiplies go to "the rest"), so the part is exactly what routing leaves out
    moe = sum(2 * n.inclusive[p].macs for n in expert_nodes for p in phases)
    # the score and value products: the MACs in the attention modules' own code (their
    # projections are submodules), 2 FLOPs each; softmax and scaling stay in "the rest"
    products = sum(2 * n.self[p].macs for n in attention_nodes for p in phases)

    attention_estimate = per_attention * shape.layers * shape.attention_width * shape.seq_len * tokens
    rest_params = shape.params - shape.embedding_params - shape.head_params - shape.expert_params
    parts = [
        Part("embeddings", per_param * shape.embedding_params * tokens, embed, "lookups"),
        Part("LM head", per_param * shape.head_params * tokens, head, "tied" if shape.tied else "untied"),
        Part("attention QK^T and AV", attention_estimate, products,
             "effective" if result.metadata.attention == "effective" else "dense"),
    ]
    if shape.expert_params:
        parts.append(Part("MoE experts", per_param * shape.expert_params * tokens, moe, "routed"))
    rest = measured_total - embed - head - products - (moe if shape.expert_params else 0)
    parts.append(Part("the rest", per_param * rest_params * tokens, rest, "other"))

    palm = per_param * shape.params * tokens + attention_estimate
    palm_active = (per_param * shape.active_params * tokens + attention_estimate) if shape.expert_params else None
    s, h, l, v = shape.seq_len, shape.hidden, shape.layers, shape.vocab
    megatron = 72 * shape.batch * shape.calls * s * l * h**2 * (1 + s / (6 * h) + v / (12 * h * l))
    if not training:
        megatron /= 3  # the backward is twice the forward in this formula
    return TransformerCheck(shape, training, palm, palm_active, megatron, measured_total, parts,
                            result.metadata.attention)
