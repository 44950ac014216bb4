"""Sensitivity of the headline ratios to parameters the paper does not give.

    python scripts/sensitivity.py --outdir sens [--batches 3]

For each variant (one parameter changed on every board that has it), re-runs the
systems the four headline ratios need on RM1-RM4 and prints a markdown table.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("sensitivity.py")

from reproduce_paper import PAPER, headline  # noqa: E402
from tqdm import tqdm  # noqa: E402

from components.sim.outputs import replacing_dir  # noqa: E402
from simulate.run.cli import QuietParser, run_main  # noqa: E402
from simulate.run.configure import prepare  # noqa: E402
from simulate.run.options import RunOptions, check_steady_batches  # noqa: E402
from simulate.run.preflight import check_memory, check_outdir  # noqa: E402
from simulate.simulator import run_job, validate  # noqa: E402

PROG = "sensitivity.py"

SYSTEMS = ("pmem", "pcie", "cxl-d", "cxl-b", "cxl")
MODELS = ["rm1", "rm2", "rm3", "rm4"]
# (label, parameter-name suffix to match on every board, value) or a batch size
VARIANTS = [
    ("defaults", None, None),
    ("PMEM write bandwidth x2", "ctrl_write_bandwidth", "3.84GB/s"),
    ("PMEM write bandwidth x0.5", "ctrl_write_bandwidth", "0.96GB/s"),
    ("GPU GEMM efficiency 0.3", "gemm_efficiency", "0.3"),
    ("cudaMemcpy overhead 20us", "memcpy_overhead", "20us"),
    ("batch size 512", "batch_size", 512),
    ("PMEM arbitration by media time", "arbitration", "time"),
]


def sets_for(system: str, suffix: str, value: str) -> list[tuple[str, str]]:
    """Every parameter path of the board ending in suffix that belongs to a PMEM/GPU/CUDA
    component (so a PMEM bandwidth change leaves DRAM caches alone)."""
    _, _, board = prepare(RunOptions(system=system))
    paths = board.param_paths()
    return [
        (p, value)
        for p, (obj, key) in paths.items()
        if key == suffix and type(obj).__name__ in ("Pmem", "Gpu", "CudaRuntime")
    ]


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--outdir", default=None, help="keep every run here (default: a temporary directory)"
    )
    parser.add_argument("--batches", type=int, default=3, help="batches per run (default 3)")
    args = parser.parse_args(argv)
    check_steady_batches(args.batches)
    if args.outdir is not None:
        check_outdir(args.outdir)
    return args


def sweep(args, outdir: Path) -> list[tuple[str, dict[str, str]]]:
    """Every variant's headline ratios; each run's outputs under outdir/<variant>/.
    Every run is validated and its memory checked before the first starts."""
    plan = []
    for number, (label, suffix, value) in enumerate(VARIANTS):
        runs = []
        for system in SYSTEMS:
            for model in MODELS:
                options = RunOptions(
                    system=system,
                    model=model,
                    batches=args.batches,
                    outdir=str(outdir / str(number) / f"{system}-{model}"),
                    progress=False,
                )
                if suffix == "batch_size":
                    options.batch_size = value
                elif suffix:
                    options.sets = sets_for(system, suffix, value)
                validate(options, writes_outdir=False)
                check_memory(options)
                runs.append(options)
        plan.append((label, runs))
    rows = []
    for label, runs in tqdm(plan, desc="variants", file=sys.stderr, disable=None):
        results = {(options.system, options.model): run_job(options) for options in runs}
        rows.append((label, headline(results, MODELS)))
    return rows


def table(rows: list[tuple[str, dict[str, str]]]) -> str:
    keys = list(PAPER)
    lines = ["| variant | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    lines.append("| paper | " + " | ".join(PAPER[k] for k in keys) + " |")
    for label, values in rows:
        lines.append(f"| {label} | " + " | ".join(values[k] for k in keys) + " |")
    return "\n".join(lines)


def body(args) -> int:
    if args.outdir is None:
        with tempfile.TemporaryDirectory(prefix="sensitivity-") as scratch:
            rows = sweep(args, Path(scratch))
    else:
        with replacing_dir(Path(args.outdir), str.isdigit, str.isdigit) as staging:
            rows = sweep(args, staging)
    print(table(rows))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(PROG, lambda: body(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
