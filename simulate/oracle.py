"""What a recovery must produce, and the verdict on what it did produce.

Inputs depend only on the seed and the batch index, so the state at any batch boundary
follows from the initial weights and each batch's recorded update (``Reference``).

What a recovery must produce follows from what each protocol GUARANTEES, stated here
independently of the recovery code and of the run: from the commit flags durable in
the crash image (``expected``), the batch R training must resume at and the batch m
whose MLPs it must resume with:
- none (dram): R = m = 0 (nothing persists).
- redo: R = m = newest batch whose redo log is committed + 1 (0 if none).
- undo: R = m = newest batch with both its embedding and MLP undo logs committed.
- relaxed: R = newest batch whose embedding undo log is committed; m = the newest of
  the committed MLP copies with snapshot <= R and the base checkpoint (the initial
  MLPs, or the copy an earlier recovery moved there). The allowed MLP age is exactly
  R - m: one specific copy, not "any recent one".
Verdicts: ``exact`` (table, accumulators and MLPs bit-identical to the reference at R),
``within_gap`` (relaxed: embeddings at R, MLPs those of the designated copy m < R),
``detected`` (a damaged record refused with CorruptImage: media-fault states only),
else ``violation``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from components.persistence.image import FLAG_NAMES, RECORD_HEADER, PmemImage
from components.persistence.protocols import BatchFacts, Recovery, pad_params

EXACT, WITHIN_GAP, DETECTED, VIOLATION = "exact", "within_gap", "detected", "violation"


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@dataclass(frozen=True)
class Expected:
    """What the protocol guarantees for one crash image."""

    batch: int
    mlp_batch: int

    @property
    def age(self) -> int:
        return self.batch - self.mlp_batch


def committed(flags: np.ndarray, kind: str) -> set[int]:
    """Batches whose commit flags of one kind (emb or mlp) are set."""
    return {int(flags[FLAG_NAMES.index(f"{kind}{s}")]) - 1 for s in (0, 1)} - {-1}


def expected(kind: str, flags: np.ndarray, base_batch: int) -> Expected:
    """The protocol's guarantee from the durable commit flags (see the module doc)."""
    emb, mlp = committed(flags, "emb"), committed(flags, "mlp")
    if kind == "redo":
        resume = max(emb) + 1 if emb else 0
        return Expected(resume, resume)
    if kind == "undo":
        both = emb & mlp
        resume = max(both) if both else 0
        return Expected(resume, resume)
    if kind == "relaxed":
        resume = max(emb) if emb else 0
        usable = [n for n in mlp if n <= resume]
        return Expected(resume, max(usable + [base_batch]))
    return Expected(0, 0)


def expected_for(kind: str, image: PmemImage) -> Expected:
    """``expected`` read from the raw words of an image (not through a protocol)."""
    lay = image.layout
    flags = image.buf[lay.offset("flags") : lay.offset("flags") + 8 * len(FLAG_NAMES)]
    start = lay.offset("base")
    base_batch = int(image.buf[start : start + RECORD_HEADER][:8].view("<i8")[0])
    return expected(kind, flags.view("<i8").copy(), base_batch)


class Reference:
    """States at batch boundaries of one history (the chain of recorded stretches)."""

    def __init__(
        self,
        table: np.ndarray,
        mlp: np.ndarray,
        row_acc: np.ndarray | None = None,
        mlp_acc: np.ndarray | None = None,
    ) -> None:
        self.initial = (table.copy(), mlp.copy(), _copy(row_acc), _copy(mlp_acc))
        self.facts: dict[int, BatchFacts] = {}
        self._cursor = (0, table.copy(), _copy(row_acc))
        self._cache: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}

    def extend(self, facts: dict[int, BatchFacts]) -> None:
        """Add a stretch: its batches replace any from an abandoned future."""
        first = min(facts, default=None)
        if first is None:
            return
        self.facts = {n: f for n, f in self.facts.items() if n < first} | facts
        self._cache = {n: t for n, t in self._cache.items() if n <= first}
        if self._cursor[0] > first:
            self._cursor = (0, self.initial[0].copy(), _copy(self.initial[2]))

    def state_at(self, batch: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(table, row accumulators) at the start of ``batch``."""
        if batch in self._cache:
            return self._cache[batch]
        n, table, acc = self._cursor
        if n > batch:
            n, table, acc = 0, self.initial[0].copy(), _copy(self.initial[2])
        while n < batch:
            facts = self.facts[n]
            table[facts.rows] = facts.new
            if acc is not None:
                acc[facts.rows] = facts.new_acc
            n += 1
        self._cursor = (n, table, acc)
        return table, acc

    def table_at(self, batch: int) -> np.ndarray:
        return self.state_at(batch)[0]

    def cache_all(self, last: int) -> None:
        """Keep every boundary's state (small models: crash checks visit them often)."""
        for n in range(last + 1):
            table, acc = self.state_at(n)
            self._cache[n] = (table.copy(), _copy(acc))

    def mlp_at(self, batch: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(parameters, accumulators) at the start of ``batch`` (padded to words)."""
        if batch in self.facts:
            f = self.facts[batch]
            return f.mlp_before, f.mlp_acc_before
        if batch - 1 in self.facts:
            f = self.facts[batch - 1]
            return f.mlp_after, f.mlp_acc_after
        if batch == 0 or not self.facts:
            return self.initial[1], self.initial[3]
        raise KeyError(f"no reference MLPs at batch {batch}")


def reference_from(state) -> Reference:
    """A reference starting at the initial weights (a ModelState; Adagrad accumulators
    start at zero)."""
    adagrad = state.row_acc is not None
    return Reference(
        state.table.copy(),
        pad_params(state.mlp),
        np.zeros_like(state.row_acc) if adagrad else None,
        pad_params(np.zeros_like(state.mlp)) if adagrad else None,
    )


def _copy(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else a.copy()


def mlp_matches(ref: Reference, rec: Recovery, batch: int) -> bool:
    params, acc = ref.mlp_at(batch)
    count = rec.mlp.size
    if not same_bits(rec.mlp, params[:count]) or params[count:].any():
        return False
    if acc is None:
        return rec.mlp_acc is None
    return rec.mlp_acc is not None and same_bits(rec.mlp_acc, acc[: rec.mlp_acc.size])


def verdict(
    ref: Reference,
    rec: Recovery,
    want: Expected,
    table: np.ndarray | None = None,
    row_acc: np.ndarray | None = None,
    mlp_equal: Callable[[Recovery, int], bool] | None = None,
) -> tuple[str, str]:
    """(verdict, why) for a recovered state against what the protocol guarantees.
    ``table``/``row_acc`` default to the recovery's; ``mlp_equal`` may memoize."""
    table = rec.table if table is None else table
    row_acc = rec.row_acc if row_acc is None else row_acc
    if rec.batch != want.batch:
        return VIOLATION, f"resumed at batch {rec.batch}, the protocol guarantees {want.batch}"
    ref_table, ref_acc = ref.state_at(rec.batch)
    if not same_bits(table, ref_table):
        bad = np.flatnonzero((table != ref_table).any(axis=1))
        return VIOLATION, f"embeddings differ from batch {rec.batch} in rows {bad[:8].tolist()}"
    if ref_acc is not None and (row_acc is None or not same_bits(row_acc, ref_acc)):
        return VIOLATION, f"row accumulators differ from batch {rec.batch}"
    if rec.mlp_batch != want.mlp_batch:
        return VIOLATION, (
            f"MLPs of batch {rec.mlp_batch}, the protocol guarantees batch {want.mlp_batch}"
        )
    equal = mlp_equal or (lambda r, b: mlp_matches(ref, r, b))
    if not equal(rec, want.mlp_batch):
        return VIOLATION, f"MLPs differ from the reference MLPs of batch {want.mlp_batch}"
    if want.age == 0:
        return EXACT, f"batch {rec.batch}"
    return WITHIN_GAP, f"batch {rec.batch}, MLPs of batch {want.mlp_batch} (age {want.age})"
