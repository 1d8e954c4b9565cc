"""JSON: everything a result holds, in the versioned schema of ``docs/schema.md``.

Keys keep their order and floats their ``repr``, so save, load, save is byte-identical.

>>> import json, torch, flopsight
>>> result = flopsight.profile(torch.nn.Linear(4, 2), torch.ones(1, 4), clock=flopsight.FakeClock())
>>> json.loads(render_json(result))["schema_version"] == flopsight.SCHEMA_VERSION
True
"""

from __future__ import annotations

import json
from typing import Any

from ..analysis.experts import expert_figures
from ..analysis.job import job_figures
from ..analysis.pipeline import pipeline_figures
from ..analysis.ranks import rank_figures
from ..analysis.report import Report
from ..analysis.report_options import ReportOptions

__all__ = ["render_json", "format_json", "json_data"]


def render_json(result, **options: Any) -> str:
    """``result.to_dict()`` as JSON text (ends with a newline); ``indent`` (default 1) is
    the one :class:`~flopsight.analysis.report_options.ReportOptions` field it reads."""
    return format_json(Report(result, ReportOptions.of(**options)))


def format_json(report: Report) -> str:
    """The format table's entry."""
    return json.dumps(json_data(report.result), indent=report.options.indent_or(1)) + "\n"


def json_data(result) -> dict[str, Any]:
    """``result.to_dict()``; on the meta device, where nothing ran on hardware, every time is
    null: the stats records' ``latency`` (modules, their ops, the calls), the spans and the
    samples (:func:`flopsight.load` reads them back as 0).

    >>> import torch, flopsight
    >>> with torch.device("meta"):
    ...     model = torch.nn.Linear(4, 2)
    >>> data = json_data(flopsight.profile(model, torch.ones(1, 4, device="meta")))
    >>> data["modules"][0]["phases"]["forward"]["latency"], data["spans"]["forward"]
    (None, [None])
    """
    data = result.to_dict()
    figures = rank_figures(result) if result.ranks else None
    if figures is not None:  # derived from the ranks' results, for readers that do not recompute them
        data["rank_figures"] = {"busy": [b.to_dict() for b in figures.busy],
                                "straggler": figures.straggler.to_dict() if figures.straggler is not None else None}
    pipeline = pipeline_figures(result)
    if pipeline is not None:  # derived likewise: the stages, their bubbles and traffic
        data["pipeline_figures"] = pipeline.to_dict()
    job = job_figures(result)
    if job is not None:  # a model-parallel job's ranks
        data["job_figures"] = job.to_dict()
    experts = expert_figures(result)
    if experts:  # and the MoE layers' tokens per rank, imbalance and active parameters
        data["expert_figures"] = [layer.to_dict() for layer in experts]
    if result.metadata.device_type != "meta":
        return data
    for m in data["modules"]:
        for stats in [*m["phases"].values(), *(s for ops in m["ops"].values() for s in ops.values())]:
            stats["latency"] = None
    for call in data["calls"]:
        call["stats"]["latency"] = None
    data["spans"] = {kind: [None] * len(values) for kind, values in data["spans"].items()}
    samples = data.get("samples")
    if samples:
        samples["figures"] = {k: [None] * len(v) for k, v in samples["figures"].items()}
        samples["modules"] = {p: {ph: [None] * len(v) for ph, v in phases.items()}
                              for p, phases in samples["modules"].items()}
    return data
