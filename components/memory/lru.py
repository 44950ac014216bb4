"""Exact least-recently-used residency of fixed-size rows, at a cost per op that follows
the op's rows, not the resident set.

The SSD's vector cache holds millions of rows (RM1's 80M fit in its 16 GiB); sorting the
resident set into every op cost ~1 s per op once it filled, which made long and sampled
SSD runs take minutes per hundred batches. Here each row's last use is a stamp in a dense
array indexed by row, and a row is resident when its stamp is above a threshold. Only the
order of uses matters, so an op's distinct rows take consecutive stamps in the order of
their last use within the op. A log of rows in stamp order then needs no stamps of its
own (entry i has stamp ``base + i``): an entry whose row was used again since is dead and
skipped, the threshold only moves forward, and every entry is passed over about once.
Where every row the cache can see fits (``bound`` <= capacity) nothing is ever evicted
and no log is kept.
"""

from __future__ import annotations

import numpy as np

COMPACT_FLOOR = 1 << 16
"""Log entries below which the log is never compacted (compaction is a pass over it)."""


class LruRows:
    """Which of the rows (dense indices ``0..``) the cache holds: the ``capacity`` most
    recently used, updated one op at a time."""

    def __init__(self) -> None:
        self.unit: int | None = None  # bytes per row (its owner's, set by the first op)
        self.bound: int | None = None  # rows the cache can ever see (None: unknown)
        self.stamps = np.zeros(0, dtype=np.int64)  # last use of each row; 0: never
        self.clock = 0  # the newest stamp
        self.count = 0  # resident rows
        self.log = np.zeros(0, dtype=np.int64)  # rows by stamp: log[i] has stamp base + i
        self.base, self.head, self.tail = 1, 0, 0  # the live part: log[head:tail]
        self.floor = COMPACT_FLOOR

    @property
    def threshold(self) -> int:
        """Resident: stamp above this (the last evicted row's stamp)."""
        return self.base + self.head - 1

    def resident(self, rows: np.ndarray) -> np.ndarray:
        """Whether each row is held now."""
        held = np.zeros(rows.size, dtype=bool)
        seen = rows < self.stamps.size
        held[seen] = self.stamps[rows[seen]] > self.threshold
        return held

    def access(self, rows: np.ndarray, capacity: int) -> np.ndarray:
        """Use ``rows`` in order (as ``touch``); per use, whether it hits: its row was
        resident when the op began or used earlier in the op."""
        if rows.size == 0:
            return np.zeros(0, dtype=bool)
        first, distinct = _uses(rows)
        hits = self.resident(rows) | ~first
        self._use(distinct, int(rows.max()) + 1, capacity)
        return hits

    def touch(self, rows: np.ndarray, capacity: int) -> None:
        """Use ``rows`` in order, then keep the ``capacity`` most recent."""
        if rows.size:
            self._use(_uses(rows)[1], int(rows.max()) + 1, capacity)

    def _use(self, distinct: np.ndarray, size: int, capacity: int) -> None:
        """Stamp an op's ``distinct`` rows (by last use), then evict past ``capacity``."""
        self._cover(size)
        self.count += int(np.count_nonzero(self.stamps[distinct] <= self.threshold))
        self.stamps[distinct] = self.clock + 1 + np.arange(distinct.size)
        self.clock += distinct.size
        if self.bound is not None and self.bound <= capacity:
            return  # everything fits: nothing is ever evicted, no log
        self._append(distinct)
        if self.count > capacity:
            self._evict(self.count - capacity)
        if self.tail - self.head > self.count + self.count // 2 + self.floor:
            self._compact()

    def resident_rows(self) -> np.ndarray:
        """The rows held, ascending."""
        return np.flatnonzero(self.stamps > self.threshold)

    def _cover(self, size: int) -> None:
        """Stamps for rows ``0..size``: all the rows the cache can see at once where that
        is known (np.zeros maps pages only as rows are first used), else doubling."""
        if size > self.stamps.size:
            full = self.bound if self.bound is not None and self.bound >= size else 0
            grown = np.zeros(full or max(size, 2 * self.stamps.size), dtype=np.int64)
            grown[: self.stamps.size] = self.stamps
            self.stamps = grown

    def _append(self, rows: np.ndarray) -> None:
        """Add entries at the tail; the live part moves to the front, and the buffer
        doubles, only when the tail reaches its end (amortized constant per entry)."""
        live = self.tail - self.head
        if self.tail + rows.size > self.log.size:
            room = max(live + rows.size, 2 * live, self.floor)
            log = self.log if room <= self.log.size else np.empty(room, np.int64)
            log[:live] = self.log[self.head : self.tail]
            self.log, self.base, self.head, self.tail = log, self.base + self.head, 0, live
        self.log[self.tail : self.tail + rows.size] = rows
        self.tail += rows.size

    def _alive(self, start: int, stop: int) -> np.ndarray:
        """Which of log[start:stop] are still their row's last use."""
        return self.stamps[self.log[start:stop]] == self.base + np.arange(start, stop)

    def _evict(self, excess: int) -> None:
        """Drop the ``excess`` oldest resident rows: the head moves past the last one.
        The log is scanned from its head in doubling chunks, so a scan costs about what
        it drops."""
        found, chunk, start = 0, excess, self.head
        while True:
            stop = min(start + chunk, self.tail)
            if stop == start:
                raise RuntimeError(f"LRU log holds {found} resident rows, {excess} to evict")
            alive = np.cumsum(self._alive(start, stop))
            if found + alive[-1] >= excess:
                self.head = start + int(np.searchsorted(alive, excess - found)) + 1
                break
            found += int(alive[-1])
            start, chunk = stop, 2 * chunk
        self.count -= excess

    def _compact(self) -> None:
        """Keep the live entries only, restamped in order just above the threshold
        (evicted rows keep their stamps below it)."""
        kept = self.log[self.head : self.tail][self._alive(self.head, self.tail)]
        self.base += self.head
        self.stamps[kept] = self.base + np.arange(kept.size)
        self.log[: kept.size] = kept
        self.head, self.tail = 0, kept.size
        self.clock = self.base + kept.size - 1


def _uses(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per use, whether it is its row's first in the op; the op's distinct rows in the
    order of their last use. One stable sort for both (a hit needs the first, the
    stamps the last)."""
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    first = np.zeros(rows.size, dtype=bool)
    first[order[starts]] = True
    last = order[np.r_[starts[1:], rows.size] - 1]
    return first, rows[np.sort(last)]
