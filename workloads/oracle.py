"""The failure-free reference and the verdict on a recovered state.

Inputs depend only on the seed and the batch index, so the reference state at any
batch boundary follows from the initial weights and each batch's recorded row update.
Strict systems must recover bit for bit to a boundary; the relaxed CXL system must
recover its embeddings bit for bit and its MLPs to those of an earlier boundary at
most ``gap_bound`` batches back.
"""

from __future__ import annotations

import numpy as np

from components.persistence.protocols import BatchFacts, Recovery

EXACT, WITHIN_GAP, VIOLATION = "exact", "within_gap", "violation"


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


class Reference:
    """States at batch boundaries of one history (the chain of recorded stretches)."""

    def __init__(self, table: np.ndarray, mlp: np.ndarray) -> None:
        self.initial = (table.copy(), mlp.copy())
        self.facts: dict[int, BatchFacts] = {}
        self._cursor = (0, table.copy())
        self._cache: dict[int, np.ndarray] = {}

    def extend(self, facts: dict[int, BatchFacts]) -> None:
        """Add a stretch: its batches replace any from an abandoned future."""
        first = min(facts, default=None)
        if first is None:
            return
        self.facts = {n: f for n, f in self.facts.items() if n < first} | facts
        self._cache = {n: t for n, t in self._cache.items() if n <= first}
        if self._cursor[0] > first:
            self._cursor = (0, self.initial[0].copy())

    def table_at(self, batch: int) -> np.ndarray:
        """The table at the start of ``batch``."""
        if batch in self._cache:
            return self._cache[batch]
        n, table = self._cursor
        if n > batch:
            n, table = 0, self.initial[0].copy()
        while n < batch:
            facts = self.facts[n]
            table[facts.rows] = facts.new
            n += 1
        self._cursor = (n, table)
        return table

    def cache_all(self, last: int) -> None:
        """Keep every boundary's table (small models: crashcheck visits them often)."""
        for n in range(last + 1):
            self._cache[n] = self.table_at(n).copy()

    def mlp_at(self, batch: int) -> np.ndarray:
        if batch in self.facts:
            return self.facts[batch].mlp_before
        if batch - 1 in self.facts:
            return self.facts[batch - 1].mlp_after
        return self.initial[1]


def verdict(ref: Reference, rec: Recovery, gap_bound: int = 0) -> tuple[str, str]:
    """(verdict, why) for a recovered state against the reference."""
    if not same_bits(rec.table, ref.table_at(rec.batch)):
        bad = np.flatnonzero((rec.table != ref.table_at(rec.batch)).any(axis=1))
        return VIOLATION, f"embeddings differ from batch {rec.batch} in rows {bad[:8].tolist()}"
    if same_bits(rec.mlp, ref.mlp_at(rec.batch)):
        return EXACT, f"batch {rec.batch}"
    age = rec.batch - rec.mlp_batch
    if 0 < age <= gap_bound and same_bits(rec.mlp, ref.mlp_at(rec.mlp_batch)):
        return WITHIN_GAP, f"batch {rec.batch}, MLPs of batch {rec.mlp_batch} (bound {gap_bound})"
    return VIOLATION, f"MLPs match neither batch {rec.batch} nor a batch within {gap_bound}"


def mlp_age_bound(
    copies: list[int], completed_at: list[int], last_batch: int, first: int = 0
) -> int:
    """Largest possible MLP age of the relaxed log: from a copy's snapshot to the batch
    in which the next copy completes (or the run's last batch), inclusive. ``first``:
    the batch of the MLPs the stretch started with (its fallback copy)."""
    starts = [first, *copies]
    ends = [*completed_at, last_batch]
    return max((end - start + 1 for start, end in zip(starts, ends, strict=False)), default=0)
