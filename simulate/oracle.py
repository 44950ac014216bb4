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
Those are relative to the flags, so a protocol that never commits would pass them. Each
system also states ABSOLUTE bounds, from the board's schedule alone (``Guarantee``):
R is at least the newest batch whose checkpoint ops had ended by the crash (redo: the
log op of N, then R >= N + 1; undo: both logs of N; relaxed: the embedding log of N);
and for the relaxed MLPs, m is a batch the GPU took a snapshot at (or the base's) and
R - m <= gap + 2 L batches, with ``gap`` the board's MLP-log gap and L the longest copy
in batches (snapshot to the slice that completes it): a copy starts at most L + gap
batches after the previous one did, and takes at most L to commit.
A cluster of CXL-MEMs (components/persistence/cluster.py) is judged by its
coordinator's commit words instead (``expected_across``): redo R = m = commit + 1, undo
R = m = commit, relaxed R = commit and m = the newest committed MLP copy not newer than
R, or the base; its absolute bounds come from its ``commit`` and ``mlp_commit`` ops.
Verdicts: ``exact`` (table, accumulators and MLPs bit-identical to the reference at R),
``within_gap`` (relaxed: embeddings at R, MLPs those of the designated copy m < R),
``detected`` (a damaged record refused with CorruptImage: media-fault states only),
else ``violation``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from components.persistence.image import (
    COMMIT_NAMES,
    FLAG_NAMES,
    RECORD_HEADER,
    PmemImage,
    flag_batches,
)
from components.persistence.protocols import BatchFacts, Recovery, pad_params

EXACT, WITHIN_GAP, DETECTED, VIOLATION = "exact", "within_gap", "detected", "violation"


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@dataclass(frozen=True)
class Expected:
    """What the protocol guarantees for one crash image: the resume batch and MLP batch
    from its flags, and the absolute bounds (``least`` resume batch, ``max_age`` of the
    MLPs, the ``snapshots`` a relaxed copy may hold; None: not bounded)."""

    batch: int
    mlp_batch: int
    least: int = 0
    max_age: int | None = None
    snapshots: frozenset[int] | None = None

    @property
    def age(self) -> int:
        return self.batch - self.mlp_batch


def committed(flags: np.ndarray, kind: str) -> set[int]:
    """Batches whose commit flags of one kind (emb or mlp) are set (``flags``: the batch
    each flag marks, negative when unset or failing its check)."""
    return {int(flags[FLAG_NAMES.index(f"{kind}{s}")]) for s in (0, 1)} - {-1, -2}


@dataclass(frozen=True)
class Guarantee:
    """Absolute bounds of one stretch, from the board's schedule (op ends, snapshot
    ops, the requests that write the MLP flags), never from the image or a recovery.
    ``ticks``/``batches``: from ticks[i] on, R >= batches[i] (a running maximum)."""

    ticks: np.ndarray
    batches: np.ndarray
    floor: int = 0
    max_age: int | None = None
    snapshots: frozenset[int] | None = None
    gap: int | None = None
    copy_batches: int | None = None

    def least(self, tick: int) -> int:
        i = int(np.searchsorted(self.ticks, tick, side="right")) - 1
        return max(self.floor, int(self.batches[i])) if i >= 0 else self.floor

    def describe(self) -> dict:
        out = {"max_mlp_age": self.max_age}
        if self.gap is not None:
            out |= {"mlp_log_gap": self.gap, "copy_batches": self.copy_batches}
        return out


COMMITS = {  # op names whose end commits batch N, and the R they guarantee
    "redo": (("ckpt_log", "ckpt_persist"), 1),
    "undo": (("emb_log", "mlp_log"), 0),
    "relaxed": (("emb_log",), 0),
    "cluster-redo": (("commit",), 1),  # across devices: the coordinator's commit op
    "cluster-undo": (("commit",), 0),
    "cluster-relaxed": (("commit",), 0),
}


def guarantee_for(
    kind: str, stretch, floor: int = 0, snapshots=(), age: int = 0, moved: dict | None = None
) -> Guarantee:
    """The absolute bounds of a recorded stretch (simulate/recording.Stretch). A resumed
    stretch passes its recovery's resume batch (``floor``), the snapshots its base may
    hold and the MLP age it resumed with (``age``); a variant schedule the ops it made
    end later (``moved``: uid -> end tick)."""
    records = stretch.records
    if moved:  # an op now ending later belongs to the newest batch issued by then
        issued = sorted((r.start, r.batch) for r in records if r.start >= 0)
        starts = np.array([t for t, _ in issued], dtype=np.int64)
        newest = np.maximum.accumulate(np.array([b for _, b in issued], dtype=np.int64))

        def later(r):
            end = moved[r.uid]
            at = int(np.searchsorted(starts, end, side="right")) - 1
            return replace(r, start=end, end=end, batch=max(r.batch, int(newest[at])))

        records = [later(r) if r.uid in moved else r for r in records]
    if kind not in COMMITS:
        z = np.zeros(0, dtype=np.int64)
        return Guarantee(z, z, 0, 0 if kind == "none" else None)
    names, plus = COMMITS[kind]
    ends: dict[int, dict[str, int]] = {}
    for r in records:
        if r.name in names and r.end >= 0:
            ends.setdefault(r.batch, {})[r.name] = r.end
    need = 1 if kind != "undo" else 2
    done = sorted((max(e.values()), n + plus) for n, e in ends.items() if len(e) >= need)
    ticks = np.array([t for t, _ in done], dtype=np.int64)
    batches = np.maximum.accumulate(np.array([b for _, b in done], dtype=np.int64))
    if not kind.endswith("relaxed"):
        return Guarantee(ticks, batches, floor, 0)
    taken: dict[int, int] = {}  # a cluster's devices snapshot their stripes together
    for r in records:
        if r.name == "mlp_snapshot":
            taken[r.batch] = min(taken.get(r.batch, r.start), r.start)
    snaps = sorted((start, batch) for batch, start in taken.items())
    if kind == "cluster-relaxed":  # a copy completes when the cluster commits it
        completes = sorted((r.start, r.batch) for r in records if r.name == "mlp_commit")
        gap = int(stretch.board.shards[0].mlp_log_gap)
    else:
        flags = [stretch.layout.flag_offset(f"mlp{s}") for s in (0, 1)]
        completes = sorted(
            (r.start, r.batch)
            for r in records
            if r.name == "mlp_log_slice" and r.uid in stretch.requests
            and np.isin(flags, stretch.requests[r.uid].addr).any()
        )  # fmt: skip
        gap = int(stretch.board.mlp_log_gap)
    last = max((r.batch for r in records), default=stretch.start)
    lengths = [
        (completes[k][1] if k < len(completes) else last) - batch + 1
        for k, (_, batch) in enumerate(snaps)
    ]
    longest = max(lengths, default=1)
    held = frozenset({0, *snapshots, *(b for _, b in snaps)})
    return Guarantee(ticks, batches, floor, gap + 2 * longest + age, held, gap, longest)


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


def expected_across(kind: str, commits: np.ndarray, base_batch: int) -> Expected:
    """A cluster's guarantee from the coordinator's commit words (``commits``: the batch
    each of COMMIT_NAMES marks, negative when unset or failing its check): the commit
    word is the newest batch every device holds (redo: resume after it); relaxed MLPs
    are the newest copy every device's stripe holds, not newer than R, or the base."""
    last = int(commits[COMMIT_NAMES.index("commit")])
    if kind == "cluster-redo":
        resume = last + 1 if last >= 0 else 0
        return Expected(resume, resume)
    resume = max(last, 0)
    if kind == "cluster-undo":
        return Expected(resume, resume)
    copies = [int(commits[COMMIT_NAMES.index(f"mlpc{k}")]) for k in (0, 1)]
    usable = [s for s in copies if 0 <= s <= resume]
    return Expected(resume, max(usable + [base_batch]))


def expected_for(
    kind: str, image: PmemImage, bounds: Guarantee | None = None, tick: int = 0
) -> Expected:
    """``expected`` read from the raw words of an image (not through a protocol), with
    the absolute ``bounds`` of the stretch at the crash ``tick`` when given. A cluster's
    (``kind`` cluster-*) from its coordinator's commit words and base record."""
    lay = image.layout
    if kind.startswith("cluster-"):
        first = lay.devices[0]
        at = first.commit_offset(COMMIT_NAMES[0])
        words = image.buf[at : at + 8 * len(COMMIT_NAMES)].view("<u8")
        start = first.offset("base")
        base_batch = int(image.buf[start : start + RECORD_HEADER][:8].view("<i8")[0])
        want = expected_across(kind, flag_batches(words), base_batch)
    else:
        flags = image.buf[lay.offset("flags") : lay.offset("flags") + 8 * len(FLAG_NAMES)]
        start = lay.offset("base")
        base_batch = int(image.buf[start : start + RECORD_HEADER][:8].view("<i8")[0])
        want = expected(kind, flag_batches(flags.view("<u8")), base_batch)
    if bounds is None:
        return want
    return Expected(
        want.batch, want.mlp_batch, bounds.least(tick), bounds.max_age, bounds.snapshots
    )


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
    if rec.batch < want.least:
        return VIOLATION, f"resumed at batch {rec.batch}, older than the checkpoint of {want.least}"
    if want.max_age is not None and rec.batch - rec.mlp_batch > want.max_age:
        return VIOLATION, (
            f"MLPs of batch {rec.mlp_batch} at resume {rec.batch}: older than the bound "
            f"of {want.max_age} batches"
        )
    if want.snapshots is not None and rec.mlp_batch not in want.snapshots:
        return VIOLATION, f"MLPs labelled batch {rec.mlp_batch}, at which no copy was taken"
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
