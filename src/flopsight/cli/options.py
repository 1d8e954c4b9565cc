"""The ``profile`` command's options and their argument types: each type raises
``ArgumentTypeError``, which argparse reports naming the option. This module imports no
torch (nor anything that does), so ``flopsight --help``, ``--version``, ``list`` and usage
errors start in a fraction of a second; the names it lists (formats, dtypes, attention
conventions) are checked against the modules that define them (tests/test_cli.py).

>>> positive_int("3"), shape("3,224,224")
(3, (3, 224, 224))
"""

from __future__ import annotations

import argparse
import re

from .repeat import AUTO_HELP

__all__ = ["DEFAULT_MODEL", "MODES", "FORMATS", "DTYPE_NAMES", "ATTENTION", "add_options", "positive_int",
           "non_negative_int", "repeat_count", "depth", "shape", "dtype_name", "device_name", "peak"]

DEFAULT_MODEL = "resnet-18"
MODES = ("forward", "generate", "train")
#: what --format may name: every renderer's format (flopsight.renderers.FORMATS)
FORMATS = ("text", "json", "csv", "ops_csv", "md", "html", "trace")
#: what --dtype may name (flopsight.cli.build.DTYPES)
DTYPE_NAMES = ("float32", "bfloat16", "float16")
#: what --attention may name (flopsight.formulas.attention.ATTENTION_CONVENTIONS)
ATTENTION = ("dense", "effective")
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}


# -- argument types: each raises ArgumentTypeError, which argparse reports with the option ---
def positive_int(text: str) -> int:
    """An integer >= 1 (``--batch-size 0`` is an error, not an empty run).

    >>> positive_int("3")
    3
    """
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def repeat_count(text: str) -> int | None:
    """``--repeat``: an integer >= 1, or ``auto`` (None: planned, see :mod:`.repeat`).

    >>> repeat_count("5"), repeat_count("Auto")
    (5, None)
    """
    if text.strip().lower() == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or auto, got {text!r}") from None


def non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def depth(text: str) -> int:
    value = _int(text)
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected an integer >= -1 (-1: every depth), got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def shape(text: str) -> tuple[int, ...]:
    """One sample's shape, the batch dimension left out: ``3,224,224`` or ``3x224x224``.

    >>> shape("3x224x224"), shape("(80, 3000)")
    ((3, 224, 224), (80, 3000))
    """
    parts = re.split(r"\s*[,x]\s*|\s+", text.strip().strip("()[]").strip())
    dims = tuple(int(p) for p in parts if p.isdigit())
    if len(dims) != len(parts) or min(dims, default=0) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes such as 3,224,224, got {text!r}")
    return dims


def dtype_name(text: str) -> str:
    return _DTYPE_ALIASES.get(text.lower(), text.lower())


def device_name(text: str) -> str:
    """``cpu``, ``meta``, ``cuda`` or ``cuda:N``."""
    name = text.lower()
    if name in ("cpu", "meta", "cuda") or (name.startswith("cuda:") and name[5:].isdigit()):
        return name
    raise argparse.ArgumentTypeError(f"expected cpu, cuda, cuda:N or meta, got {text!r}")


def peak(text: str) -> float | str:
    """FLOP/s (``312e12``) or a device the peak table knows (``"H100 SXM"``, ``"cpu"``)."""
    try:
        value = float(text)
    except ValueError:
        from ..hardware import check_peak

        try:
            return check_peak(text)  # "cpu" is measured when the report is rendered
        except (ValueError, KeyError) as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("peak: ")) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of FLOP/s or a device name, got {text!r}")
    return value


# -- the options ---------------------------------------------------------------------------------
def add_options(p: argparse.ArgumentParser, version: str) -> None:
    """The profile command's options on parser ``p`` (``version``: what --version prints)."""
    # SUPPRESS: absent, neither sets the other's value (parse() puts the default in)
    p.add_argument("model", nargs="?", default=argparse.SUPPRESS, metavar="MODEL",
                   help="a zoo name (flopsight list), a factory package.module:function or path/file.py:function "
                        "returning a model or (model, inputs), or a transformers config.json "
                        f"(default: {DEFAULT_MODEL})")
    p.add_argument("--model", dest="model", default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # the first CLI's
    inputs = p.add_argument_group("inputs")
    # batch size and dtype default to None, so a factory is passed only what the user set
    inputs.add_argument("--batch-size", type=positive_int,
                        help="samples per call (default: 1; a factory's own when it takes batch_size)")
    inputs.add_argument("--seq-len", type=positive_int, help="tokens per sample (default: the model's, 128 for most)")
    inputs.add_argument("--input-shape", type=shape, metavar="SHAPE",
                        help="one sample's shape, batch left out: images (default: the model's, 3,224,224 for most) "
                             "or a factory's model that comes without inputs")
    inputs.add_argument("--max-new-tokens", type=positive_int, default=16, help="tokens generate() produces")
    run = p.add_argument_group("run")
    run.add_argument("--mode", choices=MODES, default="forward",
                     help="forward: one inference forward; generate: a generate() call; "
                          "train: forward, backward and an AdamW step")
    run.add_argument("--dtype", type=dtype_name, choices=DTYPE_NAMES,
                     help="parameters' and float inputs' dtype (default: float32; a factory's model keeps its own)")
    run.add_argument("--device", type=device_name,
                     help="cpu, cuda[:N] or meta (default: cpu, or meta when the parameters would not fit in memory)")
    run.add_argument("--warm-up", type=non_negative_int,
                     help="unmeasured calls (steps) before the measured one (default: 1; 0 on the meta device)")
    run.add_argument("--repeat", type=repeat_count, metavar="N|auto",
                     help="timed calls (steps under --mode train): times are their medians, with their spread "
                          f"(default: {AUTO_HELP})")
    run.add_argument("--attention", choices=ATTENTION, default="dense",
                     help="dense: every attention score (DeepSpeed's count); effective: only those masks keep")
    report = p.add_argument_group("report")
    report.add_argument("--depth", type=depth, default=-1, help="depth of the aggregated profile (-1: every depth)")
    report.add_argument("--top", type=positive_int, default=3, help="top modules per depth in the aggregated profile")
    report.add_argument("--detailed", action=argparse.BooleanOptionalAction, default=True,
                        help="the per-module tree")
    report.add_argument("--detail-depth", type=non_negative_int, help="stop the per-module tree at this depth")
    report.add_argument("--collapse", action="store_true",
                        help="show repeated identical layers once, as (0-79): 80 x Layer")
    report.add_argument("--ops", type=non_negative_int, metavar="N", help="add the N top operators of each module")
    report.add_argument("--peak", type=peak, metavar="FLOPS|DEVICE",
                        help='the hardware peak for MFU lines: FLOP/s (312e12) or a device name ("H100 SXM", "cpu")')
    report.add_argument("--efficiency", action="store_true", help="MFU lines against the profiled device's own peak")
    report.add_argument("-o", "--output", metavar="FILE",
                        help="write the report to FILE, in the format its extension names (.txt .json .csv .ops.csv "
                             ".md .html .trace.json); default: stdout")
    report.add_argument("--format", choices=FORMATS,
                        help="the report's format (default: from -o's extension, else text)")
    report.add_argument("--force", action="store_true",
                        help="replace -o's FILE even if it is not a report (never the model's factory or config)")
    other = p.add_argument_group("other")
    other.add_argument("--progress", action=argparse.BooleanOptionalAction,
                       help="a progress bar on stderr (default: when stderr is a terminal)")
    other.add_argument("--traceback", action="store_true",
                       help="show the whole traceback when the model fails (or Ctrl-C stops it)")
    other.add_argument("--version", action="version", version=version)


