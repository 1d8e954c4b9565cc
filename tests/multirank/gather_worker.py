"""Worker for tests/test_ranks.py: run by torchrun on 2 gloo ranks.

* ``both``: both ranks profile a forward (rank r with batch 2 + r); rank 0 gathers;
* ``one_missing``: rank 1 fails before its profiled step (the error is caught, the process
  goes on); rank 0 profiles with ``gather_timeout=2`` and must not hang.

Rank 0 writes ``OUT/<scenario>.json``; every rank writes ``OUT/ranks<r>.json`` with the
number of results it holds in ``result.ranks``.
"""

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
from torch import nn

import flopsight
import flopsight.capture.gather

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

result = flopsight.profile(model, torch.randn(2 + rank, 8), warm_up=0)
held = {"both": len(result.ranks)}
if rank == 0:
    result.save(f"{out}/both.json")

try:
    if rank == 1:
        raise RuntimeError("rank 1 fails before its profiled step")
    flopsight.capture.gather._WARN_AFTER = 0.0  # say at once what rank 0 waits for
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = flopsight.profile(model, torch.randn(2, 8), warm_up=0, gather_timeout=2)
    held["one_missing"] = len(result.ranks)
    held["warned"] = " ".join(str(w.message) for w in caught)
    result.save(f"{out}/one_missing.json")
    with open(f"{out}/one_missing.txt", "w") as f:
        f.write(flopsight.renderers.text_renderer.render_text(result))
except RuntimeError:
    pass

with open(f"{out}/ranks{rank}.json", "w") as f:
    json.dump(held, f)
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # skip interpreter teardown, where gloo's threads sometimes abort ("terminate called ...")
