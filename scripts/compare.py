"""Compare runs side by side: results, breakdowns, and every option, parameter and stat
that differs.

    python scripts/compare.py RUN_A RUN_B [RUN_C...] [--csv PATH] [--plot PATH]
                              [--format png|pdf|svg]

Each RUN is a run's outdir (the CLI's --outdir, the API's outdir, a sweep's OUTROOT/<id>).
The first run is the reference; with two runs a column gives the change. Host-side
stats (hostSeconds, hostMemory) are left out: they differ between any two runs. --plot
draws the critical-path breakdowns as stacked bars on a linear axis. Errors print one
line and exit with 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("compare.py")

from simulate.run.cli import QuietParser, run_main  # noqa: E402
from simulate.sweeps import compare  # noqa: E402

PROG = "compare.py"
FORMATS = ("png", "pdf", "svg")


def main(argv: list[str] | None = None) -> int:
    parser = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help="run outdirs; the first is the reference"
    )
    parser.add_argument("--csv", metavar="PATH", help="also write the table as CSV")
    parser.add_argument("--plot", metavar="PATH", help="draw the breakdowns into this figure")
    parser.add_argument(
        "--format", choices=FORMATS, help="figure format (default: the --plot suffix, else png)"
    )

    def body() -> int:
        args = parser.parse_args(argv)
        paths = [Path(run) for run in args.runs]
        sections = compare.compare(paths)
        labels = compare.labels_of(paths)
        try:
            print(compare.format_table(sections, labels), end="", flush=True)
        except BrokenPipeError:  # `compare.py A B | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        if args.csv:
            print(f"compare: table -> {compare.write_csv(sections, labels, Path(args.csv))}")
        if args.plot:
            from components.sim import plots
            from simulate.sweeps.collect import read_json

            results = [read_json(path / "results.json") for path in paths]
            out = Path(args.plot)
            fmt = args.format or out.suffix.lstrip(".") or "png"
            plots.plot_breakdown(results, labels, "critical-path breakdown, mean steady batch",
                                 out, fmt=fmt)  # fmt: skip
            print(f"compare: plot -> {out}")
        return 0

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main())
