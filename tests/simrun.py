"""Run op bodies on a fresh engine, as a board would, for timing tests."""

from __future__ import annotations

from pathlib import Path

from components.sim.engine import Engine
from components.sim.schedule import OpRecord, Scheduler


def run_ops(*bodies, devices=(), units=None, starts=None) -> tuple[list[OpRecord], Scheduler]:
    """Start each body (a callable ``now -> Stage | iterator``) as its own op, on its own
    unit unless ``units`` names them, at tick ``starts[i]`` (default 0); run to the end."""
    engine = Engine()
    scheduler = Scheduler(engine)
    for device in devices:
        device.bind(engine.event)
    handles = []
    for i, body in enumerate(bodies):
        unit = units[i] if units else f"unit{i}"
        delay = starts[i] if starts else 0
        gate = []
        if delay:
            gate = [scheduler.op(f"wait{i}", "idle", 0, None, lambda now, d=delay: d)]
        handles.append(scheduler.op(f"op{i}", "embedding", 0, unit, body, deps=gate))
    engine.run()
    return [h.record for h in handles], scheduler


def duration(record: OpRecord) -> int:
    return record.end - record.start


def timed(dev, op: str, addr, size: int, window=None):
    """(ticks one read or write stream took alone, the stream, persist ticks of writes)."""
    import numpy as np

    from components.memory.stages import stage

    streams, persisted = [], []
    listeners = dev.write_listeners
    listeners.append(lambda p: persisted.append(p.ticks))

    def body(now):
        streams.append(getattr(dev, op)(np.asarray(addr, dtype=np.int64), size, window))
        return stage(streams[0])

    bound = [dev] if hasattr(dev, "bind") else [dev.ssd, dev.dram]
    (record,), _ = run_ops(body, devices=bound)
    listeners.clear()
    return duration(record), streams[0], (persisted[0] if persisted else None)


def media_bytes(stream) -> float:
    return sum(stream.bytes.values())


def simulated_stats(outdir) -> list[str]:
    """A run's stats.txt lines without the host's (its wall and CPU times): what must be
    identical between two runs of the same simulation."""
    text = Path(outdir, "stats.txt").read_text()
    return [line for line in text.splitlines() if "host" not in line.lower()]
