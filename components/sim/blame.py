"""Who each active flow lost its time to: the flow network's ``waited_on`` ledger.

Every interval, each slowed flow splits its lost time over the other flows on its
bottleneck, by owner. Kept as Python dicts that is one dict update per pair of flows
per event (quadratic in the flows); here the running sums live in one matrix (a row
per active flow, a column per owner) and each interval adds all its pairs in one
compiled loop (``advance`` in components/sim/flow_kernels.py) or, without numba, a few
numpy calls (``charge``). The additions happen one by one in the order the dicts would
have seen them (``np.add.at`` is unbuffered and in index order), so every sum is the
same float;
a cell not charged yet holds -1 (sums are never negative) and a rank per cell
remembers the order in which the dict would have gained its keys. Row 0 is scratch:
a flow's own place among the sharers of its bottleneck is charged there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

UNSEEN = np.iinfo(np.int64).max
NEVER = -1.0  # the sum in a cell never charged
POSITIONS = 1 << 20  # ranks are interval * POSITIONS + position among the sharers


class WaitLedger:
    """Running ``waited_on`` sums of the active flows, materialized when a flow ends."""

    def __init__(self, live: Callable[[], set], rows: int = 64, cols: int = 64) -> None:
        self.live = live  # the owners of the active flows, whose columns stay
        self.values = np.full((rows, cols), NEVER)  # a flow's sums side by side
        self.rank = np.full((rows, cols), UNSEEN, dtype=np.int64)
        self.free_rows = list(range(rows - 1, 0, -1))
        self.col_of: dict[object, int] = {}
        self.owner_at: list[object] = [None] * cols
        self.free_cols = list(range(cols - 1, -1, -1))
        self.interval = 0

    def open(self, seed: dict) -> int:
        """A row for a starting flow, holding what it had already waited on."""
        if not self.free_rows:
            rows, cols = self.values.shape
            self.values = np.vstack([self.values, np.full((rows, cols), NEVER)])
            self.rank = np.vstack([self.rank, np.full((rows, cols), UNSEEN, dtype=np.int64)])
            self.free_rows = list(range(2 * rows - 1, rows - 1, -1))
        row = self.free_rows.pop()
        for order, (owner, lost) in enumerate(seed.items()):
            col = self.col(owner)
            self.values[row, col] = lost
            self.rank[row, col] = order - len(seed)  # before anything charged later
        return row

    def close(self, row: int) -> dict:
        """The row as a dict in first-charged order; frees the row."""
        cols = np.flatnonzero(self.rank[row] != UNSEEN)
        cols = cols[np.argsort(self.rank[row, cols], kind="stable")]
        sums = self.values[row, cols].tolist()
        out = {self.owner_at[c]: v for c, v in zip(cols.tolist(), sums, strict=True)}
        self.values[row] = NEVER
        self.rank[row] = UNSEEN
        self.free_rows.append(row)
        return out

    def col(self, owner: object) -> int:
        """The column of ``owner``; when none is free, drop the columns no active flow
        owns or holds a sum for, else grow."""
        col = self.col_of.get(owner)
        if col is not None:
            return col
        if not self.free_cols:
            held, live = (self.rank[1:] != UNSEEN).any(axis=0), self.live()
            for other, c in list(self.col_of.items()):
                if not held[c] and other not in live:
                    del self.col_of[other]
                    self.free_cols.append(c)
        if not self.free_cols:
            rows, cols = self.values.shape
            self.values = np.hstack([self.values, np.full((rows, cols), NEVER)])
            self.rank = np.hstack([self.rank, np.full((rows, cols), UNSEEN, dtype=np.int64)])
            self.owner_at += [None] * cols
            self.free_cols = list(range(2 * cols - 1, cols - 1, -1))
        col = self.free_cols.pop()
        self.col_of[owner] = col
        self.owner_at[col] = owner
        return col

    def charge(
        self,
        rows: np.ndarray,
        lost: np.ndarray,
        shares: np.ndarray,
        cols: np.ndarray,
        at: np.ndarray,
        distinct: bool,
    ) -> None:
        """Slowed flows (``rows``, who lost ``lost``, each the sharer at position ``at``)
        charge each other sharer of their bottleneck (consuming ``shares`` of it, owned
        by ``cols``, ``distinct`` if no owner twice) ``lost * share / total``, total the
        others' shares summed in order (a zero in the flow's own place leaves that sum's
        float unchanged)."""
        # sharers down, slowed flows across: summing down the slow axis of a C-ordered
        # array adds row after row (numpy sums pairwise only along the fast axis, which
        # a single column is: there accumulate, which is sequential by definition)
        count = rows.size
        own = (at, np.arange(count))
        others = shares[:, None].repeat(count, axis=1)
        others[own] = 0.0
        if count > 1:
            total = np.add.reduce(others, axis=0)
        else:
            total = np.add.accumulate(others, axis=0)[-1]
        keep = total > 0
        if not np.logical_and.reduce(keep):
            rows, lost, others, total, at = (
                rows[keep],
                lost[keep],
                others[:, keep],
                total[keep],
                at[keep],
            )
            own = (at, np.arange(rows.size))
        np.multiply(others, lost, out=others)
        terms = np.divide(others, total, out=others)  # lost * share / total, as written
        flat = rows * self.values.shape[1] + cols[:, None]
        flat[own] = 0  # the scratch cell
        values = self.values.reshape(-1)
        before = values[flat]
        fresh = before < 0
        if distinct:  # one sharer per owner: one term per cell
            before[fresh] = 0.0
            values[flat] = before + terms
        else:  # several: added one by one, in the sharers' order
            values[flat[fresh]] = 0.0
            np.add.at(values, flat.ravel(), terms.ravel())
        if np.logical_or.reduce(fresh, axis=None):
            position, _ = fresh.nonzero()
            ranks = self.interval * POSITIONS + position
            np.minimum.at(self.rank.reshape(-1), flat[fresh], ranks)
        self.interval += 1
