"""Wall time of the vectorized PMEM model on 10^6-request streams (should be << 1 s).

    python benchmarks/bench_memory.py

Each case derives the streams' needs from their addresses and runs them on an engine
alone (as one op each, started together), so the wall time covers splitting into
lines, buffer or WPQ merging, RMW, controller order and the flow network.
"""

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
from components.memory.stages import stage
from components.sim.engine import Engine
from components.sim.schedule import Scheduler

N = 10**6
WINDOW = 256  # the near-memory engine's requests in flight


def run(label: str, device: Pmem, *streams: tuple[str, np.ndarray, int]) -> None:
    """Run each (op, addresses, size) as its own op from tick 0; print wall and ticks."""
    start = time.perf_counter()
    engine = Engine()
    scheduler = Scheduler(engine)
    device.bind(engine.event)
    handles = [
        scheduler.op(
            f"op{i}",
            "embedding",
            0,
            f"unit{i}",
            lambda now, op=op, addr=addr, size=size: stage(getattr(device, op)(addr, size, WINDOW)),
        )
        for i, (op, addr, size) in enumerate(streams)
    ]
    engine.run()
    wall = time.perf_counter() - start
    end = max(h.record.end for h in handles)
    print(f"{label:<58s} {wall * 1e3:8.1f} ms wall  simulated {end / 1e6:10.1f} us")


def main() -> None:
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 2**27, N).astype(np.int64) * 128
    run("1e6 random 128 B reads", Pmem(), ("read", rows, 128))
    seq = np.arange(N, dtype=np.int64) * 64
    run("1e6 sequential 64 B writes (buffer combining)", Pmem(), ("write", seq, 64))
    entries = np.arange(N, dtype=np.int64) * 136
    run(
        "1e6 136 B log entries, no buffer (WPQ merging)",
        Pmem(buffer_lines=0),
        ("write", entries, 136),
    )
    run("1e6 random 128 B writes (RMW)", Pmem(), ("write", rows, 128))
    run(
        "1e6 random 128 B reads beside their writes (RAW check)",
        Pmem(),
        ("write", rows, 128),
        ("read", rows, 128),
    )


if __name__ == "__main__":
    main()
