"""Sweep speedup: the same CPU-bound grid with 1 worker and with N.

    python benchmarks/bench_sweep.py [--workers N] [--batches B]
    python scripts/slurm_cluster.py -- python benchmarks/bench_sweep.py --executor slurm

Each run is a whole simulation (rm3, B batches) in a spawn worker, so the figure
includes worker start-up and the crash-safe outdir handling, as a user sees it.
Target on 2 cores: >= 1.8x. With --executor slurm each run is an array task on the
cluster SLURM_CONF names (array parallelism 1, then N), so the figure also shows what
sbatch, scheduling, srun and submitit's polling add per run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulate.sweeps.driver import execute  # noqa: E402
from simulate.sweeps.spec import load_sweep  # noqa: E402

SPEC = """outroot: {outroot}
fixed: {{model: rm3, batches: {batches}}}
axes: {{system: [cxl, pmem], seed: [1, 2, 3, 4, 5, 6]}}
slurm: {{time: 10, cpus: 1, mem: 1G, array_parallelism: {workers}}}
"""


def timed_sweep(workers: int, batches: int, executor: str) -> float:
    # on SLURM the outroot must be where the jobs see it: the (shared) current directory
    where = "." if executor == "slurm" else None
    with tempfile.TemporaryDirectory(dir=where, prefix=".bench_sweep.") as tmp:
        spec = Path(tmp, "spec.yaml")
        spec.write_text(SPEC.format(outroot=Path(tmp, "out"), batches=batches, workers=workers))
        sweep = load_sweep(spec)
        start = time.perf_counter()
        summary = execute(sweep, sweep.runs, executor, workers)
        elapsed = time.perf_counter() - start
    if summary.failures:
        raise SystemExit("\n".join(summary.lines()))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--executor", choices=("local", "slurm"), default="local")
    args = parser.parse_args()
    serial = timed_sweep(1, args.batches, args.executor)
    parallel = timed_sweep(args.workers, args.batches, args.executor)
    print(
        f"12 runs (rm3, {args.batches} batches, {args.executor}): 1 worker {serial:.1f} s, "
        f"{args.workers} workers {parallel:.1f} s, speedup {serial / parallel:.2f}x"
    )


if __name__ == "__main__":
    main()
