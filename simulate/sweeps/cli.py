"""Command-line pieces shared by scripts/sweep.py and scripts/collect.py."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from components.sim.mpl import check_backend
from simulate.run.options import UsageError
from simulate.sweeps import collect, collect_plot
from simulate.sweeps.slurm import sbatch_directives
from simulate.sweeps.spec import Sweep


def add_collect_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stat",
        action="append",
        default=[],
        metavar="NAME",
        help="also collect this stat from stats.json (repeatable)",
    )
    parser.add_argument(
        "--out",
        metavar="PREFIX",
        help="write PREFIX.csv and PREFIX.parquet (default OUTROOT/sweep)",
    )
    parser.add_argument(
        "--plot",
        metavar="METRIC",
        help="plot this column, e.g. batch_time_ms.mean; every option that varies must "
        "then be the x axis, --hue, --facet, the seed or --average-over",
    )
    parser.add_argument(
        "--x", metavar="AXIS", help="the option on the plot's x axis (a column, or its last "
        "part: ctrl_write_bandwidth for set.board.cxl_mem.pmem.ctrl_write_bandwidth)",
    )  # fmt: skip
    parser.add_argument("--hue", metavar="AXIS", help="one line per value of this option")
    parser.add_argument("--facet", metavar="AXIS", help="one panel per value of this option")
    parser.add_argument(
        "--average-over",
        action="append",
        default=[],
        metavar="AXIS",
        help="average over this option like over seeds, its spread drawn as error bars "
        "(repeatable; refused by default, since the mean is of no configuration run)",
    )
    parser.add_argument(
        "--png",
        "--figure",
        dest="png",
        metavar="PATH",
        help="figure file (default OUTROOT/METRIC-vs-AXIS.FORMAT)",
    )
    parser.add_argument(
        "--format",
        choices=collect_plot.FORMATS,
        help="figure format (default: the --figure suffix, else png)",
    )


def collect_command(
    args: argparse.Namespace, outroot: str | Path | list, ids: list[str] | None = None
) -> int:
    """Write the table (and the figure); 0, or 1 when no run is complete yet."""
    if bool(args.plot) != bool(args.x):
        raise UsageError("--plot and --x go together")
    if not args.plot and (args.hue or args.facet or args.average_over):
        raise UsageError("--hue, --facet and --average-over go with --plot")
    roots = [Path(p) for p in outroot] if isinstance(outroot, list) else [Path(outroot)]
    for root in roots:
        if not root.is_dir():
            raise UsageError(f"{root}: no such directory")
    root = roots[0]
    if args.out is not None:
        check_out_prefix(args.out)
    if args.png is not None and not args.png.strip():
        raise UsageError("--png must not be empty")
    if args.plot:
        check_backend()
    rows = collect.gather(root if ids is not None else roots, ids, args.stat)
    if not rows:
        print(f"collect: no complete runs under {', '.join(map(str, roots))}", file=sys.stderr)
        return 1
    plan = None
    if args.plot:  # refuse a plot that would mislead before writing anything
        plan = collect_plot.layout(rows, args.plot, args.x, args.hue, args.facet, args.average_over)
    csv_path, parquet_path = collect.write_table(rows, Path(args.out or root / "sweep"))
    print(f"collect: {len(rows)} runs -> {csv_path}, {parquet_path}")
    if plan is not None:
        fmt = args.format or (Path(args.png).suffix.lstrip(".") if args.png else "") or "png"
        name = f"{args.plot}-vs-{args.x}.{fmt}".replace("/", "_")
        figure = Path(args.png or root / name)
        fmt = collect_plot.figure_format(figure, args.format)
        print(f"collect: plot -> {collect_plot.plot(rows, plan, figure, fmt)}")
    return 0


def check_out_prefix(text: str) -> None:
    """--out names files to write (PREFIX.csv, PREFIX.parquet): not empty, not a
    directory (``/``, ``out/``), under a directory that exists or can be made."""
    if not text.strip():
        raise UsageError("--out must not be empty")
    prefix = Path(text)
    if text.endswith(("/", os.sep)) or prefix.is_dir() or prefix.name in ("", ".", ".."):
        raise UsageError(
            f"--out {text}: is a directory; give a file prefix, e.g. {text.rstrip('/')}/sweep"
        )
    ancestor = next((p for p in prefix.parents if p.exists()), Path("."))
    if not ancestor.is_dir():
        raise UsageError(f"--out {text}: {ancestor} is not a directory")


def sbatch_script(sweep: Sweep, sweep_py: str, indices: list[int]) -> str:
    """A plain SLURM array script over these run indices: task i runs `sweep.py SPEC --id i`
    with this interpreter (the venv's python, by absolute path, so nothing to activate).

    Creates the log folder now: sbatch opens --output before the script runs.
    """
    logs = sweep.outroot / ".slurm"
    logs.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        sweep_py,
        str(sweep.path.resolve()),
        "--outroot",
        str(sweep.outroot),
        "--id",
        "$SLURM_ARRAY_TASK_ID",
    ]
    # exec: SLURM's signals (scancel, the time limit) reach the run itself, and no
    # shell is left to die first and orphan it
    quoted = "exec " + " ".join(shlex.quote(word) for word in command[:-1]) + f" {command[-1]}"
    lines = [
        "#!/bin/bash",
        "#SBATCH --job-name=sweep",
        *sbatch_directives(sweep.slurm, indices),
        f"#SBATCH --output={logs}/%A_%a.out",
        "",
        quoted,
    ]
    return "\n".join(lines) + "\n"
