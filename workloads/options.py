"""The command-line options of a training run, shared by configs/ and scripts/.

configs/trainingcxl.py, scripts/sweep.py and scripts/crashcheck.py all describe a run
with these options, so a sweep axis or a crash check names exactly what a user types.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field


class UsageError(ValueError):
    """A bad option value, reported as one line and exit status 2."""


class QuietParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so callers decide how errors look."""

    def error(self, message: str):
        raise UsageError(message)


SYSTEMS = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl", "dram")


@dataclass
class RunOptions:
    system: str = "cxl"
    model: str = "rm1"
    batches: int = 10
    batch_size: int | None = None
    seed: int = 1
    outdir: str = "m5out"
    sets: list[tuple[str, str]] = field(default_factory=list)
    functional: bool = False
    rows: int | None = None
    fail_at: list[str] = field(default_factory=list)
    fail_random: int = 0
    pmem_image: str | None = None
    progress: bool = True
    plot: bool = False
    halt_on_failure: bool = False


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--system",
        default="cxl",
        choices=SYSTEMS,
        help="system configuration from the paper (default: cxl)",
    )
    parser.add_argument("--model", default="rm1", help="model preset (rm1..rm4, ...)")
    parser.add_argument("--batches", type=int, default=10, help="training batches to run")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="samples per batch (default: the model's documented default)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of inputs and weights")
    parser.add_argument("--outdir", default="m5out", help="output directory (default m5out)")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a component parameter, e.g. "
        "board.cxl_mem.pmem.read_latency=400ns (repeatable)",
    )
    parser.add_argument(
        "--functional",
        action="store_true",
        help="train with real DLRM numerics alongside the timing model",
    )
    parser.add_argument(
        "--rows", type=int, default=None, help="cap on rows per embedding table (functional runs)"
    )
    parser.add_argument(
        "--fail-at",
        action="append",
        default=[],
        metavar="TIME",
        help="inject a power failure at this simulated time (e.g. 3.2ms)",
    )
    parser.add_argument(
        "--fail-random",
        type=int,
        default=0,
        metavar="K",
        help="inject K power failures at seeded random instants",
    )
    parser.add_argument(
        "--pmem-image",
        default=None,
        metavar="PATH",
        help="file backing the PMEM image (functional runs)",
    )
    parser.add_argument(
        "--halt-on-failure",
        action="store_true",
        help="stop at the first injected failure, leaving --pmem-image as the power cut left "
        "it (a later run given that image recovers from it)",
    )
    parser.add_argument(
        "--plot", action="store_true", help="also write timeline.png and breakdown.png"
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="do not show a progress bar"
    )


def options_from_args(args: argparse.Namespace) -> RunOptions:
    if args.batches < 1:
        raise UsageError(f"--batches must be at least 1, got {args.batches}")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.rows is not None and args.rows < 1:
        raise UsageError(f"--rows must be at least 1, got {args.rows}")
    if args.halt_on_failure and not (args.pmem_image and (args.fail_at or args.fail_random)):
        raise UsageError("--halt-on-failure needs --pmem-image and --fail-at or --fail-random")
    if args.fail_random < 0:
        raise UsageError(f"--fail-random must not be negative, got {args.fail_random}")
    sets = []
    for item in args.sets:
        path, sep, value = item.partition("=")
        if not sep or not path.strip() or not value.strip():
            raise UsageError(f"--set expects PATH=VALUE, got {item!r}")
        sets.append((path.strip(), value.strip()))
    return RunOptions(
        system=args.system,
        model=args.model,
        batches=args.batches,
        batch_size=args.batch_size,
        seed=args.seed,
        outdir=args.outdir,
        sets=sets,
        functional=args.functional,
        rows=args.rows,
        fail_at=list(args.fail_at),
        fail_random=args.fail_random,
        pmem_image=args.pmem_image,
        progress=args.progress,
        plot=args.plot,
        halt_on_failure=args.halt_on_failure,
    )


def parse_run_options(argv: list[str] | None, prog: str, description: str) -> RunOptions:
    parser = QuietParser(prog=prog, description=description)
    add_run_options(parser)
    return options_from_args(parser.parse_args(argv))
