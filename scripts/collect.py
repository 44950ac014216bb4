"""Collect a sweep's finished runs into one table, and optionally plot a metric.

    python scripts/collect.py OUTROOT [--stat NAME]... [--out PREFIX]
                              [--plot METRIC --x AXIS [--png PATH]]

Writes PREFIX.csv and PREFIX.parquet (default OUTROOT/sweep.*), one row per complete
run: its options, results.json (batch_time_ms.*, breakdown_ms.*, energy_j.total) and
the stats named by --stat. Errors print one line and exit with 2; Ctrl-C exits with
130 and leaves any earlier table as it was.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("collect.py")

from simulate.run.cli import QuietParser, run_main  # noqa: E402
from simulate.sweeps.cli import add_collect_options, collect_command  # noqa: E402

PROG = "collect.py"


def main(argv: list[str] | None = None) -> int:
    parser = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("outroot", help="the sweep's outroot directory")
    add_collect_options(parser)

    def body() -> int:
        args = parser.parse_args(argv)
        return collect_command(args, args.outroot)

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
