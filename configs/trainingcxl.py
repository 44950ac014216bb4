"""Simulate DLRM training on one TrainingCXL system configuration.

    python configs/trainingcxl.py --system cxl --model rm1 --batches 10
    gem5.opt configs/trainingcxl.py --system cxl --model rm1 --batches 2

Writes stats.txt, stats.json, config.json, results.json and timeline.csv into
--outdir (default m5out/). Errors in the options print one line and exit with 2.
"""

from __future__ import annotations

import os
import sys


def _find_packages() -> None:
    """Make components/ and workloads/ importable from this file's own checkout."""
    try:
        import components  # noqa: F401
        import workloads  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


_find_packages()

from workloads.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("trainingcxl.py")

from workloads.job import run_from_command_line  # noqa: E402

if __name__ in ("__main__", "__m5_main__"):
    sys.exit(run_from_command_line(sys.argv[1:], prog="trainingcxl.py"))
