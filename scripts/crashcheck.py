"""Enumerate crash states of one recorded run and check each system's recovery.

    python scripts/crashcheck.py --system cxl-b --model rmc1 --rows 64 --batch-size 8 \
        --batches 4 [--sample 500]

Simulates the run once, cuts its journal of persisted writes at every persist event
(or a random sample of K), recovers each image and compares it with the failure-free
reference. Prints every violation (tick, regions, why), then a JSON summary line
{"states", "states_per_second", "violations"}. Bad input: one error line, exit 2.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workloads.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("crashcheck.py")

from workloads.cli import QuietParser, UsageError, run_main  # noqa: E402
from workloads.crashcheck import crashcheck  # noqa: E402
from workloads.job import validate  # noqa: E402
from workloads.options import add_run_options, options_from_args  # noqa: E402
from workloads.preflight import check_crashcheck  # noqa: E402

PROG = "crashcheck.py"
UNUSED = ("--outdir", "--functional", "--fail-at", "--fail-random", "--pmem-image")
UNUSED += ("--halt-on-failure", "--plot")  # a crash check writes no outputs, cuts every state


def main(argv: list[str]) -> int:
    parser = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    add_run_options(parser, exclude=UNUSED)
    parser.add_argument("--sample", type=int, default=0, help="check K random crash states")

    def body() -> int:
        args = parser.parse_args(argv)
        if args.sample < 0:
            raise UsageError(f"--sample must not be negative, got {args.sample}")
        options = options_from_args(args)
        validate(options, writes_outdir=False)
        check_crashcheck(options, args.sample)
        report = crashcheck(options, args.sample)
        for violation in report.violations:
            print(
                f"violation at tick {violation['tick']} in {violation['regions']}: "
                f"{violation['why']}"
            )
        print(f"{options.system}: {report.states} crash states, {report.verdicts}", file=sys.stderr)
        print(json.dumps(report.summary()))
        return 1 if report.violations else 0

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
