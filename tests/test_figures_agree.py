"""Figures that must not contradict each other (issue 29, items 1, 2, 3, 4 and 7).

1. With ``repeat=N`` each module's latency is the median of its own inclusive samples, the
   root's the median of the root's, and every format and the diff read that one figure.
2. Operator times timed in a counting pass apart from the modules' calls: every format says so.
3. On the meta device every time and rate is n/a (null in JSON).
4. Parameters tied across modules are marked where a module's params are reported.
7. The text report states the inputs.
8. A training report's backward times: every line that states one prints the same number for
   the same quantity, and names the different ones apart (DeepSpeed's ``bwd latency``, the
   backward pass's wall time; a module's ``bwd op time``; the step anatomy's ``bwd compute``).

Skew is forced on a fake clock (each stamp one fake millisecond): a module stamps the clock
itself on one chosen call, so that call is slower by exactly that many ticks; no test reads
the wall clock.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import statistics

import pytest
import torch
from torch import nn

import flopsight
from flopsight.analysis.report import Report
from flopsight.renderers.numbers import duration_to_string, flops_to_string


class _Skewed(nn.Module):
    """A Linear whose ``slow_call``-th call (counting every call) stamps ``clock`` ``ticks``
    more times: that call's span is ``ticks`` fake milliseconds longer."""

    def __init__(self, clock, slow_call: int, ticks: int = 100):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.clock, self.slow_call, self.ticks, self.calls = clock, slow_call, ticks, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == self.slow_call:
            for _ in range(self.ticks):
                self.clock.stamp()
        return self.fc(x)


class _Net(nn.Module):
    """``a`` slow on the second timed pass, ``b`` on the third: the root is slow in both, each
    child in one only. The counting pass is call 1, the timed passes calls 2, 3 and 4."""

    def __init__(self, clock):
        super().__init__()
        self.a, self.b, self.head = _Skewed(clock, 3), _Skewed(clock, 4), nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.b(self.a(x)))


@pytest.fixture(scope="module")
def skewed():
    clock = flopsight.FakeClock()
    torch.manual_seed(0)
    return flopsight.profile(_Net(clock), torch.ones(2, 8), repeat=3, warm_up=1, clock=clock)


def _value(text: str, label: str) -> str:
    """The value of the text report's summary line ``label``."""
    line = next(line for line in text.splitlines() if line.startswith(label))
    return line[72:].strip()


# -- 1. one latency per module: the median of its own samples ----------------------------------
def test_the_samples_are_skewed_as_built(skewed):
    root, a, b = (skewed.samples.module(p, "forward") for p in ("", "a", "b"))
    # a is 100 ticks (0.1 s) slower on the 2nd timed pass only, b on the 3rd only
    assert a[1] - a[0] == pytest.approx(0.1) and a[2] == pytest.approx(a[0])
    assert b[2] - b[0] == pytest.approx(0.1) and b[1] == pytest.approx(b[0])
    # so the root is slow in 2 of 3 passes, and its median is a slow pass
    assert statistics.median(root) > 0.1


def test_each_module_latency_is_the_median_of_its_own_samples(skewed):
    for node in skewed.walk():
        expected = statistics.median(skewed.samples.module(node.name, "forward"))
        assert node.forward.latency == expected, node.name
    # the root's: the sum of its own time's and its children's medians would leave the 0.1 s out
    root = statistics.median(skewed.samples.module("", "forward"))
    assert skewed.total.forward.latency == root > 0.1
    assert skewed.iteration.latency == pytest.approx(root, rel=1e-12)
    assert skewed.phase_total("forward").latency == pytest.approx(root, rel=1e-12)


def test_every_format_and_the_diff_show_the_root_median(skewed, tmp_path):
    root = statistics.median(skewed.samples.module("", "forward"))
    shown = duration_to_string(root)
    text = skewed.render("text")
    assert _value(text, "fwd latency:") == shown
    # the FLOPS line divides by the same figure
    assert _value(text, "fwd FLOPS per GPU") == flops_to_string(skewed.total.forward.flops / root)
    # the noise line's median, the aggregated profile and the detailed tree's root line
    assert _value(text, "fwd latency over 3 passes").startswith(shown + " (")
    assert f"fwd latency - {{'_Net': '{shown}'}}" in text
    assert f"{shown} = 100% latency" in text
    # Markdown's summary table
    assert f"| latency | {shown} |" in skewed.render("md")
    # CSV: the root's and each module's rows
    rows = {r["module"]: r for r in csv.DictReader(io.StringIO(skewed.render("csv")))}
    for path, row in rows.items():
        assert float(row["latency_s"]) == skewed.module(path).forward.latency
    assert float(rows[""]["latency_s"]) == root
    # JSON, read back
    skewed.save(tmp_path / "p.json")
    assert flopsight.load(tmp_path / "p.json").total.forward.latency == root
    # HTML: the cards' figure and the tree's latencies it embeds
    page = Report(skewed).page_figures
    assert page["iteration"]["forward"]["latency"] == pytest.approx(root, rel=1e-12)
    assert page["module_latencies"][""]["forward"] == root
    assert page["module_latencies"]["a"]["forward"] == statistics.median(skewed.samples.module("a", "forward"))
    # the diff: the model's figure and each module's
    d = flopsight.diff(skewed, skewed)
    assert d.total.metrics["fwd_latency"].a == pytest.approx(root, rel=1e-12)
    for path in ("a", "b", "head"):
        assert d.modules[path].metrics["fwd_latency"].a == skewed.module(path).forward.latency


def test_an_even_number_of_passes_reads_the_mean_of_the_middle_two_everywhere():
    clock = flopsight.FakeClock()
    r = flopsight.profile(_Net(clock), torch.ones(2, 8), repeat=4, warm_up=1, clock=clock)
    root = r.samples.module("", "forward")
    # statistics.median of 4: the mean of the 2nd and 3rd smallest
    expected = sum(sorted(root)[1:3]) / 2
    assert r.total.forward.latency == expected
    assert Report(r).noise.spread.median == pytest.approx(expected, rel=1e-12)
    assert r.iteration.latency == pytest.approx(expected, rel=1e-12)


def test_per_micro_batch_latencies_divide_the_medians():
    """DeepSpeed's per-module lines with gradient accumulation: one micro-batch's, the step's median over 2."""
    model = nn.Sequential(nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt, steps=3, clock=flopsight.FakeClock()) as prof:
        for _ in range(3):
            for _ in range(2):  # two micro-batches
                model(torch.ones(2, 4)).sum().backward()
            opt.step()
            prof.step()
    r = prof.result
    per = Report(r).per_micro_batch
    assert per.module("0").forward.latency == pytest.approx(r.module("0").forward.latency / 2, rel=1e-12)


# -- 2. operator times: from the counting pass (a fake clock has no recorder stamps), said so -----
def test_operator_times_are_labelled_as_the_counting_passes_in_every_format(skewed):
    assert skewed.metadata.timing.ops == "counting"
    assert "measured in the counting pass" in skewed.render("text", ops=2)
    assert "latency (counting pass)" in skewed.render("md")
    # the HTML page's label: tests/test_html_report.py, in a browser


def test_operator_times_from_the_modules_calls_need_no_label():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    result = flopsight.profile(model, torch.ones(2, 8))
    assert result.metadata.timing.ops == "timed"
    assert "measured in the calls that timed the modules" in result.render("text", ops=2)
    assert "counting pass" not in result.render("md")
    assert "op_latency_s" in result.render("csv").splitlines()[0]
    assert "latency_s" in result.render("ops_csv").splitlines()[0]


# -- 3. the meta device: n/a -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def on_meta():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    return flopsight.profile(model, torch.ones(2, 8, device="meta"))


def test_the_meta_device_prints_no_time_or_rate(on_meta, tmp_path):
    text = on_meta.render("text", ops=2)
    assert _value(text, "fwd latency:") == "n/a"
    assert _value(text, "fwd FLOPS per GPU") == "n/a"
    assert "fwd latency - {'Sequential': 'n/a'}" in text
    assert "n/a = n/a latency, n/a" in text  # every module's row
    assert not re.search(r"\d (s|ms|us|FLOPS)\b", text.split("Aggregated")[1])
    md = on_meta.render("md")
    assert "| latency | n/a |" in md and "| FLOPS | n/a |" in md
    rows = list(csv.DictReader(io.StringIO(on_meta.render("csv"))))
    assert {r["latency_s"] for r in rows} == {r["self_latency_s"] for r in rows} == {"n/a"}
    data = json.loads(on_meta.render("json"))
    assert {s["latency"] for m in data["modules"] for s in m["phases"].values()} == {None}
    assert data["calls"][0]["stats"]["latency"] is None and data["spans"]["forward"] == [None]
    # the JSON loads back, and saves the same bytes again
    on_meta.save(tmp_path / "m.json")
    again = flopsight.load(tmp_path / "m.json")
    again.save(tmp_path / "n.json")
    assert (tmp_path / "m.json").read_text() == (tmp_path / "n.json").read_text()
    assert '"latency":null' in on_meta.render("html")  # the page embeds the JSON, compact


def test_the_meta_device_training_lines_are_na():
    with torch.device("meta"):
        model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with flopsight.Profiler(model, optimizer=opt) as prof:
        model(torch.ones(2, 4, device="meta")).sum().backward()
        opt.step()
    text = prof.result.render("text")
    for label in ("bwd latency:", "iter latency:", "bwd FLOPS per GPU", "FLOPS per GPU = 3", "samples/second:"):
        assert _value(text, label) == "n/a", label


def test_deepspeeds_duration_getters_read_na_as_strings_on_the_meta_device():
    # as the report prints them; the numbers keep DeepSpeed's float type, the counts stay exact
    with torch.device("meta"):
        model = nn.Linear(4, 2)
    prof = flopsight.FlopsProfiler(model)
    prof.start_profile()
    model(torch.ones(2, 4, device="meta")).sum().backward()
    prof.stop_profile()
    assert prof.get_total_duration(as_string=True) == "n/a"
    assert prof.get_total_backward_duration(as_string=True) == "n/a"
    assert prof.get_total_iteration_duration(as_string=True) == "n/a"
    assert isinstance(prof.get_total_duration(), float)
    assert prof.get_total_macs() == 2 * 4 * 2  # 2 rows x 4 inputs x 2 outputs
    prof.end_profile()


# -- 4. tied parameters ------------------------------------------------------------------------------
class _Tied(nn.Module):
    """An embedding's 100 x 16 = 1600-element weight tied into the output layer of a sibling."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 16))
        self.dec = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 100, bias=False))
        self.dec[1].weight = self.enc[0].weight

    def forward(self, x):
        return self.dec(self.enc(x))


@pytest.fixture(scope="module")
def tied():
    return flopsight.profile(_Tied(), torch.ones(2, 5, dtype=torch.long), clock=flopsight.FakeClock())


def test_tied_parameters_are_counted_once_in_the_total_and_marked_where_reported(tied):
    # total: 1600 (tied weight, once) + 272 + 272 (two Linear(16, 16): 16 * 16 + 16) = 2144
    assert tied.total.params == 2144 and tied.total.params_shared == 0
    # enc and dec each hold the tied 1600: 1872 each, 87.31% of 2144 each, 174.6% together
    assert tied.module("enc").params == tied.module("dec").params == 1872
    assert tied.module("enc").params_shared == tied.module("dec").params_shared == 1600
    assert tied.module("enc.1").params_shared == 0
    text = tied.render("text")
    assert "(enc): Sequential(\n    1.87 K = 87.31% Params (1.6 K shared)," in text
    assert "(1): Linear(272 = 12.69% Params, " in text  # not shared: unmarked
    assert '"(N shared)" after a module\'s params' in text  # the note that explains the mark
    assert "1.87 K (1.6 K shared)" in tied.render("md", top=3)
    rows = {(r["module"]): r for r in csv.DictReader(io.StringIO(tied.render("csv")))}
    assert [rows[p]["params_shared"] for p in ("enc", "enc.1", "")] == ["1600", "0", "0"]
    data = json.loads(tied.render("json"))
    assert {m["name"]: m.get("params_shared", 0) for m in data["modules"]}["dec.1"] == 1600
    assert flopsight.ProfileResult.from_dict(data).module("dec").params_shared == 1600
    # DeepSpeed's aggregated profile sums a type's params at a depth: the two Sequentials' 2 x 1872 = 3744
    # hold the tied 1600 twice, marked by their summed shares (2 x 1600 = 3.2 K)
    assert "params      - {'Sequential': '3.74 K (3.2 K shared)'}" in text


def test_a_model_without_tied_parameters_has_no_mark():
    r = flopsight.profile(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), torch.ones(1, 4),
                          clock=flopsight.FakeClock())
    assert "shared" not in r.render("text") and "shared" not in r.render("md")
    assert all("params_shared" not in m for m in r.to_dict()["modules"])


# -- 7. the inputs, in the text report --------------------------------------------------------------
def test_the_text_report_states_the_inputs_after_deepspeeds_lines():
    model = nn.Sequential(nn.Linear(8, 2))
    r = flopsight.profile(model, torch.ones(3, 8), clock=flopsight.FakeClock())
    lines = r.render("text").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("inputs (shapes and dtypes; batch size):"))
    assert lines[at][72:].strip() == "float32[3, 8]; batch size 3"
    # after DeepSpeed's summary lines, the last of which is the fwd FLOPS line
    assert at > next(i for i, line in enumerate(lines) if line.startswith("fwd FLOPS per GPU"))


def test_the_inputs_line_names_keyword_inputs():
    class Masked(nn.Module):
        def forward(self, x, mask=None):
            return x * mask

    r = flopsight.profile(Masked(), (torch.ones(2, 4),), {"mask": torch.ones(2, 4, dtype=torch.bool)},
                          clock=flopsight.FakeClock())
    assert _value(r.render("text"), "inputs (") == "float32[2, 4], mask=bool[2, 4]; batch size 2"


# -- 8. the backward's times: one number per quantity, each named apart -------------------------------
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?) (s|ms|us|ns)\b")


def _seconds(text: str) -> float:
    """A printed duration ("141 ms") in seconds (on the fake clock every one is whole ms)."""
    m = _DURATION.match(text)
    assert m, f"not a duration: {text!r}"
    return round(float(m.group(1)) * _UNITS[m.group(2)], 9)


def _bwd_times(text: str) -> list[tuple[str, str, float]]:
    """Every statement of a backward time in a training report, as (quantity, where, seconds):
    the quantity is what the report calls it. Summary lines whose label names the backward and
    whose value is a time; each depth's ``bwd ...`` row of the aggregated profile (its top
    type, at depth 0 the model); the top module's line of the detailed profile."""
    found = []
    lines = text.splitlines()
    for line in lines:
        label, value = line[:70].rstrip(), line[72:].strip()
        if len(line) > 72 and label.endswith(":") and "bwd" in label and _DURATION.match(value):
            found.append((label[:-1], "summary", _seconds(value)))
    depth = None
    for line in lines:
        if re.fullmatch(r"depth \d+:", line):
            depth = int(line.split()[1][:-1])
        m = re.match(r"^    (bwd [a-z ]+?) +- \{'\w+': '([^']+)'", line)
        if m and depth == 0 and m.group(1) != "bwd MACs":
            found.append((m.group(1), "aggregated profile, depth 0", _seconds(m.group(2))))
    root = lines[lines.index(next(l for l in lines if l.startswith("params, percentage of total params"))) + 1:]
    root_line = next(l for l in root if re.match(r"^  \d", l))  # the line under the root's name
    for value, name in re.findall(r"(\d[\d.]* (?:s|ms|us|ns)) = [\d.]+% (bwd [a-z ]+?)(?:,|$)", root_line):
        found.append((name, "detailed profile, top module", _seconds(value)))
    return found


def _one_number_each(found: list[tuple[str, str, float]]) -> dict[str, float]:
    """Each quantity's one number: every statement of it prints the same."""
    numbers: dict[str, float] = {}
    for quantity, where, seconds in found:
        assert numbers.setdefault(quantity, seconds) == seconds, (quantity, where, seconds, numbers[quantity])
    return numbers


class _Stalled(nn.Module):
    """Linear(8, 16) -> ReLU -> Linear(16, 4); on its ``stall_call``-th call a gradient hook on
    the hidden activation stamps ``clock`` ``ticks`` times in the backward, outside any operator:
    that backward pass's wall time is ``ticks`` fake ms longer, its operators' time is not."""

    def __init__(self, clock, stall_call: int = 0, ticks: int = 100):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)
        self.clock, self.stall_call, self.ticks, self.calls = clock, stall_call, ticks, 0

    def forward(self, x):
        h = self.act(self.fc1(x))
        self.calls += 1
        if self.calls == self.stall_call:
            h.register_hook(self._stall)
        return self.fc2(h)

    def _stall(self, grad):
        for _ in range(self.ticks):
            self.clock.stamp()


def _train(model, clock, steps: int = 1):
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.ones(4, 8), torch.zeros(4, model(torch.ones(1, 8)).shape[1])
    model.calls = 0  # the shape probe above is not a call of the profiled steps
    with flopsight.Profiler(model, optimizer=opt, steps=steps, clock=clock) as prof:
        for _ in range(steps):
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if steps > 1:
                prof.step()
    return prof.result


def test_every_backward_time_of_a_training_report_prints_one_number_per_quantity():
    plain_clock, stalled_clock = flopsight.FakeClock(), flopsight.FakeClock()
    torch.manual_seed(0)
    plain = _train(_Stalled(plain_clock), plain_clock)
    torch.manual_seed(0)
    stalled = _train(_Stalled(stalled_clock, stall_call=1), stalled_clock)
    text = stalled.render("text")
    found = _bwd_times(text)
    # what the report states, and where: DeepSpeed's line, the model's row of the aggregated
    # profile and its line in the detailed one, and the anatomy's part
    assert {(q, where) for q, where, _ in found} == {
        ("bwd latency", "summary"),
        ("bwd op time", "aggregated profile, depth 0"),
        ("bwd op time", "detailed profile, top module"),
        ("step anatomy, bwd compute", "summary"),
    }
    numbers = _one_number_each(found)
    before = _one_number_each(_bwd_times(plain.render("text")))
    # Worked by hand: the hook's 100 stamps (1 fake ms each) fall inside the backward pass and
    # outside every operator, so the backward's wall time ("bwd latency") is 100 ms longer and the
    # operators' time ("bwd op time", and the anatomy's "bwd compute") is unchanged:
    assert numbers["bwd latency"] == pytest.approx(before["bwd latency"] + 0.100)
    assert numbers["bwd op time"] == before["bwd op time"]
    # one step, no collectives, no recompute: the anatomy's bwd compute is the same operators' time
    assert numbers["step anatomy, bwd compute"] == numbers["bwd op time"]
    # and the 100 ms are the anatomy's framework part (hooks), not compute
    framework = _value(text, "step anatomy, framework and hooks")
    assert _seconds(framework) == pytest.approx(_seconds(_value(plain.render("text"), "step anatomy, framework")) + 0.1)
    # the two quantities now differ by more than the 100 ms, and their names differ: nothing
    # below the summary calls a module's operators' time "bwd latency"
    assert numbers["bwd latency"] - numbers["bwd op time"] >= 0.100
    below = text.split("Aggregated Profile")[1]
    assert "bwd latency" not in below.replace("not the bwd latency above", "")
    # the rates divide by the figure printed under the same name
    bwd_flops = stalled.iteration.backward.flops
    assert _value(text, "measured bwd FLOPS per GPU = measured bwd flops / bwd latency") == flops_to_string(
        bwd_flops / numbers["bwd latency"])
    root_line = next(l for l in text.splitlines() if l.startswith("  ") and "= 100% bwd op time" in l)
    assert f"{_rate(bwd_flops / numbers['bwd op time'])} bwd" in root_line


def _bwd_op_time(text: str, child: str) -> float:
    """The bwd op time the detailed profile prints for the root's child ``child``."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"  ({child}): "))
    line = lines[at + 1] if lines[at].endswith("(") else lines[at]  # a module with children: figures below
    return _seconds(re.search(r"(\d[\d.]* (?:s|ms|us|ns)) = [\d.]+% bwd op time", line).group(1))


def _rate(flops_per_second: float) -> str:
    return flops_to_string(round(flops_per_second, 2))


class _StallOps(torch.autograd.Function):
    """Identity forward; its backward runs ``extra`` ``neg`` operators. On the FakeClock an
    operator stamps at its start and its end: 1 fake ms of operator time, 2 of wall time."""

    @staticmethod
    def forward(ctx, x, extra: int):
        ctx.extra = extra
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        for _ in range(ctx.extra):
            grad = grad.neg()
        return grad, None


class _SlowBackward(nn.Module):
    """A Linear whose backward runs 20 more operators on its ``slow_call``-th call."""

    def __init__(self, slow_call: int):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.slow_call, self.calls = slow_call, 0

    def forward(self, x):
        self.calls += 1
        return _StallOps.apply(self.fc(x), 20 if self.calls == self.slow_call else 0)


class _TwoSlow(nn.Module):
    """``a``'s backward slow in the 2nd step, ``b``'s in the 3rd: the model's in both."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = _SlowBackward(2), _SlowBackward(3), nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.b(self.a(x)))


def test_over_several_steps_the_backward_times_are_each_its_own_median_and_say_so():
    clock = flopsight.FakeClock()
    model = _TwoSlow()
    model.a.slow_call += 1  # _train's shape probe calls the model once first
    model.b.slow_call += 1
    result = _train(model, clock, steps=3)
    text = result.render("text")
    numbers = _one_number_each(_bwd_times(text))
    # Worked by hand: step 1 runs the plain backward (operators r ms, wall s ms), steps 2 and 3
    # each 20 more operators (a's in step 2, b's in step 3), each 2 stamps (start, end) of wall
    # time and 1 of operator time: 40 ms more wall time, 20 ms more operator time.
    # - bwd latency, the median of the backward's wall times s, s + 40, s + 40: s + 40 ms;
    # - the model's bwd op time, the median of its own r, r + 20, r + 20: r + 20 ms; a's and b's
    #   each the median of (their plain time) once slow and twice not: their plain time, so the
    #   model's is 20 ms more than its children's together (a sum of medians would leave it out);
    # - the step anatomy is the median step's (step 2: the walls are w, w + 40, w + 40, the middle
    #   one by wall time, ties in the order they ran): its bwd compute is r + 20 ms, the model's.
    spans = sorted(result.samples.figures["backward"])
    assert spans[1] == spans[2] == pytest.approx(spans[0] + 0.040)
    assert numbers["bwd latency"] == pytest.approx(spans[0] + 0.040)
    children = [_bwd_op_time(text, name) for name in ("a", "b", "head")]
    assert numbers["bwd op time"] == pytest.approx(sum(children) + 0.020)
    assert numbers["step anatomy, bwd compute"] == numbers["bwd op time"]
    # the anatomy names the step it is of: the median one, whose wall time is the iter wall time
    # and the noise line's median
    median = _value(text, "step anatomy, of the median step's wall time (3 steps)")
    assert median.split(" (")[0] == _value(text, "measured iter wall time") == \
        _value(text, "step time over 3 steps").split(" (")[0]


# -- the HTML page, in a real browser (where one is installed) ------------------------------------
@pytest.fixture(scope="module")
def browser():
    from headless_chromium import Chromium, find_chromium

    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (apt-get install chromium; .ci/run does)")
    with Chromium(binary) as b:
        yield b


def _drawn(browser, tmp_path, name, result):
    """``result``'s page, saved and opened, once drawn."""
    path = tmp_path / f"{name}.html"
    result.save(path)
    page = browser.new_page(1400, 1000)
    page.navigate(path.as_uri())
    page.wait_until("document.documentElement.dataset.state === 'drawn'", timeout=60)
    return page


def _page_rows(browser, tmp_path, name, result) -> tuple[str, dict[str, list[str]]]:
    """The page's cards' text and its table's rows (first cell -> cells), once drawn."""
    page = _drawn(browser, tmp_path, name, result)
    assert page.problems() == []
    cards = page.evaluate("document.getElementById('cards').innerText")
    rows = page.evaluate("[...document.querySelectorAll('#table-body .vrow')]"
                         ".map(r => [...r.children].map(c => c.textContent))")
    return cards, {r[0]: r for r in rows if r[0]}  # the table keeps blank rows to reuse


def test_the_page_shows_the_same_figures_in_a_browser(browser, tmp_path, skewed, on_meta, tied):
    shown = duration_to_string(statistics.median(skewed.samples.module("", "forward")))
    cards, rows = _page_rows(browser, tmp_path, "skewed", skewed)
    assert f"fwd latency\n{shown}" in cards
    root = next(r for k, r in rows.items() if k.startswith("(root)"))
    assert shown in root  # the table's root row: the same figure as the card
    assert duration_to_string(skewed.module("a").forward.latency) in rows["a"]
    cards, rows = _page_rows(browser, tmp_path, "meta", on_meta)
    assert "fwd latency\nn/a" in cards and "samples/s\nn/a" in cards
    assert rows and all(r.count("n/a") == 2 for r in rows.values())  # latency and FLOP/s, on every row
    _, rows = _page_rows(browser, tmp_path, "tied", tied)  # rows by their key under the parent
    assert "1.87 K*" in rows["enc"] and "1.87 K*" in rows["dec"] and "2.14 K" in rows["(root) _Tied"]


def test_each_ranks_panel_shows_its_modules_medians(browser, tmp_path, skewed):
    # a gathered result of two ranks, each the skewed passes: the root's median is 100 fake ms above
    # its children's medians summed (each child is slow in one pass of three: median fast), so a
    # panel that summed them would show less than the rank's own root figure
    gathered = dataclasses.replace(skewed, ranks=(skewed, skewed))
    assert Report(gathered).page_figures["rank_module_latencies"][1][""]["forward"] == skewed.total.forward.latency
    page = _drawn(browser, tmp_path, "ranks", gathered)
    page.evaluate("flopsightReport.select('')")
    detail = page.evaluate("document.getElementById('detail').innerText")
    rows = [line.split("\t") for line in detail[detail.index("Per rank"):].splitlines() if line.startswith("rank ")]
    # the root's samples are 11, 111 and 111 fake ms (a fast pass, then two 100 ticks slower): median 111 ms,
    # not the fast pass's 11 (the 11 ticks of a pass are the clock's stamps, counted, not derived here)
    assert [row[2] for row in rows] == [duration_to_string(skewed.total.forward.latency)] * 2
    assert page.problems() == []
