"""The memory ops of a run realized with stock gem5 SimObjects (docs/gem5.md).

``translate`` and ``ops`` are pure and import anywhere; ``system`` and ``runner`` need
gem5's embedded ``m5`` and are imported only by ``workloads.gem5_run``.
"""

from __future__ import annotations

import importlib.util


def available() -> bool:
    """True when running inside gem5.opt (its ``m5`` package is importable)."""
    try:
        return importlib.util.find_spec("m5") is not None
    except ValueError:  # m5 already imported without a spec (embedded module)
        return True
