"""Scenario ``span_error`` of scenarios.py, for tests/test_span_failures.py: 2 gloo ranks, an
exception raised by the user's code inside a ``flopsight.Profiler`` span, outside the model.

* ``rank1_raised``: both ranks profile a training step; rank 1 raises after its forward (the
  exception leaves the span and is caught outside it). Rank 0 gathers.
* ``rank0_raised``: rank 0 raises in its span; rank 1's span completes. Rank 0 gathers
  nothing (its exception goes on at once).
* ``after``: both ranks profile one more call: rank 0 still matches rank 1's profile by order.

Rank 0 writes ``OUT/<scenario>.json`` and ``.txt`` (the text report) and ``OUT/rank0.json``
(what ``rank0_raised`` left on rank 0).
"""

import json
import sys

import torch
import torch.distributed as dist
from torch import nn

import flopsight
from flopsight.renderers.text_renderer import render_text

out = sys.argv[1]
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def save(name, result):
    if rank == 0:
        result.save(f"{out}/{name}.json")
        with open(f"{out}/{name}.txt", "w") as f:
            f.write(render_text(result))


def step(raising_rank):
    prof = flopsight.Profiler(model, optimizer=opt, gather_timeout=30)
    try:
        with prof:
            loss = model(torch.randn(4, 8)).sum()
            if rank == raising_rank:
                raise ValueError("bad batch")
            loss.backward()
            opt.step()
    except ValueError:
        pass
    return prof.result


save("rank1_raised", step(raising_rank=1))
result = step(raising_rank=0)
if rank == 0:
    with open(f"{out}/rank0.json", "w") as f:
        json.dump({"ranks": len(result.ranks), "error": result.metadata.error}, f)
save("after", flopsight.profile(model, torch.randn(2, 8), warm_up=0, gather_timeout=30))
