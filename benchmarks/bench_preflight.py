"""The memory estimate of simulate/run/preflight.py next to the measured peak of each run.

    python benchmarks/bench_preflight.py

Each configuration runs in its own process (`simulate.peak`: its VmHWM); the estimate must
bound it, and the ratio shows how tight it is. Rerun after changing the timing model,
the functional model or the failure recording: the constants in preflight.py are
measured here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulate.run.options import parse_run_options  # noqa: E402
from simulate.run.preflight import estimate_memory, format_bytes  # noqa: E402

SMALL = "--model rmc1 --batch-size 8"
CONFIGS = [
    "--model rm3 --batches 3",
    "--model rm3 --batches 3 --system pmem",
    "--model rm1 --batches 2",
    "--model rm2 --batches 2",
    "--model rm1 --batches 2 --batch-size 1024",
    "--model rm1 --batches 2 --batch-size 1024 --system dram",
    "--model rm1 --batches 2 --system ssd",
    "--model rmc1 --batches 30 --system ssd --set board.storage.cache_capacity=8MiB",
    "--model rmc1 --batches 2 --functional",
    "--model rmc1 --batches 2 --functional --rows 1000000",
    "--model rm1 --batches 2 --functional --rows 1000",
    f"{SMALL} --system cxl-b --rows 10000 --batches 8 --fail-at 0.2ms",
    "--model rm1 --rows 1000 --batch-size 8 --batches 8 --fail-at 0.2ms",
]


def main() -> int:
    print(f"{'options':<70} {'measured':>10} {'estimate':>10} {'ratio':>6}")
    worst = float("inf")
    for config in CONFIGS:
        args = [*config.split(), "--no-progress", "--outdir", "/tmp/bench_preflight"]
        run = subprocess.run(
            [sys.executable, "-m", "simulate.peak", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        measured = int(run.stdout.split()[-1])
        estimate = estimate_memory(parse_run_options(config.split(), "bench", "")).total
        worst = min(worst, estimate / measured)
        print(
            f"{config:<70} {format_bytes(measured):>10} {format_bytes(estimate):>10}"
            f" {estimate / measured:6.2f}"
        )
    print(f"smallest ratio {worst:.2f} (must be >= 1: the estimate bounds the peak)")
    return 0 if worst >= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
