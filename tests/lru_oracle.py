"""The vector cache's residency as it was before components/memory/lru.py, kept verbatim
in what it decides (a sort of the whole resident set per op) as the reference the
compact LRU must match op for op."""

from __future__ import annotations

import numpy as np


class SortedLru:
    """Resident row addresses, sorted, with their last use; the newest ``capacity``."""

    def __init__(self) -> None:
        self.rows = np.zeros(0, dtype=np.int64)
        self.stamp = np.zeros(0, dtype=np.int64)
        self.clock = 0

    def hits(self, addr: np.ndarray) -> np.ndarray:
        first = np.zeros(addr.size, dtype=bool)
        first[np.unique(addr, return_index=True)[1]] = True
        resident = np.zeros(addr.size, dtype=bool)
        if self.rows.size:
            idx = np.minimum(np.searchsorted(self.rows, addr), self.rows.size - 1)
            resident = self.rows[idx] == addr
        return resident | ~first

    def touch(self, addr: np.ndarray, capacity: int) -> None:
        if addr.size == 0:
            return
        stamps = self.clock + np.arange(addr.size, dtype=np.int64)
        self.clock += addr.size
        order = np.argsort(addr, kind="stable")
        new, new_last = addr[order], stamps[order]
        keep = np.r_[new[1:] != new[:-1], True]
        rows = np.concatenate([self.rows, new[keep]])
        last = np.concatenate([self.stamp, new_last[keep]])
        order = np.argsort(rows, kind="stable")
        rows, last = rows[order], last[order]
        newest = np.r_[rows[1:] != rows[:-1], True]
        rows, last = rows[newest], last[newest]
        if rows.size > capacity:
            keep = np.sort(np.argpartition(last, rows.size - capacity)[rows.size - capacity :])
            rows, last = rows[keep], last[keep]
        self.rows, self.stamp = rows, last
