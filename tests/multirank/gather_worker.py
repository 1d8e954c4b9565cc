"""Scenario ``gather`` of scenarios.py, for tests/test_ranks.py: 2 gloo ranks.

* ``both``: both ranks profile a forward (rank r with batch 2 + r); rank 0 gathers;
* ``sleeper``: both profile a DDP training step, rank 1 sleeping 1 s in it: the straggler;
* ``one_missing``: rank 1 starts a profile but never sends its result (it fails before its
  profiled step); rank 0 profiles with ``gather_timeout=2`` and must not hang;
* ``failed_in_span``: both profile with ``flopsight.Profiler``; rank 1's forward raises in its
  first layer inside the span (the error is caught, the process goes on);
* ``profile_failed``: both call ``flopsight.profile`` with the default ``gather_timeout``; rank
  1's forward raises: rank 0 learns it at once instead of waiting out the 60 s;
* ``rank0_only``: only rank 0 profiles, with the default ``gather_timeout`` (the pattern of
  DeepSpeed's docs): rank 0 waits a few hundredths of a second for rank 1, not 60. Before it,
  rank 1 profiles for itself alone (``gather_timeout=None``): a profile that gathers nothing
  does not count as one rank 0 should wait for.

Rank 0 writes ``OUT/<scenario>.json`` and ``.txt`` (the text report); every rank writes
``OUT/ranks<r>.json`` with the number of results it holds in ``result.ranks`` and, on rank 0,
the seconds each gather took.
"""

import json
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch import nn

import flopsight
import flopsight.capture.assembly.gather

out = sys.argv[1]
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
held = {}


def save(name, result, seconds=None):
    held[name] = len(result.ranks)
    if seconds is not None:
        held[f"{name}_s"] = seconds
    if rank == 0:
        result.save(f"{out}/{name}.json")
        with open(f"{out}/{name}.txt", "w") as f:
            f.write(flopsight.renderers.text_renderer.render_text(result))


save("both", flopsight.profile(model, torch.randn(2 + rank, 8), warm_up=0))

# a DDP training step in which rank 1 sleeps 1 s before its forward: rank 0 waits for it in
# the backward's all-reduce, and both steps end together
ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
with flopsight.Profiler(ddp, optimizer=opt) as prof:
    if rank == 1:
        time.sleep(1.0)
    ddp(torch.randn(2, 8)).sum().backward()
    opt.step()
save("sleeper", prof.result)

if rank == 1:  # it started the profile, then failed before its profiled step: no result sent
    flopsight.capture.assembly.gather.announce()
    flopsight.capture.assembly.gather.GATHERING.gathered += 1  # the next profiles still match rank 0's by order
else:
    flopsight.capture.assembly.gather.GATHERING.warn_after = 0.0  # say at once what rank 0 waits for
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save("one_missing", flopsight.profile(model, torch.randn(2, 8), warm_up=0, gather_timeout=2))
    held["warned"] = " ".join(str(w.message) for w in caught)
    flopsight.capture.assembly.gather.GATHERING.warn_after = 5.0

prof = flopsight.Profiler(model)
try:
    with prof:
        model(torch.randn(2, 8) if rank == 0 else torch.randn(2, 5))  # rank 1: 5 features into Linear(8, 16)
except RuntimeError:
    pass
save("failed_in_span", prof.result)

bad = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16 if rank == 0 else 15, 4))
t0 = time.monotonic()
try:
    save("profile_failed", flopsight.profile(bad, torch.randn(2, 8), warm_up=0), time.monotonic() - t0)
except RuntimeError:
    pass

if rank == 1:
    flopsight.profile(model, torch.randn(2, 8), warm_up=0, gather_timeout=None)
if rank == 0:
    t0 = time.monotonic()
    save("rank0_only", flopsight.profile(model, torch.randn(2, 8), warm_up=0), time.monotonic() - t0)

with open(f"{out}/ranks{rank}.json", "w") as f:
    json.dump(held, f)
