"""``flopsight``: profile a model from the command line, list the built-in ones, compare two profiles.

    flopsight profile llama-3-70b --seq-len 2048         # a zoo model (too big for memory: meta)
    flopsight profile my_models.py:build -o report.html  # a factory: a model, or (model, inputs)
    flopsight profile path/to/config.json --mode generate --max-new-tokens 8
    flopsight list                                       # the zoo, with parameter counts
    flopsight diff a.json b.json --fail-on "flops>+1%"   # compare two saved profiles

With no arguments (``python -m flopsight``, ``make demo``) it profiles ResNet-18 and prints
the report. Every option is checked before a model is built: a bad value is a usage error
(exit status 2) naming the option. A model that fails while it runs is exit status 1, and
Ctrl-C exit status 130, each with one line on stderr (``--traceback`` shows the whole one).
This file parses and dispatches: ``profile`` is :mod:`.profile` (its options
:mod:`.options`), ``list`` :mod:`.listing`, ``diff`` :mod:`.diff` (with a parser of its own).
Parsing imports no torch: ``--help``, ``--version``, ``list`` and usage errors are quick;
a command's module is imported when it runs.

>>> parse(["profile", "gpt2", "--seq-len", "64", "--dtype", "bf16"]).dtype
'bfloat16'
>>> parse([]).model, parse(["--model", "resnet50", "--no-detailed"]).detailed
('resnet-18', False)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

from .._quiet import import_torch
from .._version import __version__
from .listing import cmd_list
from .options import DEFAULT_MODEL, add_options

__all__ = ["main", "parse", "build_parser", "DEFAULT_MODEL", "INTERRUPTED"]

#: the exit status of a run stopped by Ctrl-C (SIGINT): 128 + 2, as shells report it
INTERRUPTED = 130


# -- the parser ------------------------------------------------------------------------------------
class _Help(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help, except where there is none to show (or the
    help already says what it depends on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False) or "default:" in text or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def _version() -> str:
    """``flopsight X (torch Y)``, torch's version read from its installed metadata (importing
    torch takes a second or two)."""
    try:
        torch_version = importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"flopsight {__version__} (torch {torch_version})"


def cmd_profile(args: argparse.Namespace) -> int:
    import_torch()  # before anything else imports it, its NumPy notice hidden
    from .profile import cmd_profile as run  # torch, the models, the profiler: only when it runs

    return run(args)


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
    add_options(profile_parser, _version())
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
    args = None
    try:
        if argv[:1] == ["diff"]:  # diff has its own parser and exit statuses
            from .diff import main as diff_main

            return diff_main(argv[1:])
        try:
            args = parse(argv)
            return args.run(args)
        except SystemExit as e:  # argparse's errors (2), --help and --version (0)
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except KeyboardInterrupt:  # Ctrl-C: one line, as for any failure (the progress bar is erased by then)
        if getattr(args, "traceback", False):
            raise
        print("flopsight: interrupted", file=sys.stderr)
        return INTERRUPTED
