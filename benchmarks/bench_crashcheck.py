"""Crash states verified per second by crashcheck (target: at least 200 on one core).

    python benchmarks/bench_crashcheck.py

A small model (rmc1 capped at 64 rows per table, 8 samples per batch, 4 batches) on
CXL-B and PMEM: every persist event of the run, image rebuilt incrementally, recovery
and oracle per state. Simulation time is excluded from the rate.
"""

from __future__ import annotations

import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from workloads.crashcheck import crashcheck  # noqa: E402
from workloads.options import RunOptions  # noqa: E402

TARGET = 200.0


def main() -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    worst = float("inf")
    for system in ("cxl-b", "cxl", "pmem"):
        options = RunOptions(
            system=system, model="rmc1", rows=64, batch_size=8, batches=4, progress=False
        )
        report = crashcheck(options)
        worst = min(worst, report.states_per_second)
        print(
            f"{system:6s} {report.states:6d} states in {report.seconds:6.2f} s: "
            f"{report.states_per_second:8.1f} states/s, {len(report.violations)} violations"
        )
    print(f"slowest: {worst:.1f} states/s (target >= {TARGET:.0f})")
    return 0 if worst >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
