"""One consistent checkpoint across CXL-MEMs: crash exploration at 4 x 4, the cross-device
mutants, and recovery time against the number of CXL-MEMs.

    python benchmarks/bench_cluster.py [--skip-crashcheck] [--skip-recovery] [--mems 1,2,4,8]

- crashcheck at its default settings on 4 GPUs x 4 CXL-MEMs (rmc1, 64 rows a table,
  batch 8; cxl-b 4 batches, cxl 6), and every mutant of tests/cluster_mutants.py on
  2 x 2: states, rate, cross-device states, violations;
- recovery time vs M: RM1 (the functional default of 100,000 rows a table, batch 128)
  on 1 GPU and M CXL-MEMs, the power cut one tick before batch 1's last update ends
  (every device holds undo logs of batches 0 and 1; M = 1 is the single-device board):
  the recovery's phases, each device reading back only its own logs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from cluster_mutants import CLUSTER_MUTANTS  # noqa: E402

from simulate.failures.crashcheck import crashcheck  # noqa: E402
from simulate.failures.inject import recovery_cost  # noqa: E402
from simulate.run.options import RunOptions  # noqa: E402


def crash_options(system: str, devices: int) -> RunOptions:
    return RunOptions(system=system, model="rmc1", rows=64, batch_size=8,
                      batches=6 if system == "cxl" else 4, gpus=devices, cxl_mems=devices,
                      progress=False)  # fmt: skip


def crash_table() -> None:
    print("| run | states | states/s | cross-device states | violations |")
    print("|---|---|---|---|---|")
    runs = [(s, 4, None) for s in ("cxl-b", "cxl")]
    runs += [(s, 2, m) for s, m in CLUSTER_MUTANTS]
    for system, devices, mutant in runs:
        started = time.perf_counter()
        report = crashcheck(crash_options(system, devices), protocol_class=mutant)
        seconds = time.perf_counter() - started
        name = f"{system} {devices}x{devices}" + (f" {mutant.__name__}" if mutant else "")
        cross = ", ".join(f"{k} {v}" for k, v in sorted(report.cross_device.items()))
        print(f"| {name} | {report.states:,} | {report.states / seconds:,.0f} | {cross} | "
              f"{len(report.violations)} |", flush=True)  # fmt: skip


def recovery_table(mems: list[int]) -> None:
    print("| CXL-MEMs | resume | bytes read | recovery (ms) | phases (ms) |")
    print("|---|---|---|---|---|")
    for m in mems:
        options = RunOptions(system="cxl-b", model="rm1", batches=3, cxl_mems=m, progress=False)
        entry = recovery_cost(options)
        phases = ", ".join(f"{k.removeprefix('recovery_')} {v:.3f}"
                           for k, v in entry.get("recovery_phases_ms", {}).items())  # fmt: skip
        print(f"| {m} | {entry['resume_batch']} ({entry['verdict']}) | "
              f"{entry.get('recovery_bytes_read', '-')} | {entry['recovery_ms']:.3f} | {phases} |",
              flush=True)  # fmt: skip


def main() -> None:
    warnings.simplefilter("ignore", RuntimeWarning)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-crashcheck", action="store_true")
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument("--mems", default="1,2,4,8")
    args = parser.parse_args()
    if not args.skip_crashcheck:
        crash_table()
    if not args.skip_recovery:
        recovery_table([int(m) for m in args.mems.split(",")])


if __name__ == "__main__":
    main()
