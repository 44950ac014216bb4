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

from components.sim.params import ConfigError  # noqa: E402
from components.sim.units import UnitError  # noqa: E402
from workloads.crashcheck import crashcheck  # noqa: E402
from workloads.models import ModelSpecError, UnknownModelError  # noqa: E402
from workloads.options import QuietParser, UsageError, add_run_options, options_from_args  # noqa: E402

ERRORS = (ConfigError, UnitError, UsageError, UnknownModelError, ModelSpecError, ValueError)


def main(argv: list[str]) -> int:
    parser = QuietParser(prog="crashcheck.py", description=__doc__.splitlines()[0])
    add_run_options(parser)
    parser.add_argument("--sample", type=int, default=0, help="check K random crash states")
    try:
        args = parser.parse_args(argv)
        if args.sample < 0:
            raise UsageError(f"--sample must not be negative, got {args.sample}")
        options = options_from_args(args)
        options.progress = False
        report = crashcheck(options, args.sample)
    except ERRORS as exc:
        print(f"crashcheck.py: error: {exc}", file=sys.stderr)
        return 2
    for violation in report.violations:
        print(
            f"violation at tick {violation['tick']} in {violation['regions']}: {violation['why']}"
        )
    print(f"{options.system}: {report.states} crash states, {report.verdicts}", file=sys.stderr)
    print(json.dumps(report.summary()))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
