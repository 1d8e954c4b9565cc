"""``flopsight diff a.json b.json``: compare two saved profiles, gate a CI job on the change.

    flopsight diff main.json pr.json --format md --fail-on "flops>+1%" --fail-on "latency>+10%"

It opens with what each side ran (model, inputs, dtype, device, backend, torch and flopsight
versions) and a warning per difference; when the model classes differ it compares the totals
only, unless ``--force``. Exit status: 0 when every gate passes, 1 when one fails (each failure
is printed on stderr), 2 on a usage error (a malformed gate, a missing file, a file that is not
a flopsight profile JSON, a module gate on two different model classes without ``--force``).
The gate grammar and the noise rule are in docs/diff.md.
"""

from __future__ import annotations

import argparse
import sys

from ..analysis.diff import DEFAULT_ALPHA, DIFF_FORMATS, GATE_GRAMMAR, diff, parse_gates

__all__ = ["main"]

#: Exit statuses.
OK, GATE_FAILED, USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flopsight diff",
        description="Compare two saved flopsight profiles, module by module, and gate a CI job on the change.",
        epilog=f"GATE: {GATE_GRAMMAR}. Exit status: 0 all gates pass, 1 a gate failed, 2 usage error.",
    )
    parser.add_argument("a", help="the profile before (a .json written by result.save)")
    parser.add_argument("b", help="the profile after")
    parser.add_argument("--format", choices=DIFF_FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("--all", action="store_true", dest="all_modules",
                        help="list every module, not only changed ones")
    parser.add_argument("--fail-on", action="append", default=[], metavar="GATE",
                        help='fail (exit 1) when the change passes GATE, e.g. "flops>+1%%"; repeatable')
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"significance level of the noise test on latencies (default: {DEFAULT_ALPHA})")
    parser.add_argument("--force", action="store_true",
                        help="compare module by module even when the two model classes differ (by default only "
                             "the totals are compared then: a path in one model is not the same module in the other)")
    return parser


def _usage_error(message: str) -> int:
    print(f"flopsight diff: error: {message}", file=sys.stderr)
    return USAGE


def main(argv: list[str] | None = None) -> int:
    """Run ``flopsight diff`` with ``argv`` (default: the command line after ``diff``)."""
    args = _parser().parse_args(argv)  # argparse itself exits 2 on unknown flags
    try:
        gates = parse_gates(args.fail_on)  # a typo fails before any file is read
        if not 0 < args.alpha < 1:
            raise ValueError(f"--alpha: expected a significance level between 0 and 1, got {args.alpha!r}")
        result = diff(args.a, args.b, force=args.force)
        outcomes = result.evaluate(gates, alpha=args.alpha)  # an unknown module path is a usage error too
    except (OSError, ValueError, TypeError) as e:
        return _usage_error(str(e))
    sys.stdout.write(result.render(args.format, all_modules=args.all_modules, gates=outcomes))
    failures = [g for g in outcomes if not g.passed]
    for failure in failures:
        print(f"flopsight diff: gate failed: {failure.message}", file=sys.stderr)
    return GATE_FAILED if failures else OK


if __name__ == "__main__":
    sys.exit(main())
