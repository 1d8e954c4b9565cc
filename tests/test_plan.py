"""The capture plan: which sources run is one table, and a new source is one more row."""

import torch

import flopsight
from flopsight.capture.modules import describe
from flopsight.capture.plan import CaptureOptions, plan
from flopsight.capture.session import CaptureSession
from flopsight.formulas import REGISTRY


def rows(**options):
    session = CaptureSession(CaptureOptions(describe(torch.nn.Linear(2, 2)), **options), registry=REGISTRY,
                             clock=flopsight.FakeClock())
    return [row.name for row in plan(session.options, session.ctx)]


def test_the_table_picks_the_sources_the_options_ask_for():
    counting = ["modules", "optimizer", "units", "autograd functions", "collectives", "functions", "counting", "spans"]
    assert rows() == counting
    assert rows(memory=True) == counting[:2] + ["memory"] + counting[2:]
    assert rows(count=False) == ["modules", "optimizer", "spans"]  # a timing pass: module spans only
    assert rows(count=False, memory=True) == ["modules", "optimizer", "spans"]
