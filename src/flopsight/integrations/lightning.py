"""Lightning: profile one training step of a ``lightning.Trainer`` run with a callback.

:class:`FlopsightCallback` runs a :class:`flopsight.Profiler` around training step
``profile_step`` (its micro-batches' forward and backward passes, ``zero_grad`` and the
optimizer step), logs throughput, MFU and the measured FLOPs under the names the Hugging
Face callback logs too (:data:`METRICS`, prefixed ``flopsight/``), and writes the report into
the run's log directory on rank 0. ``profile_step`` counts as DeepSpeed's and the Hugging Face
callback's do. The names logged until 0.1.0 (``flopsight/train/...``, :data:`DEPRECATED_METRICS`)
are logged too, for this release only. How-to and the metric definitions:
``docs/howto/lightning.md``.

>>> import tempfile, torch, lightning as L
>>> from torch.utils.data import DataLoader, TensorDataset
>>> class Tiny(L.LightningModule):
...     def __init__(self):
...         super().__init__()
...         self.layer = torch.nn.Linear(4, 2)
...     def training_step(self, batch, batch_idx):
...         return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
...     def configure_optimizers(self):
...         return torch.optim.SGD(self.parameters(), lr=0.1)
>>> data = DataLoader(TensorDataset(torch.ones(24, 4), torch.zeros(24, 2)), batch_size=8)
>>> callback = FlopsightCallback(profile_step=1, output="profile.json")
>>> with tempfile.TemporaryDirectory() as root:
...     trainer = L.Trainer(default_root_dir=root, max_steps=3, callbacks=[callback], logger=False,
...                         accelerator="cpu", enable_checkpointing=False, enable_progress_bar=False,
...                         enable_model_summary=False)
...     trainer.fit(Tiny(), data)
...     written = os.path.relpath(callback.path, root)
>>> written, callback.step, callback.result.iteration.forward.macs   # 8 rows x 4 inputs x 2 outputs
('profile.json', 1, 64)
>>> trainer.callback_metrics["flopsight/model_flops"].item() == callback.result.iteration.model_flops
True
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

try:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.utilities.rank_zero import rank_zero_info
except ImportError as error:  # the core needs torch alone; this module needs Lightning
    raise ImportError(
        "flopsight.integrations.lightning needs Lightning 2: pip install 'flopsight[lightning]'"
    ) from error

from .._checks import check_int
from .._process import WARNED
from ..analysis.efficiency import Efficiency, efficiency
from ..capture.assembly.gather import DEFAULT_GATHER_TIMEOUT, announce, publish_failure
from ..hardware import Peak, lookup_peak, resolve_peak
from ..options import ProfileOptions
from ..profiler import Profiler, with_ranks
from ..renderers.output import check_output_file, write
from ..result.profile_result import ProfileResult
from ..result.steps import as_first_step
from .trainer_metrics import METRICS, PREFIX, PROFILE_STEP, check_dtype, check_profile_step, logged, named, step_figures

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.types import STEP_OUTPUT

__all__ = ["FlopsightCallback", "METRICS", "PREFIX", "DEPRECATED_METRICS", "DEPRECATED_PREFIX", "step_metrics",
           "global_metrics"]

#: what the names logged until flopsight 0.1.0 start with (as ``ThroughputMonitor``'s ``train/...``)
DEPRECATED_PREFIX = "flopsight/train/"

#: whether the warning that the old names are deprecated was given in this process

#: the names logged until 0.1.0, logged for one more release (after :data:`DEPRECATED_PREFIX`) ->
#: (unit, definition); ``device/`` names are this rank's, the others (more than one rank) the
#: whole job's. Each one's new name: docs/howto/lightning.md.
DEPRECATED_METRICS = {
    "device/batches_per_sec": ("batches/s", "micro-batches of the profiled step / its wall time"),
    "device/samples_per_sec": ("samples/s", "samples of the profiled step / its wall time"),
    "device/flops_per_sec": ("FLOP/s", "device/flops / its wall time"),
    "device/mfu": ("fraction of peak", "device/flops_per_sec / the peak FLOP/s (only with a known peak)"),
    "device/hfu": ("fraction of peak", "as mfu, activation checkpointing's recomputed forward included "
                                       "(only when it ran)"),
    "device/flops": ("FLOP", "measured FLOPs of the step: forward + backward + optimizer, recompute left out"),
    "device/forward_flops": ("FLOP", "measured FLOPs of the step's forward passes"),
    "device/backward_flops": ("FLOP", "measured FLOPs of the step's backward passes"),
    "device/optimizer_flops": ("FLOP", "measured FLOPs of optimizer.step()"),
    "device/step_time": ("s", "wall time of the profiled step: first micro-batch's start to the last one's end"),
    "device/batches": ("batches", "micro-batches in the profiled step (accumulate_grad_batches)"),
    "device/samples": ("samples", "samples in the profiled step"),
    "batches_per_sec": ("batches/s", "every rank's micro-batches / the slowest rank's step_time"),
    "samples_per_sec": ("samples/s", "every rank's samples / the slowest rank's step_time"),
    "flops_per_sec": ("FLOP/s", "every rank's device/flops / the slowest rank's step_time"),
    "flops": ("FLOP", "every rank's device/flops added up"),
}


# -- argument checks: each names its argument ------------------------------------------
def _check_output(output: Any) -> str | None:
    if output is None:
        return None
    if not isinstance(output, (str, os.PathLike)) or not os.fspath(output):
        raise TypeError(f"output: expected a file name or path (its extension picks the format) or None, "
                        f"got {output!r}")
    check_output_file(output, "output")
    return os.fspath(output)


def _check_peak(peak: Any) -> Any:
    """``peak`` as given, once known valid; a device name is looked up now, ``"cpu"`` is
    measured at setup (not while training runs)."""
    if peak is None or isinstance(peak, Peak):
        return peak
    if isinstance(peak, str):
        if peak.strip().lower() != "cpu":
            lookup_peak(peak)  # raises "peak: no device named ..." with the closest names
        return peak
    if isinstance(peak, (int, float)) and not isinstance(peak, bool) and peak > 0:
        return peak
    raise ValueError(f"peak: expected None, a positive number of FLOP/s, a device name, 'cpu' or a "
                     f"flopsight.hardware.Peak, got {peak!r}")


def _check_batch_size_fn(fn: Any) -> Callable[[Any], int] | None:
    if fn is not None and not callable(fn):
        raise TypeError(f"batch_size_fn: expected a function batch -> number of samples, or None, "
                        f"got {type(fn).__name__}")
    return fn


def precision_dtype(precision: Any) -> str | None:
    """The peak table's column for Lightning's ``trainer.precision``; None for full
    precision, where flopsight reads the model's dtype (fp32, or tf32 when matmuls use it).

    >>> precision_dtype("bf16-mixed"), precision_dtype("16-mixed"), precision_dtype("32-true")
    ('bf16', 'fp16', None)
    """
    text = str(precision)
    if text.startswith("bf16"):
        return "bf16"
    if text.startswith("16"):
        return "fp16"
    if text.startswith("64"):
        return "fp64"
    if text.startswith("transformer-engine"):
        return "fp8"
    return None


# -- the figures: pure functions of the result -------------------------------------------
#: each ``device/`` name -> its :class:`~.trainer_metrics.StepFigures` field, in the order
#: logged; a figure that is None (not measured) is not logged
DEVICE_FIGURES = {
    "device/flops": "model_flops",
    "device/forward_flops": "fwd_flops",
    "device/backward_flops": "bwd_flops",
    "device/optimizer_flops": "step_flops",
    "device/step_time": "latency",
    "device/batches": "batches",
    "device/samples": "samples",
    "device/batches_per_sec": "device_batches_per_second",
    "device/samples_per_sec": "device_samples_per_second",
    "device/flops_per_sec": "device_flops_per_second",
    "device/mfu": "mfu",
    "device/hfu": "hfu",
}


def step_metrics(result: ProfileResult, eff: Efficiency | None, batches: int, samples: int | None) -> dict[str, float]:
    """This rank's ``device/`` figures of the profiled step, by their deprecated names
    (without :data:`DEPRECATED_PREFIX`)."""
    return named(step_figures(result, eff, batches=batches, samples=samples), DEVICE_FIGURES)


def global_metrics(result: ProfileResult, batches: int, samples_per_rank: int | None = None) -> dict[str, float]:
    """The whole job's figures, by their deprecated names, on rank 0 of a gathered run: every
    rank's amounts over the slowest rank's wall time (the step ends when it does). Empty in one
    process, or when a rank's result is missing or failed (the sums would be short).
    ``samples_per_rank``: each rank's samples when counted by ``batch_size_fn`` (else each
    rank's result says)."""
    ranks = [r for r in result.ranks if r is not None and not r.metadata.error]
    if not ranks or len(ranks) < len(result.ranks) or result.rank_notes:
        return {}
    slowest = max(r.iteration.latency for r in ranks)
    flops = sum(r.iteration.model_flops for r in ranks)
    metrics: dict[str, float] = {"flops": flops}
    if slowest > 0:
        # Lightning's DDP runs the same number of micro-batches on every rank
        metrics["batches_per_sec"] = batches * len(ranks) / slowest
        metrics["flops_per_sec"] = flops / slowest
        samples = [samples_per_rank or r.iteration.samples or 0 for r in ranks]  # 0: not counted
        if all(samples):
            metrics["samples_per_sec"] = sum(samples) / slowest
    return metrics


# -- the callback ----------------------------------------------------------------------------
class FlopsightCallback(Callback):
    """Profile training step ``profile_step`` of a ``lightning.Trainer`` run.

    Args:
        profile_step: the step to profile, in ``trainer.global_step`` numbering (optimizer
            steps already taken), as DeepSpeed's ``profile_step`` and the Hugging Face
            callback's: the micro-batches that run while ``trainer.global_step ==
            profile_step``, until the optimizer step moves it on. 0 is the first step, its
            one-time costs marked in the result; the default 1 skips it (its one-time work:
            optimizer state, allocator warm-up). Lightning logs this step's metrics at
            ``step=profile_step``.
        output: the report's file name; its extension picks the format (``.html``,
            ``.json``, ``.txt``, ``.md``, ``.csv``, ``.trace.json``). A relative path is
            under ``trainer.log_dir`` (the logger's directory, else ``default_root_dir``);
            None writes no file. Rank 0 writes it; the path is checked before training.
        peak: the device's peak for MFU: FLOP/s, a device name, ``"cpu"`` (measured at
            setup) or a :class:`~flopsight.hardware.Peak`; None: the CUDA device's, from
            flopsight's table. No peak, no ``mfu`` (never guessed).
        dtype: the peak table's column (``"bf16"``...); default from ``trainer.precision``.
        memory: also measure memory per module (``result.memory``).
        batch_size_fn: ``batch -> samples``, as ``ThroughputMonitor`` takes; default: the
            batch size flopsight reads from the model's calls.
        gather_timeout: seconds rank 0 waits for each rank's result (``result.ranks``);
            None: no gathering.
        steps: how many steps are profiled, from ``profile_step`` on: each is measured on
            its own, the result's times are their medians and ``result.samples`` keeps
            every step's (counts and logged metrics are one step's).

    After the step: ``result`` (this rank's :class:`~flopsight.ProfileResult`),
    ``metrics`` (what was logged, full names: :data:`METRICS`' and, for this release,
    :data:`DEPRECATED_METRICS`'), ``path`` (the report, rank 0).
    """

    def __init__(
        self,
        profile_step: int = PROFILE_STEP,
        output: str | os.PathLike | None = "flopsight_profile.html",
        *,
        peak: Any = None,
        dtype: str | None = None,
        memory: bool = False,
        batch_size_fn: Callable[[Any], int] | None = None,
        gather_timeout: float | None = DEFAULT_GATHER_TIMEOUT,
        steps: int = 1,
    ):
        super().__init__()
        self.profile_step = check_profile_step(profile_step)
        #: what each profiled step measures (its steps and gathering are this callback's)
        self.options = ProfileOptions(memory=memory, steps=steps, gather_timeout=gather_timeout)
        # a ProfileOptions' steps may be None (a span that stops when told); a callback's counts its steps
        self.steps: int = check_int(steps, "steps", low=1, what="how many steps to profile")
        self.memory = self.options.memory
        self.gather_timeout = self.options.gather_timeout
        self._current = self.profile_step  # the global_step of the step being profiled
        self.output = _check_output(output)
        self.peak = _check_peak(peak)
        self.dtype = check_dtype(dtype)
        self.batch_size_fn = _check_batch_size_fn(batch_size_fn)
        self.result: ProfileResult | None = None
        self.metrics: dict[str, float] = {}
        self.path: str | None = None
        self.step: int | None = None  # the global_step profiled, once done
        self._profiler: Profiler | None = None
        self._batches = 0
        self._samples = 0
        self._peak: Peak | None = None
        self._log_dir: str | None = None

    def __repr__(self) -> str:
        return f"FlopsightCallback(profile_step={self.profile_step}, output={self.output!r})"

    @property
    def profiling(self) -> bool:
        return self._profiler is not None and self._profiler.running

    # -- Lightning's hooks -------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._peak = resolve_peak(self.peak)  # "cpu" is measured here, before training runs

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.output is not None and not os.path.isabs(self.output):
            # every rank: trainer.log_dir broadcasts rank 0's directory
            self._log_dir = trainer.log_dir or trainer.default_root_dir
        if self.output is not None and trainer.is_global_zero:  # the one that writes: a bad path fails now
            check_output_file(self._report_path(self.output), "output")

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._profiler is None and self.result is None and trainer.global_step == self.profile_step:
            self._start(pl_module)
        if self.profiling:
            self._batches += 1
            if self.batch_size_fn is not None:
                self._samples += int(self.batch_size_fn(batch))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT,
                           batch: Any, batch_idx: int) -> None:
        # The optimizer step (and, on an accumulation window's first batch, zero_grad) runs
        # between the two hooks; global_step moves on in the batch that steps.
        profiler = self._profiler
        if profiler is not None and profiler.running and trainer.global_step != self._current:  # self.profiling
            if trainer.global_step >= self.profile_step + self.steps:
                self._finish(trainer, pl_module)
            else:  # one of the profiled steps ended: the next one begins
                profiler.step()
                self._current = trainer.global_step

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if self._abandon() and self.gather_timeout is not None:
            publish_failure(exception)  # rank 0 learns it now instead of waiting for this rank

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.profiling:
            self._abandon()
            warnings.warn(f"flopsight: training ended inside step {self.profile_step}, before its optimizer step; "
                          f"nothing was profiled", UserWarning, stacklevel=2)
        elif self.result is None:
            warnings.warn(f"flopsight: profile_step={self.profile_step} was never reached: training ended at "
                          f"trainer.global_step {trainer.global_step}; nothing was profiled", UserWarning,
                          stacklevel=2)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._abandon()  # whatever ended the run, nothing stays installed

    # -- profiling -----------------------------------------------------------------------
    def _start(self, pl_module: pl.LightningModule) -> None:
        # gathered here only after a step that completed: a failed step must not wait on ranks
        self._profiler = Profiler(pl_module, options=self.options.replace(steps=None, gather_timeout=None))
        self._batches = self._samples = 0
        self._current = self.profile_step
        announce(self.gather_timeout)  # its Profiler gathers nothing: this callback does, after the step
        self._profiler.start()

    def _abandon(self) -> bool:
        """Stop a step being profiled, keeping nothing of it; whether one was."""
        profiler, self._profiler = self._profiler, None
        if profiler is not None and profiler.running:
            try:
                profiler.stop()
            except Exception as error:  # never hide the exception that ended the run
                warnings.warn(f"flopsight: stopping the profiler failed: {error!r}", UserWarning, stacklevel=2)
            return True
        return False

    def _finish(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is None:  # on_train_batch_end finishes a step being profiled only
            return
        profiler.stop()
        result = profiler.result  # what stop() returned: a running profiler's stop() has one
        if self.profile_step == 0:  # the run's first step: its one-time costs are in it
            result = as_first_step(result)
        if self.gather_timeout is not None:
            result = with_ranks(result, self.gather_timeout)
        self.result, self.step = result, self.profile_step
        # per step: the counts and times are one step's (the median one's)
        batches, counted = self._batches // self.steps, self._samples // self.steps
        samples = counted if self.batch_size_fn is not None else result.iteration.samples
        eff = efficiency(result, self._peak, dtype=self.dtype or precision_dtype(trainer.precision))
        figures = step_figures(result, eff, batches=batches, samples=samples)  # once: both names' figures
        self.metrics = logged(figures)
        old = named(figures, DEVICE_FIGURES)  # step_metrics(), without computing the figures again
        if trainer.is_global_zero:
            old.update(global_metrics(result, batches, counted or None))
        self.metrics.update({DEPRECATED_PREFIX + name: value for name, value in old.items()})
        _warn_old_names()
        _log(trainer, pl_module, self.metrics)
        if trainer.is_global_zero and self.output is not None:
            self.path = self._write(result, eff, self.output)
        if trainer.is_global_zero:
            rank_zero_info(_summary(self.profile_step, self.metrics, self.path))

    def _report_path(self, output: str) -> str:
        return output if os.path.isabs(output) else os.path.join(self._log_dir or ".", output)

    def _write(self, result: ProfileResult, eff: Efficiency, output: str) -> str:
        path = self._report_path(output)
        # the efficiency section, in the formats that have one, against the peak used for MFU
        # titled as DeepSpeed's engine titles it: the steps taken once the last profiled one ended
        write(result, path, profile_step=self.profile_step + self.steps, peak=eff.peak, dtype=eff.dtype)
        return path


def _warn_old_names() -> None:
    if WARNED.first("lightning old metric names"):
        warnings.warn("flopsight: the Lightning callback's metric names flopsight/train/... are deprecated: they are "
                      "logged this release only, besides the names both flopsight callbacks log now "
                      "(flopsight/model_flops, flopsight/iter_latency_s, flopsight/mfu...; each old name's new one: "
                      "docs/howto/lightning.md)", FutureWarning, stacklevel=3)


def _log(trainer: pl.Trainer, pl_module: pl.LightningModule, metrics: dict[str, float]) -> None:
    """To ``trainer.callback_metrics`` (``pl_module.log``) and to every logger at once, as
    ``ThroughputMonitor`` does: ``self.log`` alone would reach the loggers only on a
    ``log_every_n_steps`` boundary, and one step is profiled."""
    if not metrics:
        return
    pl_module.log_dict(metrics, on_step=True, on_epoch=False, logger=False, batch_size=1)
    connector = getattr(trainer, "_logger_connector", None)
    if connector is not None and callable(getattr(connector, "log_metrics", None)):
        connector.log_metrics(dict(metrics))  # also trainer.logged_metrics; step: Lightning's own
    else:  # a Lightning without it: the loggers directly
        for logger in trainer.loggers:
            logger.log_metrics(dict(metrics), step=trainer.global_step)


def _summary(step: int, metrics: dict[str, float], path: str | None) -> str:
    # the FLOPs and the step's time are always logged; the MFU only where a peak is known
    flops, latency = metrics[PREFIX + "model_flops"], metrics[PREFIX + "iter_latency_s"]
    mfu = metrics.get(PREFIX + "mfu")
    line = f"flopsight: step {step}: {flops:,} FLOPs in {latency * 1e3:.1f} ms"
    if mfu is not None:
        line += f", MFU {100 * mfu:.2f}%"
    return line + (f"; report: {path}" if path else "")
