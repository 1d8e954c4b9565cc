"""Rank failures injected at every phase of a profiled training step, on 2 gloo ranks, for
tests/test_properties_ranks.py (run with torchrun directly, not through scenarios.py: its last
case ends rank 1's process, which no later scenario could survive).

    torchrun --standalone --nproc_per_node 2 tests/multirank/failures_worker.py OUT GATHER_TIMEOUT

Each case is one ``flopsight.Profiler`` span (forward, backward, optimizer step) with
``gather_timeout=GATHER_TIMEOUT``, in which the failing rank's own code raises:

* ``forward``: a module's forward; ``backward``: a tensor hook, while backward runs;
* ``step``: an optimizer step pre-hook; ``gather``: the user's code after the step, the last
  thing in the span before it stops and gathers;
* ``exit`` (rank 1 only, last): the process ends inside the span, never sending its result.

Each rank writes ``OUT/rank<r>.json``: per case, the seconds from entering the span to leaving
it (its exception caught), the error it raised, and on rank 0 what it gathered.
"""

import json
import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch import nn

import flopsight

out, gather_timeout = sys.argv[1], float(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()


class Injected(RuntimeError):
    """The failure a case injects (on the failing rank only)."""


class Faulty(nn.Module):
    """The identity, failing in the phase ``fail`` names."""

    fail = None

    def forward(self, x):
        if self.fail == "forward":
            raise Injected("injected in forward")
        if self.fail == "backward":
            x.register_hook(_raise_in_backward)
        return x


def _raise_in_backward(grad):
    raise Injected("injected in backward")


torch.manual_seed(0)
faulty = Faulty()
model = nn.Sequential(nn.Linear(8, 16), faulty, nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def _step_pre_hook(optimizer, args, kwargs):
    if faulty.fail == "step":
        raise Injected("injected in step")


opt.register_step_pre_hook(_step_pre_hook)
record: dict = {}


def save() -> None:
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(record, f)


def case(phase: str, failing: int) -> None:
    faulty.fail = phase if rank == failing else None
    prof = flopsight.Profiler(model, optimizer=opt, gather_timeout=gather_timeout)
    error = None
    started = time.monotonic()
    try:
        with prof:
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            if faulty.fail == "gather":
                raise Injected("injected at gather")
            if faulty.fail == "exit":
                os._exit(0)  # no result, no failure sent: rank 0 must give up after gather_timeout
    except Injected as e:
        error = str(e)
    seconds = time.monotonic() - started
    result = prof.result
    entry = {"seconds": seconds, "error": error, "metadata_error": result.metadata.error if result else None}
    if rank == 0 and result is not None:
        entry.update(ranks=len(result.ranks), notes={str(k): v for k, v in result.rank_notes.items()},
                     missing=result.missing_ranks)
    record[f"{phase}/rank{failing}"] = entry
    save()


# the ranks profile in step, as docs/distributed.md asks: a rank whose first profile starts after
# rank 0 stopped waiting for it (FIRST_WAIT; a loaded machine can delay rank 1 that long) is taken
# for a rank that does not profile, by design (see flopsight.capture.assembly.gather). One profile
# on both ranks first: from the second on, rank 0 waits PEER_WAIT for a rank that profiled before
dist.barrier()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # rank 1's first profile, if late, is noted and dropped
    with flopsight.Profiler(model):
        model(torch.randn(4, 8))
dist.barrier()
for phase in ("forward", "backward", "step", "gather"):
    for failing in (1, 0):
        case(phase, failing)
        dist.barrier()  # the next case starts on both ranks together
case("exit", 1)
save()
os._exit(0)  # rank 1 is gone: no barrier or group teardown could complete
