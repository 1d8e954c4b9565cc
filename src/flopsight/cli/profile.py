"""``flopsight profile MODEL``: resolve MODEL (:mod:`.models`), build it (:mod:`.build`), run
it (:mod:`.run`), render and write the report (:mod:`flopsight.renderers.output`). Its
options are :mod:`.options`'."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

import torch

from ..capture.charging.calls import failure_text
from ..capture.model.recursion import room_for
from ..options import ProfileOptions
from . import zoo
from .build import build, explain_input_shape, pick_device
from .meta import meta_masks
from .models import BadModel, Target, UsageError, resolve
from .progress import Progress
from .repeat import MIN_REPEAT
from .run import calls_per_run, run_forward, run_generate, run_train

__all__ = ["cmd_profile", "check_options", "input_files"]



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


def failure_line(error: BaseException) -> str:
    """One line for a model that raised: what, where (the innermost module the profiler saw
    raise it, with its class) and the message's first line.

    >>> e = RuntimeError("shapes do not match\\nmore detail")
    >>> e.__notes__ = ["flopsight: raised in module 'encoder.layer.3' (BertLayer)"]  # as add_note would
    >>> failure_line(e)
    "RuntimeError raised in module 'encoder.layer.3' (BertLayer): shapes do not match"
    """
    message = str(error).strip().splitlines()
    return failure_text(error) + (f": {message[0]}" if message else "")


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
    from ..renderers.output import format_for
    from ..renderers.output import render as render_report

    return render_report(result, format_for(args.output, args.format), profile_step=warm_up, module_depth=args.depth,
                         top_modules=args.top, detailed=args.detailed, detail_depth=args.detail_depth,
                         collapse=args.collapse, ops=args.ops, peak=args.peak, efficiency=args.efficiency,
                         title=f"flopsight: {label}")


def given_repeat(args: argparse.Namespace, device: str) -> int | None:
    """The timed calls ``--repeat`` asks for: its N, else 1 on the meta device (nothing runs on
    hardware: there is no latency to sample), else None (``auto``: planned from the model's speed)."""
    if args.repeat is not None:
        return args.repeat
    return 1 if device == "meta" else None


def run_mode(args: argparse.Namespace, model: torch.nn.Module, call_args: tuple, call_kwargs: dict, warm_up: int,
             progress: Progress, repeat: int | None = None, labels: bool = False) -> Any:
    """Profile the model as ``--mode`` says, ``repeat`` timed calls (None: ``--repeat auto``);
    ``labels``: a training step gives the model labels for its own loss (a built-in model's
    inputs, not a factory's own)."""
    auto = repeat is None
    options = ProfileOptions(warm_up=warm_up, attention=args.attention, repeat=MIN_REPEAT if repeat is None else repeat)
    # torch's own walks (model.eval(), .train(), .parameters()) recurse: room for a deep model's
    with room_for(model):
        if args.mode == "train":
            return run_train(model, call_args, call_kwargs, options, progress=progress, auto=auto, labels=labels)
        if args.mode == "generate":
            return run_generate(model, call_args, call_kwargs, options, max_new_tokens=args.max_new_tokens,
                                progress=progress, auto=auto)
        return run_forward(model, call_args, call_kwargs, options, progress=progress, auto=auto)


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
            repeat = given_repeat(args, device)
            # auto: the calls planned are known once the model has been timed (the bar learns them then)
            total = calls_per_run(args.mode, warm_up, args.max_new_tokens, repeat or MIN_REPEAT)
            on_meta_device = meta_masks() if device == "meta" else contextlib.nullcontext()
            with progress.stage("profile", total=total), on_meta_device, quiet_transformers():
                try:
                    result = run_mode(args, model, call_args, call_kwargs, warm_up, progress, repeat,
                                      labels=target.kind != "factory")
                except Exception:
                    explain_input_shape(args, model, call_args)  # a UsageError when the batch was in the shape
                    raise
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
            print(f"flopsight: error: {failure_line(e)} (--traceback shows where)", file=sys.stderr)
            return 1
    from ..renderers.output import write

    write(text, args.output, force=True)  # after the progress bar is gone; checked before the model was built
    if args.output:
        print(f"flopsight: wrote {os.fspath(args.output)}", file=sys.stderr)
    return 0
