"""Crash states checked per second by crashcheck (target: at least 2,000 at the test
scale) and the wall time of the rm3 command of issue 13 (target: about a minute).

    python benchmarks/bench_crashcheck.py [--rm3]

Test scale: rmc1 capped at 64 rows per table, 8 samples per batch, 4 batches, on CXL-B,
CXL and PMEM at crashcheck's default settings (every persist tick, every crash interval
reordered and torn, failures during recovery, media faults). Simulation is excluded
from the rate; "recoveries" counts the recoveries actually run (a state whose recovery
reads the same bytes as an earlier one reuses its verdict). ``--rm3`` also times
``scripts/crashcheck.py --system cxl-b --model rm3 --rows 200 --batch-size 16
--batches 4 --seed 5`` end to end (simulation included) and its peak memory.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.failures.crashcheck import crashcheck  # noqa: E402
from simulate.run.options import RunOptions  # noqa: E402

TARGET = 2000.0
RM3 = ["--system", "cxl-b", "--model", "rm3", "--rows", "200", "--batch-size", "16",
       "--batches", "4", "--seed", "5"]  # fmt: skip


def test_scale() -> float:
    worst = float("inf")
    for system in ("cxl-b", "cxl", "pmem"):
        options = RunOptions(
            system=system, model="rmc1", rows=64, batch_size=8, batches=4, progress=False
        )
        report = crashcheck(options)
        worst = min(worst, report.states_per_second)
        print(
            f"{system:6s} {report.states:6d} states in {report.seconds:6.2f} s: "
            f"{report.states_per_second:8.1f} states/s, {report.recoveries_per_second:7.1f} "
            f"recoveries/s, {len(report.violations)} violations"
        )
    print(f"slowest: {worst:.1f} states/s (target >= {TARGET:.0f})")
    return worst


def rm3() -> None:
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "crashcheck.py")
    started = time.perf_counter()
    out = subprocess.run([sys.executable, script, *RM3], capture_output=True, text=True)
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
    print(f"rm3: {wall:.1f} s wall, peak {peak:.2f} GB, exit {out.returncode}")
    print(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "")


def main(argv: list[str]) -> int:
    warnings.simplefilter("ignore", RuntimeWarning)
    worst = test_scale()
    if "--rm3" in argv:
        rm3()
    return 0 if worst >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
