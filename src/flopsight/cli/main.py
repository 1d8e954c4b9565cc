"""``flopsight``: profile a model from the command line, list the built-in ones, compare two profiles.

    flopsight profile llama-3-70b --seq-len 2048         # a zoo model (too big for memory: meta)
    flopsight profile my_models.py:build -o report.html  # a factory: a model, or (model, inputs)
    flopsight profile path/to/config.json --mode generate --max-new-tokens 8
    flopsight list                                       # the zoo, with parameter counts
    flopsight diff a.json b.json --fail-on "flops>+1%"   # compare two saved profiles

With no arguments (``python -m flopsight``, ``make demo``) it profiles ResNet-18 and prints
the report. Every option is checked before a model is built: a bad value is a usage error
(exit status 2) naming the option. A model that fails while it runs is exit status 1.
This file parses and composes: MODEL is resolved by :mod:`flopsight.cli.models` and built
by :mod:`flopsight.cli.build`, runs go through :mod:`flopsight.cli.run`, reports through
:mod:`flopsight.renderers`.

>>> parse(["profile", "gpt2", "--seq-len", "64", "--dtype", "bf16"]).dtype
'bfloat16'
>>> parse([]).model, parse(["--model", "resnet50", "--no-detailed"]).detailed
('resnet-18', False)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from typing import Any

import torch

from .._version import __version__
from . import zoo
from .build import DTYPES, build, pick_device
from .meta import meta_masks
from .models import BadModel, Target, UsageError, resolve
from .progress import Progress
from .run import calls_per_run, run_forward, run_generate, run_train
from ..formulas.attention import ATTENTION_CONVENTIONS
from ..renderers import FORMATS as RENDERER_FORMATS
from ..renderers.numbers import params_to_string

__all__ = ["main", "parse", "build_parser", "DEFAULT_MODEL"]

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


# -- the parser ------------------------------------------------------------------------------------
class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help, except where there is none to show (or the
    help already says what it depends on)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False) or "default:" in text or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def _profile_options(p: argparse.ArgumentParser) -> None:
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
    other = p.add_argument_group("other")
    other.add_argument("--progress", action=argparse.BooleanOptionalAction,
                       help="a progress bar on stderr (default: when stderr is a terminal)")
    other.add_argument("--traceback", action="store_true", help="show the whole traceback when the model fails")
    other.add_argument("--version", action="version", version=_version())


def _version() -> str:
    return f"flopsight {__version__} (torch {torch.__version__.split('+')[0]})"


def build_parser() -> argparse.ArgumentParser:
    examples = __doc__.split("\n\n")[1]  # the module docstring's examples
    parser = argparse.ArgumentParser(prog="flopsight", formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Parameters, MACs, FLOPs and latency of every module of a "
                                                 "PyTorch model, in the DeepSpeed Flops Profiler's report.",
                                     epilog=f"examples:\n{examples}\n\nflopsight COMMAND --help shows a command's "
                                            f"options. With no command: flopsight profile {DEFAULT_MODEL}.")
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    profile_parser = commands.add_parser("profile", help="profile a model and print (or write) its report",
                                         usage="flopsight profile [MODEL] [options]",
                                         formatter_class=_Help, description="Profile a model: parameters, MACs, "
                                         "FLOPs and latency per module, in DeepSpeed's report layout.")
    _profile_options(profile_parser)
    profile_parser.set_defaults(run=cmd_profile, parser=profile_parser)
    list_parser = commands.add_parser("list", help="the built-in models, with parameter counts",
                                      description="The built-in models: published hyper-parameters, random weights.")
    list_parser.set_defaults(run=cmd_list, parser=list_parser)
    commands.add_parser("diff", help="compare two saved profiles (flopsight diff --help)", add_help=False)
    return parser


def _with_command(argv: list[str]) -> list[str]:
    """``[]`` is the embedded default, and options without a command are ``profile``'s (as
    the first command line, ``python -m flopsight --model resnet50``, took them)."""
    if not argv:
        return ["profile"]
    if argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        return ["profile", *argv]
    return argv


def parse(argv: list[str]) -> argparse.Namespace:
    """The parsed command line (argparse exits 2 on a bad value)."""
    args = build_parser().parse_args(_with_command(list(argv)))
    if args.command == "profile" and not hasattr(args, "model"):
        args.model = DEFAULT_MODEL
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["diff"]:  # diff has its own parser and exit statuses
        from .diff import main as diff_main

        return diff_main(argv[1:])
    try:
        args = parse(argv)
        return args.run(args)
    except SystemExit as e:  # argparse's errors (2), --help and --version (0)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


# -- flopsight list ------------------------------------------------------------------------------
def _zoo_row(entry: zoo.ZooEntry, have_transformers: bool) -> tuple[str, ...]:
    if entry.needs_transformers and not have_transformers:
        return entry.name, entry.family, "-", "(needs transformers)", entry.source
    config = entry.config()
    with torch.device("meta"):  # no memory, no initialisation: only the shapes are made
        params = zoo.param_count(entry.build(config))
    specs = zoo.input_specs(entry.inputs, config, seq_len=entry.seq_len or 128)
    return entry.name, entry.family, params_to_string(params), zoo.describe_specs(specs), entry.source


def cmd_list(args: argparse.Namespace) -> int:
    """Print the zoo: name, family, parameters (counted on the meta device), default inputs, source."""
    try:
        import transformers  # noqa: F401

        have_transformers = True
    except ImportError:
        have_transformers = False
    rows = [("MODEL", "FAMILY", "PARAMS", "DEFAULT INPUTS (batch 1)", "HYPER-PARAMETERS OF")]
    rows += [_zoo_row(entry, have_transformers) for entry in zoo.ZOO.values()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    if not have_transformers:
        print("\nmodels marked (needs transformers): pip install 'flopsight[transformers]'")
    return 0


# -- flopsight profile ---------------------------------------------------------------------------
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

        try:
            check_output_file(args.output, "-o/--output")
        except (OSError, TypeError) as e:
            raise UsageError("-o/--output", str(e).split(": ", 1)[-1]) from None


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
    common = dict(warm_up=warm_up, attention=args.attention, progress=progress)
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
            total = calls_per_run(args.mode, warm_up, args.max_new_tokens)
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

    write(text, args.output)  # after the progress bar is gone
    if args.output:
        print(f"flopsight: wrote {os.fspath(args.output)}", file=sys.stderr)
    return 0
