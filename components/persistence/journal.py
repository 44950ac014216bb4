"""Every functional write with the tick interval in which it enters the persistence domain.

A write of n bytes persisting over [t0, t1] is durable once T >= t1; a power failure
at t0 <= T < t1 tears it: the first floor((T - t0) / (t1 - t0) * words) atomic words
survive. Crash images are rebuilt from a base image by applying writes in persist
order (t1, then issue order), vectorized per state and incremental over sorted ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ATOMIC_WRITE_UNIT = 8
"""Bytes the media writes failure-atomically: Intel Optane PMem guarantees 8 B
power-fail atomicity for aligned stores (Intel 64 SDM vol. 3A §8.1.1; PMDK
libpmem docs, "8-byte atomic stores"); a parameter of every journal."""


@dataclass
class Phase:
    """Writes an op issues together (no ordering inside; fenced from the next phase)."""

    writes: list[tuple[int, np.ndarray]] = field(default_factory=list)

    def add(self, offset: int, data: np.ndarray) -> None:
        self.writes.append((int(offset), np.ascontiguousarray(data).view(np.uint8).reshape(-1)))


@dataclass
class Journal:
    """Write offsets, payloads and persist intervals, kept as parallel lists."""

    atomic: int = ATOMIC_WRITE_UNIT
    offsets: list[int] = field(default_factory=list)
    payloads: list[np.ndarray] = field(default_factory=list)
    t0: list[int] = field(default_factory=list)
    t1: list[int] = field(default_factory=list)

    def add(self, offset: int, data: np.ndarray, t0: int, t1: int) -> None:
        self.offsets.append(offset)
        self.payloads.append(data)
        self.t0.append(int(min(t0, t1)))
        self.t1.append(int(t1))

    def add_phase(self, phase: Phase, start: int, end: int, persist: np.ndarray | None) -> None:
        """Place a phase's writes in time: one per device request when the timing model
        gave per-request persist ticks (absolute), otherwise spread by bytes over
        [start, end] in issue order."""
        writes = phase.writes
        if not writes:
            return
        if persist is not None and persist.size and len(writes) >= persist.size:
            top = int(persist.max())
            step = max((top - start) // persist.size, 0)
            for i, (offset, data) in enumerate(writes):
                t1 = int(persist[i]) if i < persist.size else top
                self.add(offset, data, max(t1 - step, start), t1)
            return
        sizes = np.array([d.size for _, d in writes], dtype=np.float64)
        edges = start + np.concatenate(([0.0], np.cumsum(sizes))) / sizes.sum() * (end - start)
        edges = np.round(edges).astype(np.int64)
        for i, (offset, data) in enumerate(writes):
            self.add(offset, data, int(edges[i]), int(edges[i + 1]))

    def frozen(self) -> FrozenJournal:
        return FrozenJournal(self)


class FrozenJournal:
    """The journal sorted by persist order, ready to cut at any tick."""

    def __init__(self, journal: Journal) -> None:
        self.atomic = journal.atomic
        t1 = np.asarray(journal.t1, dtype=np.int64)
        order = np.lexsort((np.arange(t1.size), t1))
        self.t0 = np.asarray(journal.t0, dtype=np.int64)[order]
        self.t1 = t1[order]
        self.offsets = np.asarray(journal.offsets, dtype=np.int64)[order]
        self.payloads = [journal.payloads[i] for i in order]

    def __len__(self) -> int:
        return int(self.t1.size)

    @property
    def end(self) -> int:
        return int(self.t1.max()) if len(self) else 0

    def crash_points(self) -> np.ndarray:
        """Every distinct persist tick and the tick before it (where writes are torn)."""
        points = np.concatenate(([0], self.t1, np.maximum(self.t1 - 1, 0)))
        return np.unique(points)

    def apply_range(self, buf: np.ndarray, lo: int, hi: int) -> None:
        """Apply the complete writes with index in [lo, hi) (persist order)."""
        for i in range(lo, hi):
            off = int(self.offsets[i])
            data = self.payloads[i]
            buf[off : off + data.size] = data

    def durable_count(self, tick: int) -> int:
        """How many writes (a prefix in persist order) are durable at ``tick``."""
        return int(np.searchsorted(self.t1, tick, side="right"))

    def apply_torn(self, buf: np.ndarray, tick: int, start: int) -> list[int]:
        """Apply the persisted words of writes in flight at ``tick``; returns their indices."""
        torn = []
        for i in np.flatnonzero(self.t0[start:] <= tick) + start:
            t0, t1 = int(self.t0[i]), int(self.t1[i])
            data = self.payloads[i]
            words = -(-data.size // self.atomic)
            done = (tick - t0) * words // (t1 - t0) if t1 > t0 else 0
            if done > 0:
                off = int(self.offsets[i])
                n = min(done * self.atomic, data.size)
                buf[off : off + n] = data[:n]
                torn.append(int(i))
        return torn

    def image_at(self, base: np.ndarray, tick: int) -> np.ndarray:
        """The bytes that survive a power failure at ``tick``."""
        buf = np.array(base, copy=True)
        count = self.durable_count(tick)
        self.apply_range(buf, 0, count)
        self.apply_torn(buf, tick, count)
        return buf
