"""Collect finished runs (a sweep's outroot, or run outdirs) into one table, and plot.

    python scripts/collect.py PATH... [--stat NAME]... [--out PREFIX]
        [--plot METRIC --x AXIS [--hue AXIS] [--facet AXIS] [--average-over AXIS]...
         [--figure PATH] [--format png|pdf|svg]]

PATH is a sweep's outroot, a folder of run outdirs, or one run's outdir. Writes
PREFIX.csv and PREFIX.parquet (default FIRST_PATH/sweep.*), one row per complete run:
its options (each --set also as a .si number in SI base units), its results flattened
(batch_time_ms.*, breakdown_ms.*, utilisation.*, energy_j.*), the code that made it
(provenance.*) and the stats named by --stat. A plot must give every option that varies
a place (x, --hue, --facet, the seed, or --average-over), or it is refused: averaging
over it would plot a configuration no run had. Errors print one line and exit with 2;
Ctrl-C exits with 130 and leaves any earlier table as it was. See docs/sweeps.md.
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
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="a sweep's outroot, or run outdirs"
    )
    add_collect_options(parser)

    def body() -> int:
        args = parser.parse_args(argv)
        return collect_command(args, args.paths)

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
