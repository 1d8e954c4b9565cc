"""``flopsight profile MODEL``: its options (checked as they are parsed, each error naming the
option), and the command: resolve MODEL (:mod:`.models`), build it (:mod:`.build`), run it
(:mod:`.run`), render and write the report (:mod:`flopsight.renderers.output`).

>>> positive_int("3"), shape("3,224,224")
(3, (3, 224, 224))
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from typing import Any

import torch

from ..formulas.attention import ATTENTION_CONVENTIONS
from ..renderers import FORMATS as RENDERER_FORMATS
from . import zoo
from .build import DTYPES, build, pick_device
from .meta import meta_masks
from .models import BadModel, Target, UsageError, resolve
from .progress import Progress
from .run import calls_per_run, run_forward, run_generate, run_train

__all__ = ["DEFAULT_MODEL", "MODES", "FORMATS", "add_options", "cmd_profile"]

DEFAULT_MODEL = "resnet-18"
MODES = ("forward", "generate", "train")
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
#: what --format may name: every renderer's format
FORMATS = tuple(RENDERER_FORMATS)


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
                        f"returning a model or (model, inputs), or a transformers config.json (default: {DEFAULT_MODEL})")
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
    run.add_argument("--dtype", type=dtype_name, choices=tuple(DTYPES),
                     help="parameters' and float inputs' dtype (default: float32; a factory's model keeps its own)")
    run.add_argument("--device", type=device_name,
                     help="cpu, cuda[:N] or meta (default: cpu, or meta when the parameters would not fit in memory)")
    run.add_argument("--warm-up", type=non_negative_int,
                     help="unmeasured calls (steps) before the measured one (default: 1; 0 on the meta device)")
    run.add_argument("--repeat", type=positive_int, default=1,
                     help="measured calls (steps under --mode train): times are their medians, with their spread "
                          "(default: %(default)s)")
    run.add_argument("--attention", choices=ATTENTION_CONVENTIONS, default="dense",
                     help="dense: every attention score (DeepSpeed's count); effective: only those masks keep")
    report = p.add_argument_group("report")
    report.add_argument("--depth", type=depth, default=-1, help="depth of the aggregated profile (-1: every depth)")
    report.add_argument("--top", type=positive_int, default=3, help="top modules per depth in the aggregated profile")
    report.add_argument("--detailed", action=argparse.BooleanOptionalAction, default=True,
                        help="the per-module tree")
    report.add_argument("--detail-depth", type=non_negative_int, help="stop the per-module tree at this depth")
    report.add_argument("--collapse", action="store_true", help="show repeated identical layers once, as (0-79): 80 x Layer")
    report.add_argument("--ops", type=non_negative_int, metavar="N", help="add the N top operators of each module")
    report.add_argument("--peak", type=peak, metavar="FLOPS|DEVICE",
                        help='the hardware peak for MFU lines: FLOP/s (312e12) or a device name ("H100 SXM", "cpu")')
    report.add_argument("--efficiency", action="store_true", help="MFU lines against the profiled device's own peak")
    report.add_argument("-o", "--output", metavar="FILE",
                        help="write the report to FILE, in the format its extension names (.txt .json .csv .ops.csv "
                             ".md .html .trace.json); default: stdout")
    report.add_argument("--format", choices=FORMATS, help="the report's format (default: from -o's extension, else text)")
    report.add_argument("--force", action="store_true",
                        help="replace -o's FILE even if it is not a report (never the model's factory or config)")
    other = p.add_argument_group("other")
    other.add_argument("--progress", action=argparse.BooleanOptionalAction,
                       help="a progress bar on stderr (default: when stderr is a terminal)")
    other.add_argument("--traceback", action="store_true", help="show the whole traceback when the model fails")
    other.add_argument("--version", action="version", version=version)


# -- the command ---------------------------------------------------------------------------------
@contextlib.contextmanager
def quiet_transformers():
    """transformers' own advice (generation defaults, deprecated arguments) is about using a
    real checkpoint; for a randomly initialised model built and run once it is noise on
    stderr. Its errors still show; Python warnings are untouched."""
    logging = sys.modules.get("transformers.utils.logging")
    if logging is None:  # a plain-torch model: transformers was never imported
        yield
        return
    before = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(before)


def check_options(args: argparse.Namespace, target: Target) -> None:
    """Raise :class:`UsageError` for options this MODEL cannot use, before it is built."""
    kind = target.input_kind
    if args.device and args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device", "CUDA is not available here")
    if args.seq_len is not None and kind in ("image", "tensor"):
        raise UsageError("--seq-len", f"{target.label} takes images, not tokens (use --input-shape)")
    if args.input_shape is not None and kind in ("text", "text2text", "speech"):
        raise UsageError("--input-shape", f"{target.label} takes token ids{' and audio' if kind == 'speech' else ''} "
                                          "(use --seq-len)")
    limit = zoo.max_tokens(target.config) if target.config is not None else None
    if limit is not None and args.seq_len is not None and args.seq_len > limit:
        raise UsageError("--seq-len", f"{target.label} has {limit} learned positions, fewer than {args.seq_len}")
    if args.mode == "generate":
        if target.can_generate() is False:
            what = f"{target.label} ({target.model_class})" if target.model_class else target.label
            raise UsageError("--mode", f"{what} has no generate(); use --mode forward or train")
        if args.device == "meta":
            raise UsageError("--device", "generate() reads the tokens it makes, and meta tensors have no values; "
                                         "use cpu or cuda")
    if args.output:
        from ..renderers.output import check_output_file

        if os.path.realpath(args.output) in input_files(target):
            raise UsageError("-o/--output", f"{args.output} is the model's {target.kind}: the report would replace it; "
                                            "choose another name")
        try:
            check_output_file(args.output, "-o/--output", args.format, force=args.force)
        except (OSError, TypeError, ValueError) as e:
            raise UsageError("-o/--output", str(e).split(": ", 1)[-1]) from None


def input_files(target: Target) -> set[str]:
    """The files MODEL was read from (a config, a factory's source), as real paths."""
    if target.kind == "config":
        path = target.spec
        return {os.path.realpath(path), os.path.realpath(os.path.join(path, "config.json"))}
    if target.kind == "factory":
        source = target.spec.rsplit(":", 1)[0]
        return {os.path.realpath(source)} if source.endswith(".py") else set()
    return set()


def render(args: argparse.Namespace, result: Any, label: str, warm_up: int) -> str:
    """The report, in the format asked for (``--format``, else -o's extension, else text);
    each format reads the options it uses."""
    from ..renderers.output import format_for, render as render_report

    return render_report(result, format_for(args.output, args.format), profile_step=warm_up, module_depth=args.depth,
                         top_modules=args.top, detailed=args.detailed, detail_depth=args.detail_depth,
                         collapse=args.collapse, ops=args.ops, peak=args.peak, efficiency=args.efficiency,
                         title=f"flopsight: {label}")


def run_mode(args: argparse.Namespace, model: torch.nn.Module, call_args: tuple, call_kwargs: dict, warm_up: int,
             progress: Progress) -> Any:
    """Profile the model as ``--mode`` says."""
    common = dict(warm_up=warm_up, attention=args.attention, progress=progress, repeat=args.repeat)
    if args.mode == "train":
        return run_train(model, call_args, call_kwargs, **common)
    if args.mode == "generate":
        return run_generate(model, call_args, call_kwargs, max_new_tokens=args.max_new_tokens, **common)
    return run_forward(model, call_args, call_kwargs, **common)


def cmd_profile(args: argparse.Namespace) -> int:
    """``flopsight profile``: resolve, check, build, run, render, write."""
    parser: argparse.ArgumentParser = args.parser
    stages = ["build", "profile", "render"]
    with Progress(stages, enabled=args.progress) as progress:
        try:
            with progress.stage("build"):
                target = resolve(args.model)  # imports transformers for most: part of building
                check_options(args, target)
                with quiet_transformers():
                    device, on_meta = pick_device(args, target, progress)
                    model, call_args, call_kwargs = build(args, target, device, on_meta, progress)
            warm_up = args.warm_up if args.warm_up is not None else (0 if device == "meta" else 1)
            total = calls_per_run(args.mode, warm_up, args.max_new_tokens, args.repeat)
            on_meta_device = meta_masks() if device == "meta" else contextlib.nullcontext()
            with progress.stage("profile", total=total), on_meta_device, quiet_transformers():
                result = run_mode(args, model, call_args, call_kwargs, warm_up, progress)
            with progress.stage("render"):
                text = render(args, result, target.label, warm_up)
        except (BadModel, zoo.UnknownModel) as e:
            progress.close()
            parser.error(f"argument MODEL: {e}")
        except UsageError as e:
            progress.close()
            parser.error(str(e))
        except Exception as e:
            progress.close()
            if args.traceback:
                raise
            print(f"flopsight: error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
    from ..renderers.output import write

    write(text, args.output, force=True)  # after the progress bar is gone; checked before the model was built
    if args.output:
        print(f"flopsight: wrote {os.fspath(args.output)}", file=sys.stderr)
    return 0
