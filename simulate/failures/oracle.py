"""What a recovery must produce, and the verdict on what it did produce, for both kinds
of failure tolerance: a hardware persistence protocol (below) and a software checkpoint
policy (its section at the end).

Hardware persistence protocols.

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

from components.persistence.checkpoints import NEVER, ChainState
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
    moved = moved or {}
    if moved:  # an op persisting later guarantees its own batch from its new end
        records = [_later(r, moved[r.uid]) if r.uid in moved else r for r in records]
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
    running = _running_batch(stretch.records)

    def copy_batch(r) -> int:
        """The batch a copy completes in: a copy completing later (a slow device)
        completes in the batch running by then."""
        return max(r.batch, running(r.end)) if r.uid in moved else r.batch

    if kind == "cluster-relaxed":  # a copy completes when the cluster commits it
        completes = sorted((r.start, copy_batch(r)) for r in records if r.name == "mlp_commit")
        gap = int(stretch.board.shards[0].mlp_log_gap)
    else:
        flags = [stretch.layout.flag_offset(f"mlp{s}") for s in (0, 1)]
        completes = sorted(
            (r.start, copy_batch(r))
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


def _running_batch(records) -> Callable[[int], int]:
    """The newest batch any op of which had started by a tick."""
    issued = sorted((r.start, r.batch) for r in records if r.start >= 0)
    starts = np.array([t for t, _ in issued], dtype=np.int64)
    newest = np.maximum.accumulate(np.array([b for _, b in issued], dtype=np.int64))
    return lambda tick: int(newest[max(int(np.searchsorted(starts, tick, side="right")) - 1, 0)])


def _later(record, end: int):
    """``record`` shifted to end at ``end`` (its start moved by as much)."""
    delay = end - record.end
    return replace(record, start=record.start + delay, end=end)


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


# ----- software checkpoint policies ----------------------------------------------------
# What a software checkpoint policy guarantees after a power failure, and the verdict.
#
# Stated from the board's schedule and the recorded batches, never from the store or a
# recovery: the newest checkpoint whose store write had ENDED by the crash (a write cut
# by an earlier failure never ends), k, taken at batch b_k, is what recovery must read
# back:
# - tables: exactly the state after batch b_k (FP32), or within the quantizer's bound of
#   it, element by element: half of the row's step, (max - min) / (2^bits - 1) of the
#   true row, plus FP32 rounding of the reconstruction (a row last written at an older
#   checkpoint has not changed since, so the true row at b_k is the one quantized);
#   CPR-MFU's and CPR-SSU's partial checkpoints hold only the rows they chose, so there
#   each row is owed exactly its value at the newest complete checkpoint that saved it,
#   from the newest complete full one on (the rows its op read from the tables' memory:
#   the schedule says which, not the policy's log);
# - MLPs: exactly those after batch b_k (checkpointed at FP32);
# - resume batch: Check-N-Run replays, b_k + 1; CPR's partial recovery goes on with the
#   batch the failure interrupted (the ones between are lost); no checkpoint complete
#   (or ``none``): the initial weights, batch 0 when replaying.
# Verdicts: ``exact``, ``within_bound`` (quantized) or ``violation``.

WITHIN_BOUND = "within_bound"


class StretchHistory:
    """Tables and MLPs after each batch of one recorded stretch, from its start state
    and its batches' recorded updates."""

    def __init__(self, stretch) -> None:
        start = stretch.initial_state()
        self.start = stretch.start
        self.facts = stretch.facts
        self.count = stretch.model.spec.mlp_param_count
        self._start = (start.table.copy(), np.array(start.mlp, copy=True))
        self._cursor = (self.start - 1, start.table.copy())

    def table_after(self, batch: int) -> np.ndarray:
        """The tables once ``batch`` has updated them (``start - 1``: the start); one
        working copy walks forward (two tables in memory), valid until the next call."""
        n, table = self._cursor
        if n > batch:
            n, table = self.start - 1, self._start[0].copy()
        while n < batch:
            n += 1
            f = self.facts[n]
            table[f.rows] = f.new
        self._cursor = (n, table)
        return table

    def mlp_after(self, batch: int) -> np.ndarray:
        if batch == self.start - 1:
            return self._start[1]
        return self.facts[batch].mlp_after[: self.count]


@dataclass(frozen=True)
class Promised:
    """A checkpoint the schedule took: batch b, the global tick its write ended (NEVER
    once a failure cut it), and the history that holds its state."""

    batch: int
    end: int
    history: StretchHistory
    rows: np.ndarray | None = None  # the rows a partial checkpoint saved; None: all

    def cut(self, tick: int) -> Promised:
        return self if self.end <= tick else replace(self, end=NEVER)


def promised_of(stretch, offset: int, history: StretchHistory) -> list[Promised]:
    """The stretch's checkpoints, from its policy's log and the ops' end ticks; a
    partial checkpoint of chosen rows (CPR-MFU, CPR-SSU) holds the rows its op read from
    the tables' memory (the schedule), whatever the log says it saved."""
    return [
        Promised(t.batch, offset + t.write.record.end, history, saved_rows(stretch, t))
        for t in stretch.board.ft.taken
    ]


def saved_rows(stretch, taken, policy=None) -> np.ndarray | None:
    """The rows a checkpoint saved: None (every row) for a full one; for a partial one
    of a policy that chooses its rows, those its write op read from the tables
    (``policy``: the one that took it, the board's by default)."""
    policy = policy or stretch.board.ft
    if taken.rows is None or policy.complete_rows:
        return taken.rows
    return stretch.checkpoint_reads.get(taken.write.record.uid, np.zeros(0, np.int64))


@dataclass(frozen=True)
class Want:
    batch: int
    resume: int
    table: np.ndarray
    mlp: np.ndarray


def want_at(
    promised: list[Promised],
    tick: int,
    crash_batch: int,
    replays: bool,
    initial: tuple[np.ndarray, np.ndarray],
    complete: bool = True,
) -> Want:
    """``complete``: each checkpoint holds every row modified since the previous one
    (the state at its batch); else (CPR-MFU, CPR-SSU) each row is owed its value at the newest
    complete checkpoint that saved it, from the newest complete full one on."""
    done = sorted((p for p in promised if p.end <= tick), key=lambda p: p.end)
    if not done:
        return Want(-1, 0 if replays else crash_batch, initial[0], initial[1])
    k = done[-1]
    resume = k.batch + 1 if replays else crash_batch
    mlp = k.history.mlp_after(k.batch)
    if complete or k.rows is None:
        return Want(k.batch, resume, k.history.table_after(k.batch), mlp)
    fulls = [i for i, p in enumerate(done) if p.rows is None]
    first = fulls[-1] if fulls else len(done)
    table = (
        done[first].history.table_after(done[first].batch).copy() if fulls else initial[0].copy()
    )
    for p in done[first + 1 :]:
        table[p.rows] = p.history.table_after(p.batch)[p.rows]
    return Want(k.batch, resume, table, mlp)


def quantized_bound(table: np.ndarray, bits: int) -> np.ndarray:
    """Per-row bound on a recovered element's error: half a step of the true row, plus
    a few ulps of its magnitude (the reconstruction's FP32 rounding)."""
    rows = table.astype(np.float64)
    step = (rows.max(axis=1) - rows.min(axis=1)) / (2**bits - 1)
    slack = 4 * np.finfo(np.float32).eps * np.maximum(np.abs(rows).max(axis=1), 1)
    return step / 2 + slack


def judge(want: Want, got: ChainState, resume: int, bits: int) -> tuple[str, str, float]:
    """(verdict, why, largest element error) of a recovery against the promise."""
    if got.batch != want.batch:
        return VIOLATION, f"read back batch {got.batch}'s checkpoint, guaranteed {want.batch}", 0.0
    if resume != want.resume:
        return VIOLATION, f"resumed at batch {resume}, the policy guarantees {want.resume}", 0.0
    if not same_bits(got.mlp, want.mlp):
        return VIOLATION, f"MLPs differ from those after batch {want.batch}", 0.0
    error = np.abs(got.table.astype(np.float64) - want.table)
    worst = float(error.max(initial=0.0))
    if bits == 32 or want.batch < 0:
        if same_bits(got.table, want.table):
            what = f"checkpoint of batch {want.batch}" if want.batch >= 0 else "initial weights"
            return EXACT, what, 0.0
        bad = np.flatnonzero((got.table != want.table).any(axis=1))
        return (
            VIOLATION,
            f"embeddings differ from batch {want.batch} in rows {bad[:8].tolist()}",
            worst,
        )
    over = error > quantized_bound(want.table, bits)[:, None]
    if over.any():
        bad = np.flatnonzero(over.any(axis=1))
        return (
            VIOLATION,
            (f"rows {bad[:8].tolist()} beyond half a {bits}-bit step of batch {want.batch}"),
            worst,
        )
    return WITHIN_BOUND, f"checkpoint of batch {want.batch}, {bits}-bit", worst
