"""compare_backends' gem5 side, as the script launches it, for the gem5 tests."""

from __future__ import annotations

import sys
from pathlib import Path

from components.gem5 import binary

GEM5 = binary()
ROOT = Path(__file__).resolve().parents[1]


def compare(outdir: Path, *args: str) -> dict:
    """One gem5 run of compare_backends with ``args``; its JSON back."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import compare_backends
    finally:
        sys.path.pop(0)
    sample = 0
    if "--gem5-sample" in args:
        at = args.index("--gem5-sample")
        sample, args = int(args[at + 1]), args[:at] + args[at + 2 :]
    return compare_backends.run_gem5(GEM5, list(args), outdir, sample)
