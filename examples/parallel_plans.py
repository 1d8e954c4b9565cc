"""Which way should a model be split across ranks? A small GPT-style block stack trained on 2 or 4 CPU
ranks under data, tensor, pipeline and expert parallelism in turn.

    torchrun --standalone --nproc_per_node 2 examples/parallel_plans.py
    torchrun --standalone --nproc_per_node 4 examples/parallel_plans.py --steps 20 --json plans.json

The model: 4 pre-norm blocks of causal self-attention (4 heads) and an MLP (``d -> 4d -> d``),
``d = 64``, on sequences of 16 positions; one global batch of 8 sequences per step, a squared
error loss, SGD. The plans, all on the same global batch:

* ``data``: ``DistributedDataParallel``, ``8 / world`` sequences per rank;
* ``tensor``: ``parallelize_module`` over all ranks (q, k, v and the MLP's first layer split by
  columns, the attention's output and the MLP's second layer by rows; the norms replicated),
  every rank on all 8 sequences;
* ``pipeline``: ``world`` stages of ``4 / world`` blocks each, ``Schedule1F1B``, 4 micro-batches
  of 2 sequences;
* ``expert``: each block's MLP a mixture of ``world`` experts of the same size, one per rank,
  top-1 (the router's choice), the tokens exchanged with ``all_to_all_single``; the rest data
  parallel (its gradients all-reduced), ``8 / world`` sequences per rank.

The plans train in turns, a step of each at a time, so that a busy spell of the machine slows
all alike: ``--warm-up`` unprofiled steps, then ``--steps`` profiled ones each, the ranks meeting
at a barrier before each, every step profiled with ``flopsight.Profiler(module, optimizer=...)``
(the pipeline: each rank's stage). ``flopsight.combine_steps`` makes one result per plan, its
median step. Rank 0 prints each plan's work per rank, the step's anatomy (the bubble: the
pipeline stages' waiting for their neighbours, out of the communication waited for), the bytes
of each collective, and which plan is fastest here and why.
"""

import argparse
import json
import warnings

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

import flopsight
from flopsight.analysis.diff.ranking import rank as rank_plans
from flopsight.analysis.experts import expert_figures
from flopsight.analysis.pipeline import pipeline_figures
from flopsight.analysis.report_figures import communication_figures
from flopsight.renderers.numbers import bytes_to_string, duration_to_string, macs_to_string
from flopsight.renderers.verdict_words import RANKING_LEGEND, ranking_text, verdict_text

D, HEADS, SEQ, BLOCKS, BATCH, MICRO_BATCHES = 64, 4, 16, 4, 8, 4
#: torch 2.9's pipelining fails its first step on gloo, profiled or not (a size mismatch in its
#: stages' first exchange): the pipeline plan runs from torch 2.10
PIPELINING = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 10)


class Attention(nn.Module):
    """Causal self-attention; its head count follows its projections' width (a tensor-parallel
    rank holds HEADS / world heads)."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (proj(x).view(b, s, -1, D // HEADS).transpose(1, 2) for proj in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """``world`` experts the size of the MLP, one per rank, top-1: each token goes to its
    expert's rank and back with all_to_all_single (autograd's: the backward returns the
    gradients the same way)."""

    def __init__(self, world: int):
        super().__init__()
        self.world = world
        self.router = nn.Linear(D, world, bias=False)
        self.experts = nn.ModuleList([MLP()])  # this rank's

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, D)
        gates = self.router(tokens).softmax(-1)
        choice = gates.argmax(-1)
        order = choice.argsort(stable=True)
        send = torch.bincount(choice, minlength=self.world)
        receive = torch.empty_like(send)
        dist.all_to_all_single(receive, send)  # how many tokens each rank's expert gets from each rank
        send_rows, receive_rows = send.tolist(), receive.tolist()
        mine = dist_nn.all_to_all_single(tokens.new_empty(sum(receive_rows), D), tokens[order], receive_rows,
                                         send_rows)
        back = dist_nn.all_to_all_single(tokens.new_empty(tokens.shape), self.experts[0](mine), send_rows,
                                         receive_rows)
        return (back[order.argsort()] * gates.gather(1, choice[:, None])).view(shape)


class Block(nn.Module):
    def __init__(self, experts: int = 0):
        super().__init__()
        self.norm1, self.attn, self.norm2 = nn.LayerNorm(D), Attention(), nn.LayerNorm(D)
        self.mlp = MoE(experts) if experts else MLP()

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Blocks(nn.Module):
    """Blocks ``first`` to ``last`` of the stack (a pipeline stage holds a part of it)."""

    def __init__(self, first: int = 0, last: int = BLOCKS, experts: int = 0):
        super().__init__()
        self.blocks = nn.ModuleList()
        for i in range(first, last):
            torch.manual_seed(i)  # block i is the same block in every plan
            self.blocks.append(Block(experts))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def loss_fn(out, target):
    return ((out - target) ** 2).mean()


class Plan:
    """One way of splitting the model: ``step(x, target)`` trains one step on the global
    batch; ``module`` and ``optimizer`` are what each rank profiles."""

    def __init__(self, name: str, module: nn.Module, optimizer, step):
        self.name, self.module, self.optimizer, self.step = name, module, optimizer, step


def pipeline_plan(world: int, rank: int, sgd) -> Plan:
    """``world`` stages of ``BLOCKS / world`` blocks, one per rank, ``Schedule1F1B``."""
    per_stage = BLOCKS // world
    stage_module = Blocks(rank * per_stage, (rank + 1) * per_stage)
    schedule = Schedule1F1B(PipelineStage(stage_module, rank, world, torch.device("cpu")), MICRO_BATCHES,
                            loss_fn=loss_fn)
    opt_pipeline = sgd(stage_module)

    def pipeline_step(x, target):
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=target, losses=[])
        else:
            schedule.step()
        opt_pipeline.step()
        opt_pipeline.zero_grad()

    return Plan("pipeline", stage_module, opt_pipeline, pipeline_step)


def plans(world: int, rank: int) -> list[Plan]:
    def sgd(module):
        return torch.optim.SGD(module.parameters(), lr=1e-3)

    def share(x):  # this rank's part of the global batch
        per = BATCH // world
        return x[rank * per:(rank + 1) * per]

    made = []
    data = DistributedDataParallel(Blocks())
    opt_data = sgd(data)

    def data_step(x, target):
        loss_fn(data(share(x)), share(target)).backward()
        opt_data.step()
        opt_data.zero_grad()

    made.append(Plan("data", data, opt_data, data_step))

    tensor = Blocks()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    for block in tensor.blocks:
        parallelize_module(block, mesh, {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(),
                                         "attn.v": ColwiseParallel(), "attn.out": RowwiseParallel(),
                                         "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()})
    opt_tensor = sgd(tensor)

    def tensor_step(x, target):
        loss_fn(tensor(x), target).backward()
        opt_tensor.step()
        opt_tensor.zero_grad()

    made.append(Plan("tensor", tensor, opt_tensor, tensor_step))

    if PIPELINING:
        made.append(pipeline_plan(world, rank, sgd))
    elif rank == 0:
        print(f"(the pipeline plan is left out: torch {torch.__version__}'s pipelining fails on gloo)")

    torch.manual_seed(100 + rank)  # each rank's expert its own
    expert = Blocks(experts=world)
    shared = [p for name, p in expert.named_parameters() if ".experts." not in name]
    for p in shared:  # the shared parameters start alike on every rank, as DDP's do
        dist.broadcast(p.data, 0)
    opt_expert = sgd(expert)

    def expert_step(x, target):
        loss_fn(expert(share(x)), share(target)).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in shared])  # the shared gradients, averaged
        dist.all_reduce(flat)
        flat /= world
        for p, g in zip(shared, flat.split([p.numel() for p in shared])):
            p.grad.copy_(g.view_as(p))
        opt_expert.step()
        opt_expert.zero_grad()

    made.append(Plan("expert", expert, opt_expert, expert_step))
    return made


def train(made: list[Plan], warm_up: int, steps: int) -> dict:
    measured: dict[str, list] = {plan.name: [] for plan in made}
    for step in range(warm_up + steps):
        torch.manual_seed(1000 + step)  # the same global batch on every rank, and for every plan
        x, target = torch.randn(BATCH, SEQ, D), torch.randn(BATCH, SEQ, D)
        for plan in made:
            dist.barrier()  # the ranks start each step together, as a training loop's steps do
            if step < warm_up:
                plan.step(x, target)
                continue
            with flopsight.Profiler(plan.module, optimizer=plan.optimizer) as prof:
                plan.step(x, target)
            measured[plan.name].append(prof.result)
    return {name: flopsight.combine_steps(results) for name, results in measured.items()}


def summary(name: str, result) -> dict:
    """One plan's figures: its median step (rank 0's, which holds every rank's)."""
    it, a = result.iteration, result.iteration.anatomy
    spread = result.samples.spread("wall")
    ranks = [r for r in result.ranks if r is not None] if result.ranks else [result]
    pipeline = pipeline_figures(result)  # rank 0's stage: the anatomy is rank 0's
    bubble = next((s.bubble for s in pipeline.stages if s.rank == 0), 0.0) if pipeline is not None else 0.0
    comm = {c.kind: {"count": c.count, "bytes": c.bytes, "seconds": c.latency, "exposed": c.exposed}
            for c in communication_figures(result.collectives())}
    experts = [layer.to_dict() for layer in expert_figures(result)]
    return {
        "plan": name, "steps": result.samples.count, "step_seconds": it.latency,
        "step_spread": {"low": spread.low, "high": spread.high},
        "macs_per_rank": [r.iteration.forward.macs + r.iteration.backward.macs for r in ranks],
        "params_per_rank": [r.total.params for r in ranks],
        "anatomy": {"compute": a.forward + a.backward + a.step, "communication_exposed": a.communication - bubble,
                    "bubble": bubble, "framework": a.framework, "profiler": a.profiler, "other": a.other},
        "communication": comm, "expert_imbalance": [layer["imbalance"] for layer in experts],
    }


def print_table(rows: list[dict]) -> None:
    ms = duration_to_string
    print("\n| plan | MACs per rank (fwd + bwd) | params per rank | step (median, spread) | compute | "
          "comm waited for | bubble | framework | profiler | other |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        a, s = r["anatomy"], r["step_spread"]
        macs = ", ".join(macs_to_string(m) for m in r["macs_per_rank"])
        params = ", ".join(str(p) for p in r["params_per_rank"])
        print(f"| {r['plan']} | {macs} | {params} | {ms(r['step_seconds'])} ({ms(s['low'])} to {ms(s['high'])}) | "
              f"{ms(a['compute'])} | {ms(a['communication_exposed'])} | {ms(a['bubble'])} | {ms(a['framework'])} | "
              f"{ms(a['profiler'])} | {ms(a['other'])} |")
    print("\n| plan | collective | calls | bytes per rank | time in flight | waited for |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        for kind, c in r["communication"].items():
            print(f"| {r['plan']} | {kind} | {c['count']} | {bytes_to_string(c['bytes'])} | {ms(c['seconds'])} | "
                  f"{ms(c['exposed'])} |")


def verdicts(results: dict) -> dict:
    """Which plan is fastest here, and why each other one is slower (only what the spreads
    make significant)."""
    ranked = rank_plans(results)
    fastest = ranked.tiers[0][0]
    why = {name: verdict_text(ranked.verdict(fastest, name), fastest, name) for name in results if name != fastest}
    return {"ranking": ranking_text(ranked), "fastest": fastest, "why": why}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-up", type=int, default=2, help="unprofiled steps first (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10, help="profiled steps per plan, 2 or more (the verdict "
                        "needs a spread; default: %(default)s)")
    parser.add_argument("--json", help="also write the figures to this file (rank 0)")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.warm_up < 0:
        parser.error(f"--steps: expected 2 or more (got {args.steps}); --warm-up: 0 or more (got {args.warm_up})")
    # torch.distributed.nn's all_to_all_single (autograd's) says it is deprecated
    warnings.filterwarnings("ignore", message=".*all_to_all_single is deprecated")
    started = not dist.is_initialized()  # (a caller's process group is left as it was)
    if started:
        dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    if BLOCKS % world or BATCH % world or HEADS % world:
        raise SystemExit(f"parallel_plans: {world} ranks must divide the {BLOCKS} blocks, {BATCH} sequences "
                         f"and {HEADS} heads")
    results = train(plans(world, rank), args.warm_up, args.steps)
    if rank == 0:
        rows = [summary(name, r) for name, r in results.items()]
        print(f"\n{BLOCKS} blocks, d {D}, {HEADS} heads, {BATCH} x {SEQ} tokens per step, on {world} ranks; "
              f"{rows[0]['steps']} steps per plan")
        print_table(rows)
        found = verdicts(results)
        print(f"\nStep time, fastest first ({RANKING_LEGEND}): {found['ranking']}")
        for name, why in found["why"].items():
            print(f"  {name}: {why}.")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"world": world, "plans": rows, "verdicts": found}, f, indent=1)
    dist.barrier()
    if started:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
