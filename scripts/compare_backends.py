"""Per-op durations of one configuration on the built-in engine and on gem5.

    python scripts/compare_backends.py --system cxl --model rm1 --batches 2
    GEM5=/path/to/gem5.opt python scripts/compare_backends.py --system cxl --batches 2

The built-in side runs here; with GEM5 set, this same script runs again under gem5.opt
(as __m5_main__) to realize the memory ops in gem5 (components/gem5) and the two are
printed side by side with their ratio. Without GEM5 only the built-in side is printed.
Errors in the options print one line and exit with 2.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from workloads.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("compare_backends.py")

from workloads.cli import QuietParser, UsageError, die_with_parent, run_main  # noqa: E402
from workloads.options import add_run_options, options_from_args  # noqa: E402

PROG = "compare_backends.py"
GEM5_SIDE = "--gem5-side"  # internal: argv[1] of the run under gem5.opt, then a JSON path
UNUSED = ("--outdir", "--functional", "--fail-at", "--fail-random", "--pmem-image")
UNUSED += ("--halt-on-failure", "--plot")  # per-op durations of plain runs, in a temp dir


def parse_run_options(argv: list[str], prog: str, description: str):
    """The run options this script uses; the others are refused as unrecognized."""
    parser = QuietParser(prog=prog, description=description.splitlines()[0])
    add_run_options(parser, exclude=UNUSED)
    return options_from_args(parser.parse_args(argv))


def builtin_durations(argv: list[str], outdir: str) -> dict[tuple[int, str], float]:
    """Run the built-in engine; per (batch, op) duration in microseconds from timeline.csv."""
    from workloads.job import run_job

    options = parse_run_options(argv, PROG, __doc__)
    options.outdir, options.progress = outdir, False
    run_job(options)
    with open(Path(outdir) / "timeline.csv", newline="") as handle:
        return {
            (int(row["batch"]), row["op"]): (float(row["end_ms"]) - float(row["start_ms"])) * 1e3
            for row in csv.DictReader(handle)
        }


def gem5_durations(gem5: str, argv: list[str], outdir: str) -> dict[tuple[int, str], float]:
    """Run this script under gem5.opt; per (batch, op) duration in microseconds."""
    out = Path(outdir) / "gem5_ops.json"
    command = [gem5, "-d", str(Path(outdir) / "m5out"), __file__, GEM5_SIDE, str(out), *argv]
    try:  # the gem5 run dies with this process, however this one ends
        subprocess.run(command, check=True, preexec_fn=die_with_parent())
    except subprocess.CalledProcessError as exc:
        raise Gem5Failed(f"GEM5={gem5} exited with status {exc.returncode}") from None
    ops = json.loads(out.read_text())["ops"]
    return {(op["batch"], op["op"]): op["ticks"] / 1e6 for op in ops}


def gem5_side(out: str, argv: list[str]) -> None:
    """Under gem5.opt: realize the memory ops and write their durations to out."""
    from workloads.gem5_run import run_under_gem5

    options = parse_run_options(argv, PROG, __doc__)
    Path(out).write_text(json.dumps(run_under_gem5(options), indent=1) + "\n")


def table(builtin: dict, gem5: dict | None) -> list[str]:
    keys = sorted(gem5 if gem5 is not None else builtin)
    lines = [f"{'batch':>5} {'op':<16} {'built-in us':>12} {'gem5 us':>12} {'gem5/built-in':>14}"]
    for key in keys:
        ours, theirs = builtin.get(key), (gem5 or {}).get(key)
        ratio = f"{theirs / ours:.3f}" if ours and theirs is not None else "-"
        lines.append(f"{key[0]:>5} {key[1]:<16} {_us(ours):>12} {_us(theirs):>12} {ratio:>14}")
    return lines


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


class Gem5Failed(RuntimeError):
    """The gem5 side ended with an error (its own output says why)."""


def check_gem5(gem5: str) -> None:
    if not (os.path.isfile(gem5) and os.access(gem5, os.X_OK)):
        raise UsageError(f"GEM5={gem5}: not an executable file (a gem5.opt build, docs/gem5.md)")


def main(argv: list[str]) -> int:
    def body() -> int:
        from workloads.job import validate
        from workloads.preflight import check_memory

        options = parse_run_options(argv, PROG, __doc__)
        validate(options, writes_outdir=False)
        check_memory(options)
        gem5 = os.environ.get("GEM5")
        if gem5:
            check_gem5(gem5)
        with tempfile.TemporaryDirectory() as outdir:
            builtin = builtin_durations(argv, str(Path(outdir) / "builtin"))
            theirs = gem5_durations(gem5, argv, outdir) if gem5 else None
        print("\n".join(table(builtin, theirs)))
        if not gem5:
            print("note: set GEM5=/path/to/gem5.opt to run the same ops in gem5 (docs/gem5.md)")
        return 0

    try:
        return run_main(PROG, body)
    except Gem5Failed as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__m5_main__" and sys.argv[1:2] == [GEM5_SIDE]:
    gem5_side(sys.argv[2], sys.argv[3:])
elif __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
