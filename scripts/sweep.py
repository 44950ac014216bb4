"""Run a grid of training runs declared in a YAML or TOML spec.

    python scripts/sweep.py SPEC                 # every unfinished run, local pool
    python scripts/sweep.py SPEC --list          # run index, id, axis values, status
    python scripts/sweep.py SPEC --id N          # only run N (SLURM array task style)
    python scripts/sweep.py SPEC --executor slurm   # one submitit job array
    python scripts/sweep.py SPEC --sbatch > sweep.sbatch   # a plain sbatch array script
    python scripts/sweep.py SPEC --collect [--stat NAME] [--plot METRIC --x AXIS]

Each run lands in OUTROOT/<id>, id = hash of its options; finished runs are skipped.
A malformed spec prints one line naming the field and exits with 2 before any run;
failed runs are listed at the end and make the exit status 1; Ctrl-C exits with 130,
keeping every finished run. See docs/sweeps.md.
"""

from __future__ import annotations

import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("sweep.py")

from simulate.run.cli import error_line, os_error_text, raise_received, raising_on  # noqa: E402
from simulate.run.options import QuietParser, UsageError  # noqa: E402
from simulate.sweeps.cli import add_collect_options, collect_command, sbatch_script  # noqa: E402
from simulate.sweeps.driver import execute, status  # noqa: E402
from simulate.sweeps.spec import load_sweep  # noqa: E402

MAX_WORKERS_PER_CPU = 4
INTERRUPTED = {
    "local": "sweep.py: interrupted; finished runs are kept, runs in flight are dropped "
    "(rerun the same command to finish the sweep)",
    "slurm": "sweep.py: interrupted; finished runs are kept and the submitted jobs go on "
    "(scancel them, or rerun the same command once they end)",
}


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="sweep.py", description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="sweep spec (.yaml, .yml or .toml)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print the runs and exit")
    mode.add_argument("--id", type=int, metavar="N", help="run only the Nth run (from 0)")
    mode.add_argument("--collect", action="store_true", help="collect finished runs")
    mode.add_argument("--sbatch", action="store_true", help="print an sbatch array script")
    parser.add_argument(
        "--executor",
        choices=("local", "slurm", "debug"),
        default="local",
        help="local process pool, SLURM via submitit, or submitit's "
        "in-process debug executor (default: local)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="local pool size (default: all cores)",
    )
    parser.add_argument("--outroot", help="override the spec's outroot")
    parser.add_argument(
        "--no-shared-inputs",
        dest="shared_inputs",
        action="store_false",
        help="every run generates its own batches (default: local runs with the same "
        "inputs share them in OUTROOT/.inputs, docs/sweeps.md)",
    )
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="count runs that other code finished as done (default: refuse, since the "
        "table would mix results of two code versions)",
    )
    add_collect_options(parser)
    args = parser.parse_args(argv)
    # each worker is one process of one BLAS thread: past a few per CPU they only contend
    most = MAX_WORKERS_PER_CPU * (os.cpu_count() or 1)
    if not 1 <= args.workers <= most:
        raise UsageError(
            f"--workers must be in 1..{most} ({MAX_WORKERS_PER_CPU} per CPU), got {args.workers}"
        )
    return args


def sbatch(sweep) -> int:
    """Print an array script over the unfinished runs, so resubmitting redoes only them."""
    pending = [run.index for run in sweep.runs if status(sweep, run) != "done"]
    if not pending:
        print(
            f"sweep.py: all {len(sweep.runs)} runs are complete; nothing to submit", file=sys.stderr
        )
        return 0
    print(sbatch_script(sweep, os.path.abspath(__file__), pending), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    with raising_on(signal.SIGINT):  # Ctrl-C unwinds, so the runs in flight are cleaned
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = None
    try:
        args = parse_args(argv)
        sweep = load_sweep(args.spec, args.outroot)
        if args.list:
            for run in sweep.runs:
                point = " ".join(f"{k}={v}" for k, v in run.point.items())
                print(f"{run.index} {run.id} {point} {status(sweep, run)}".replace("  ", " "))
            return 0
        if args.sbatch:
            return sbatch(sweep)
        if args.collect:
            return collect_command(args, sweep.outroot, [run.id for run in sweep.runs])
        runs = sweep.runs
        if args.id is not None:
            if not 0 <= args.id < len(runs):
                raise UsageError(f"--id {args.id}: the spec has runs 0..{len(runs) - 1}")
            runs = [runs[args.id]]
        summary = execute(
            sweep, runs, args.executor, args.workers, args.shared_inputs, args.allow_mixed
        )
        raise_received()
    except UsageError as exc:
        print(error_line("sweep.py", exc), file=sys.stderr)
        return 2
    except OSError as exc:  # an outroot that cannot be written, a full disk
        if isinstance(exc, BrokenPipeError):  # `--list | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        print(error_line("sweep.py", os_error_text(exc)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        submitted = args is not None and args.executor == "slurm" and args.id is None
        print(INTERRUPTED["slurm" if submitted else "local"], file=sys.stderr)
        return 130
    print("\n".join(summary.lines()))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
