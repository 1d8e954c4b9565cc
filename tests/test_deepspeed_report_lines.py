"""flopsight's engine report against DeepSpeed's own, line by line, for ZeRO stages 0 to 3 and
gradient accumulation 1 and 2 (the same runs, tests/multirank/ds_compare_worker.py).

Every line of DeepSpeed's report must be in flopsight's, in the same order, with the same label;
where its value differs, the difference must be one of the reasons listed here. flopsight's own
lines come after DeepSpeed's, or inside its sections where the listed reasons say so.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("deepspeed")


RUNS = [(stage, ga) for stage in range(4) for ga in (1, 2)]
LABEL = 70  # DeepSpeed's label column

# why a line of DeepSpeed's may carry another value in flopsight's report
TIME = "a time: each profiler measured its own run"
DOUBLED = "DeepSpeed counts the forward twice under ZeRO-3 (its profiler's hooks see each module run twice)"
FLOPS = "flopsight also counts the bias adds and torch.relu, which DeepSpeed's patched functions miss"
GARBAGE = "DeepSpeed's module-level fwd latency under the engine is not a time (it prints e.g. '1.8 Gs')"

# the summary lines whose values are times or rates of times
TIME_LABELS = ("fwd latency", "fwd FLOPS per GPU", "bwd latency", "bwd FLOPS per GPU", "fwd+bwd FLOPS per GPU",
               "step latency", "iter latency", "FLOPS per GPU", "samples/second")
COUNT_LABELS = ("fwd MACs per GPU", "fwd flops per GPU", "fwd flops of model")

# flopsight's own lines (not in DeepSpeed's report): what each is
OWN = [
    (r"^\(flopsight: ", "flopsight names itself under DeepSpeed's banner and headers"),
    (r"^then, with the backward measured \(flopsight\)", "the measured backward's fields, after DeepSpeed's"),
    (r"^[45]\. ", "flopsight's notes, after DeepSpeed's three"),
    (r"^(measured |step anatomy|latencies above|communication hidden|parallelism|ranks reporting|iter wall time over|"
     r"straggler|rank \d+, step / busy / waited|"
     r"memory, |GPU utilization|device busy|op coverage|noise:|note:|micro-batches per step|inputs \(|"
     r"(all_reduce|all_gather|reduce_scatter|broadcast) \()", "flopsight's measured summary lines, after DeepSpeed's"),
    (r"^    bwd (MACs|op time) +- ", "each depth's top modules by the measured backward"),
    (r"^depth \d+:$|^    (params|MACs|fwd latency) +- ", "depths DeepSpeed's engine report leaves out"),
    (r"^-+ Per-rank Profile -+$|^Latency over the ranks|^    \S+ \(\w+\) (fwd latency|bwd op time): ",
     "the Per-rank section (every rank's figures, gathered on rank 0)"),
    (r"^$", "a blank line between flopsight's sections"),
]


@pytest.fixture(scope="module")
def reports(deepspeed_scenarios):
    out = deepspeed_scenarios / "compare"  # tests/multirank/ds_compare_worker.py's files
    return {run: ((out / "deepspeed" / f"{run[0]}_{run[1]}.txt").read_text().splitlines(),
                  (out / "flopsight" / f"{run[0]}_{run[1]}.txt").read_text().splitlines()) for run in RUNS}


_MODULE = re.compile(r"^(\s*(?:\(\w+\): )?\w+)\((.*)\)$")  # "  (fc1): Linear(<fields>)"
_ROOT_FIGURES = re.compile(r"^  \d[\d.]* ?[KMGT]? = [\d.]+% Params, ")  # the line under the root's name
_DS_FIELDS = 4  # params, MACs, fwd latency, fwd FLOPS: DeepSpeed's fields, then flopsight's bwd ones


def _label(line: str) -> str:
    """A summary line's label (its first 70 columns), a module line's name and type, a depth
    entry's field, or the whole line."""
    if len(line) > LABEL and line[LABEL:LABEL + 2] == "  " and line[:LABEL].rstrip().endswith(":"):
        return line[:LABEL].rstrip()
    if _ROOT_FIGURES.match(line):
        return "<the root's figures>"
    m = _MODULE.match(line) or re.match(r"^(    \w[\w ]*?) +- ", line)
    return m.group(1) if m else line


def _fields(line: str) -> list[str]:
    """A module line's comma-separated fields."""
    m = _MODULE.match(line)
    return [f.strip() for f in (m.group(2) if m else line).split(",")]


def _field_why(x: str, stage: int) -> str | None:
    if "latency" in x or "FLOPS" in x:
        return GARBAGE if re.search(r" Gs |= 0% latency|^0 FLOPS$", x) else TIME
    if "MACs" in x and stage == 3:
        return DOUBLED
    return None


def _why(theirs: str, mine: str, stage: int) -> str | None:
    """Why DeepSpeed's line ``theirs`` reads ``mine`` in flopsight's report (None: unexplained)."""
    label = _label(theirs)
    name = label.rstrip(":").split(" = ")[0].strip()
    if name in TIME_LABELS and label.endswith(":"):
        return TIME
    if name in COUNT_LABELS:
        return DOUBLED if stage == 3 and "MACs" in name else FLOPS if "flops" in name else None
    if name == "fwd latency":  # a depth's top modules by fwd latency
        return GARBAGE
    if name == "MACs":
        return DOUBLED if stage == 3 else None
    if label == "<the root's figures>" or _MODULE.match(theirs):
        a, b = _fields(theirs), _fields(mine)
        # DeepSpeed's fields, then flopsight's backward ones, then the same extra_repr
        if a[_DS_FIELDS:] != [f for f in b[_DS_FIELDS:] if "bwd" not in f]:
            return None
        reasons = {_field_why(x, stage) for x, y in zip(a[:_DS_FIELDS], b) if x != y}
        return None if None in reasons else "; ".join(sorted(reasons))
    return None


def compare(theirs: list[str], mine: list[str], stage: int) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Walk DeepSpeed's lines through flopsight's: (theirs, mine, why) for each that differs,
    and the problems (a DeepSpeed line missing, a difference or an own line unexplained)."""
    differences, problems, j = [], [], 0
    for line in theirs:
        k = next((i for i in range(j, len(mine)) if _label(mine[i]) == _label(line)), None)
        if k is None:
            problems.append(f"DeepSpeed's line missing: {line!r}")
            continue
        for extra in mine[j:k]:
            if not any(re.search(p, extra) for p, _ in OWN):
                problems.append(f"flopsight's line unexplained: {extra!r}")
        if mine[k] != line:
            why = _why(line, mine[k], stage)
            differences.append((line, mine[k], why))
            if why is None:
                problems.append(f"unexplained difference: {line!r} -> {mine[k]!r}")
        j = k + 1
    for extra in mine[j:]:
        if not any(re.search(p, extra) for p, _ in OWN):
            problems.append(f"flopsight's line unexplained: {extra!r}")
    return differences, problems


@pytest.mark.parametrize("stage,ga", RUNS)
def test_every_line_of_deepspeeds_report_is_kept_or_its_difference_explained(reports, stage, ga):
    theirs, mine = reports[(stage, ga)]
    differences, problems = compare(theirs, mine, stage)
    print(f"\nZeRO-{stage}, gradient accumulation {ga}: {len(differences)} of DeepSpeed's {len(theirs)} lines differ")
    for line, ours, why in differences:
        print(f"  {line.strip()[:60]!r}\n    -> {ours.strip()[:60]!r}\n    because {why}")
    assert not problems, "\n".join(problems)
    # the counts DeepSpeed gets right are flopsight's too: params, MACs outside ZeRO-3 (one
    # micro-batch's forward, with gradient accumulation too)
    for label in ("params per GPU:", "params of model = params per GPU * mp_size:", "batch size per GPU:",
                  "world size:", "data parallel size:", "model parallel size:"):
        assert [l for l in theirs if l.startswith(label)] == [l for l in mine if l.startswith(label)], label
    if stage != 3:
        assert ([l for l in theirs if l.startswith("fwd MACs per GPU:")]
                == [l for l in mine if l.startswith("fwd MACs per GPU:")])
    # the banner, the headers and Note 3, word for word
    for line in theirs:
        if line.startswith(("---", "Top ", "Each module profile", "Note: 1.", "2. Number", "3. The fwd latency")):
            assert line in mine, line
