"""What a software checkpoint policy guarantees after a power failure, and the verdict.

Stated from the board's schedule and the recorded batches, never from the store or a
recovery: the newest checkpoint whose store write had ENDED by the crash (a write cut
by an earlier failure never ends), k, taken at batch b_k, is what recovery must read
back:
- tables: exactly the state after batch b_k (FP32), or within the quantizer's bound of
  it, element by element: half of the row's step, (max - min) / (2^bits - 1) of the
  true row, plus FP32 rounding of the reconstruction (a row last written at an older
  checkpoint has not changed since, so the true row at b_k is the one quantized);
  CPR-MFU's partial checkpoints hold only the rows they chose, so there each row is
  owed exactly its value at the newest complete checkpoint that saved it, from the
  newest complete full one on (the policy's log says which);
- MLPs: exactly those after batch b_k (checkpointed at FP32);
- resume batch: Check-N-Run replays, b_k + 1; CPR's partial recovery goes on with the
  batch the failure interrupted (the ones between are lost); no checkpoint complete
  (or ``none``): the initial weights, batch 0 when replaying.
Verdicts: ``exact``, ``within_bound`` (quantized) or ``violation``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from components.persistence.checkpoints import NEVER, ChainState
from simulate.oracle import EXACT, VIOLATION, same_bits

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
    """The stretch's checkpoints, from its policy's log and the ops' end ticks."""
    return [
        Promised(t.batch, offset + t.write.record.end, history, t.rows)
        for t in stretch.board.ft.taken
    ]


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
    (the state at its batch); else (CPR-MFU) each row is owed its value at the newest
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
