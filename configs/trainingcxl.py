"""Simulate DLRM training on one TrainingCXL system configuration.

    python configs/trainingcxl.py --system cxl --model rm1 --batches 10
    gem5.opt configs/trainingcxl.py --system cxl --model rm1 --batches 2

Writes stats.txt, stats.json, config.json, results.json and timeline.csv into
--outdir (default m5out/). Errors in the options print one line and exit with 2.
Under gem5.opt the run's memory ops are also replayed in gem5 (docs/gem5.md).
"""

from __future__ import annotations

import os
import sys

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _find_packages() -> None:
    """Make components/, workloads/ and simulate/ importable from this file's own checkout (unless
    gem5 embeds them), and, inside gem5, the venv packages they import."""
    try:
        import components  # noqa: F401
        import simulate  # noqa: F401
        import workloads  # noqa: F401
    except ImportError:
        sys.path.insert(0, CHECKOUT)
    from components.gem5 import available
    from components.gem5.bootstrap import ensure_dependencies

    if available():
        ensure_dependencies(CHECKOUT)


_find_packages()

from simulate.run.startup import note_first_compile, quiet_interrupts  # noqa: E402

quiet_interrupts("trainingcxl.py")
note_first_compile("trainingcxl.py")

from simulate.simulator import run_from_command_line  # noqa: E402

if __name__ in ("__main__", "__m5_main__"):
    from components.gem5 import available

    if available():  # refuse what gem5 cannot model before simulating anything
        from simulate.run.gem5_run import refusal

        reason = refusal(sys.argv[1:])
        if reason:
            print(f"trainingcxl.py: error: {reason}", file=sys.stderr)
            sys.exit(2)
    sys.exit(run_from_command_line(sys.argv[1:], prog="trainingcxl.py"))
