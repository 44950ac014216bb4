"""Run one simulation command line, then print this process's peak resident memory.

    python -m simulate.peak [configs/trainingcxl.py options]

How the memory estimate of simulate/run/preflight.py is checked (tests/test_preflight.py,
benchmarks/bench_preflight.py): each configuration in a process of its own, whose
VmHWM is its own peak (``ru_maxrss`` of a forked child would carry its parent's).
"""

from __future__ import annotations

import sys

from simulate.simulator import run_from_command_line


def peak_resident_bytes() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    with open("/proc/self/status") as status:
        return int(status.read().split("VmHWM:")[1].split()[0]) * 1024


def main(argv: list[str]) -> int:
    status = run_from_command_line(argv, "trainingcxl.py")
    print(peak_resident_bytes())
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
