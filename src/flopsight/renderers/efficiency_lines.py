"""The efficiency section's wording, as (label, value) pairs for the text and Markdown reports.

:func:`format_efficiency` words an :class:`~flopsight.analysis.report.EfficiencySection`
(the peak used printed beside every ratio) and :func:`format_transformer_check` a
:class:`~flopsight.analysis.transformer_estimate.TransformerCheck`; :func:`efficiency_lines`
and :func:`transformer_check_lines` build those from a result first.

>>> import torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(64, 64), torch.ones(32, 64), clock=flopsight.FakeClock())
>>> print(*efficiency_lines(result, peak=1e12)[1:], sep="\\n")
('fwd fraction of peak (peak 1 TFLOPS fp32, given)', '0.03%')
('fwd bytes moved, arithmetic intensity', '33.02 KB, 8 FLOP/B')
"""

from __future__ import annotations

from typing import Any

from ..analysis.efficiency import Efficiency
from ..analysis.report import EfficiencySection, efficiency_section
from ..analysis.transformer_estimate import Part, TransformerCheck, transformer_check
from ..result.profile_result import ProfileResult
from .numbers import DEFAULT_PRECISION, bytes_to_string, flops_to_string, number_to_string, params_to_string

__all__ = ["peak_label", "format_efficiency", "format_transformer_check", "efficiency_lines",
           "transformer_check_lines"]

_SHORT = {"forward": "fwd", "backward": "bwd", "recompute": "recompute", "step": "step"}


def peak_label(eff: Efficiency) -> str | None:
    """The peak as printed beside each ratio: ``'989.5 TFLOPS bf16, NVIDIA H100 SXM'``
    (None without a peak)."""
    if eff.peak is None or eff.peak_flops is None:
        return None
    return f"{flops_to_string(eff.peak_flops)} {eff.dtype}, {eff.peak.name}"


def _pct(fraction: float) -> str:
    percent = 100 * fraction
    text = "<0.01%" if 0 < percent < 0.01 else f"{round(percent, DEFAULT_PRECISION):g}%"
    if fraction > 1:  # a measured rate cannot beat the peak: the column read is the wrong one
        text += " (above the peak: wrong dtype? under autocast pass dtype=)"
    return text


def format_efficiency(section: EfficiencySection) -> list[tuple[str, str]]:
    """Ratios are left out without a peak (a line says why where ``explain_missing_peak``);
    bytes and intensity lines come when the result captured bytes. Empty when there is
    nothing to say."""
    eff = section.efficiency
    tag = peak_label(eff)
    peak, peak_flops = eff.peak, eff.peak_flops
    lines: list[tuple[str, str]] = []
    if tag is not None and peak is not None and peak_flops is not None:  # (a tag says both are)
        bandwidth = f", {bytes_to_string(peak.memory_bandwidth, precision=3)}/s memory" if peak.memory_bandwidth else ""
        lines.append((f"peak ({peak.name}, dense {eff.dtype})",
                      f"{flops_to_string(peak_flops)}{bandwidth}; source: {peak.source}"))
        if eff.training and eff.mfu is not None:
            lines.append((f"MFU (peak {tag})", _pct(eff.mfu)))
            if eff.hfu is not None:
                lines.append((f"HFU, recompute included (peak {tag})", _pct(eff.hfu)))
        elif not eff.training and eff.forward_fraction is not None:
            lines.append((f"fwd fraction of peak (peak {tag})", _pct(eff.forward_fraction)))
    elif section.explain_missing_peak:
        lines.append(("MFU" if eff.training else "fwd fraction of peak", f"n/a: {eff.reason}"))
    for phase, p in eff.model.items():
        if p.bytes is None:
            continue
        value = bytes_to_string(p.bytes)
        if p.intensity is not None:
            value += f", {number_to_string(p.intensity)}FLOP/B"
            if p.bound is not None and eff.ridge is not None and peak is not None:  # (a bound comes of both)
                value += f": {p.bound}-bound (ridge {number_to_string(eff.ridge)}FLOP/B, {peak.name})"
        lines.append((f"{_SHORT[phase]} bytes moved, arithmetic intensity", value))
    return lines


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "-") + number_to_string(abs(x)).strip()


def _explanation(check: TransformerCheck, part: Part) -> str:
    """Why ``part``'s measured FLOPs differ from the estimate, in words."""
    shape, why = check.shape, part.explanation
    if why == "lookups":
        return f"lookups cost no flops, their {params_to_string(shape.embedding_params)} params are in N"
    if why == "tied":
        return "tied to the embedding: its product is measured here, its params counted under embeddings"
    if why == "untied":
        return "its params are in N: 2 flops per param per token forward, as estimated"
    if why == "effective":
        return "counted causal-effective (attention='effective'): masked entries left out"
    if why == "dense":
        return f"dense, as {12 if check.training else 4}·L·H·Q·T (H·Q {shape.attention_width})"
    if why == "routed":
        f = shape.active_expert_fraction or 0.0
        return (f"only the routed experts run (k/E {f:.3g}, {shape.sources.get('active_expert_fraction')}): "
                f"N counts all of them")
    return "norms, activations, softmax, residual adds, biases, routing: flops that are not 2 per param per token"


def format_transformer_check(check: TransformerCheck | None) -> list[tuple[str, str]]:
    """The estimates, the measured FLOPs and the difference by part; empty for None (a model
    that is not a transformer language model)."""
    if check is None:
        return []
    sh = check.shape
    what = "fwd + bwd" if check.training else "fwd"
    palm_formula = "6N + 12·L·H·Q·T" if check.training else "2N + 4·L·H·Q·T"
    megatron_formula = "72·B·s·l·h²·(1 + s/6h + V/12hl)" if check.training else "24·B·s·l·h²·(1 + s/6h + V/12hl)"
    calls = f" x {sh.calls} calls" if sh.calls > 1 else ""
    lines = [
        (f"{what} flops, PaLM estimate ({palm_formula}) x tokens (N {params_to_string(sh.params)}, L {sh.layers}, "
         f"H·Q {sh.attention_width}, T {sh.seq_len}; {sh.tokens} tokens)", number_to_string(check.palm).strip()),
    ]
    if check.palm_active is not None:
        lines.append((f"{what} flops, PaLM estimate with active params (N_active "
                      f"{params_to_string(round(sh.active_params))})", number_to_string(check.palm_active).strip()))
    lines.append((f"{what} flops, Megatron-LM estimate {megatron_formula} (B {sh.batch}{calls}, s {sh.seq_len}, "
                  f"l {sh.layers}, h {sh.hidden}, V {sh.vocab}; assumes 4h MLP and multi-head attention)",
                  number_to_string(check.megatron).strip()))
    ratio = f" ({check.measured / check.palm:.3g} x PaLM)" if check.palm else ""
    lines.append((f"{what} flops, measured (recompute and optimizer step left out)",
                  number_to_string(check.measured).strip() + ratio))
    lines.extend((f"  {p.name}: {_explanation(check, p)}", _signed(p.difference)) for p in check.parts)
    return lines


def efficiency_lines(result: ProfileResult, peak: Any = None, *, dtype: str | None = None) -> list[tuple[str, str]]:
    """:func:`format_efficiency` of ``result`` against ``peak`` (see
    :func:`flopsight.analysis.efficiency.efficiency`)."""
    return format_efficiency(efficiency_section(result, peak, dtype))


def transformer_check_lines(result: ProfileResult, config: Any = None, **given: Any) -> list[tuple[str, str]]:
    """:func:`format_transformer_check` of ``result``; arguments as
    :func:`flopsight.analysis.transformer_estimate.transformer_check`."""
    return format_transformer_check(transformer_check(result, config, **given))
