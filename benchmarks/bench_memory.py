"""Wall time of the vectorized PMEM model on 10^6-request streams (should be << 1 s)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

try:
    import components  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from components.memory import Pmem

N = 10**6


def timed(label: str, fn) -> None:
    start = time.perf_counter()
    access = fn()
    wall = time.perf_counter() - start
    print(f"{label:<44s} {wall * 1e3:8.1f} ms wall  simulated {access.ticks / 1e6:10.1f} us")


def main() -> None:
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 2**27, N).astype(np.int64) * 128
    pmem = Pmem()
    timed("1e6 random 128 B reads", lambda: pmem.read(rows, 128, 0))
    seq = np.arange(N, dtype=np.int64) * 64
    timed("1e6 sequential 64 B writes (combining)", lambda: pmem.write(seq, 64, 10**12))
    timed("1e6 random 128 B writes (RMW)", lambda: pmem.write(rows, 128, 2 * 10**12))
    timed("1e6 random 128 B reads with RAW check", lambda: pmem.read(rows, 128, 2 * 10**12))


if __name__ == "__main__":
    main()
