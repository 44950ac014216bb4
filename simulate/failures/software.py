"""Software checkpoint policies (--checkpoint cpr, check-n-run, none) as a failure-
tolerance scheme: what a crash keeps is the checkpoint store, recovery reads it back.

The recorded run (failures/recording.py) trains with real numerics while its board's
policy takes checkpoints (components/boards/software_ft.py logs each: batch, rows,
bytes, write op). Their contents, the recorded tables after that batch (quantized as
the policy writes them), go to a store model that outlives the power
(components/persistence/checkpoints.py), durable when their write op ends. A failure at
tick T tears the write in flight; recovery reads the newest complete chain back (timed
on a fresh board: its bytes from ``board.ft.store`` into the tables' memory, the MLPs
to the GPU; a failure during it starts it over); training resumes on a fresh board
(Check-N-Run: from the batch after the checkpoint, replaying; CPR: from the batch the
failure interrupted, the ones between lost; nothing complete: the initial weights).
Each recovery is judged by the oracle's software section against the policy's guarantee.

A checkpoint is durable at one instant (its store write's end, the commit record
last), so a policy's crash states are instants, not persist orders: around every
checkpoint op (CPR's paused checkpoint; Check-N-Run's snapshot into host DRAM and its
background write) just before it, at its start, a quarter, half and three quarters in,
one tick before its end, at its end and after, and in the middle of every batch's
update. Resumed runs add their checkpoints to the surviving store (their first a new
full one) and are crashed at the same points: a write torn before the failure must
stay unused, a torn new full must fall back to the chain before it. Recovery only reads
the store, so a failure during it leaves the store as it was: its states are the ones
above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from components.boards.software_ft import SoftwareCheckpoint
from components.persistence.checkpoints import (
    ChainRecovery,
    ChainState,
    CheckpointStore,
    Stored,
)
from components.sim.units import ticks_to_ms
from simulate.failures.crash_report import CheckSettings, CrashReport
from simulate.failures.oracle import (
    VIOLATION,
    Promised,
    StretchHistory,
    judge,
    promised_of,
    same_bits,
    want_at,
)
from simulate.failures.recording import ModelState, Stretch
from simulate.failures.recovery import time_store_recovery
from simulate.failures.tolerance import Failure, FailureTolerance, Resumption
from simulate.run.configure import fresh_board
from simulate.run.options import RunOptions, UsageError


def bits_of(options: RunOptions) -> int:
    return 32 if options.quantize == "none" else int(options.quantize)


def stored_of(
    stretch: Stretch, offset: int, history: StretchHistory, seq: int, codec: ChainRecovery,
    bits: int, until: int | None = None,
) -> list[Stored]:  # fmt: skip
    """The stretch's checkpoints as the store holds them (global ticks from ``offset``);
    a differential applies on the checkpoint before it (a stretch's policy starts with
    a full one). ``until``: the next failure; only what a recovery then can read is
    built (writes begun by then, from the newest full complete by then on)."""
    taken = stretch.board.ft.taken
    first = 0
    if until is not None:
        taken = [t for t in taken if offset + t.write.record.start <= until]
        done = [i for i, t in enumerate(taken) if t.full and offset + t.write.record.end <= until]
        first = done[-1] if done else 0
    out, total = [], stretch.model.spec.total_rows
    for i, t in enumerate(taken[first:], start=first):
        rows = np.arange(total, dtype=np.int64) if t.full else np.asarray(t.rows, np.int64)
        payload = codec.encode(history.table_after(t.batch)[rows], bits)
        record = t.write.record
        out.append(Stored(seq + i, None if t.full else seq + i - 1, t.batch, rows, payload,
                          history.mlp_after(t.batch).copy(), t.stored,
                          offset + record.start, offset + record.end))  # fmt: skip
    return out


@dataclass(frozen=True)
class Crash:
    """The power failing at global ``tick`` in a stretch: the ops running, the batch
    training was in (the oldest of its running ops; a background checkpoint write
    does not count), and the tables host memory held (lost)."""

    tick: int
    running: list
    batch: int
    volatile: np.ndarray

    @classmethod
    def at(cls, stretch: Stretch, history: StretchHistory, offset: int, tick: int) -> Crash:
        local = tick - offset
        running = stretch.running(local)
        ended = [r.batch for r in stretch.records if r.name == "update" and r.end <= local]
        volatile = history.table_after(max(ended, default=stretch.start - 1)).copy()
        training = [r.batch for r in running if not r.background and r.start <= local]
        return cls(tick, running, min(training, default=cls.next_batch(stretch, local)), volatile)

    @staticmethod
    def next_batch(stretch: Stretch, local: int) -> int:
        """Between batches, or with only a background write left: the batch after the
        newest whose training ops had all ended."""
        started = [r.batch for r in stretch.records if not r.background and r.start <= local]
        return max(started, default=stretch.start - 1) + 1

    def recover(
        self, store: CheckpointStore, promised: list, codec: ChainRecovery, bits: int,
        policy: SoftwareCheckpoint, initial: tuple[np.ndarray, np.ndarray],
    ) -> tuple[ChainState, int, tuple[str, str, float]]:  # fmt: skip
        """Recovery from the store as it survived, the resume batch, and the verdict."""
        got = codec.recover(store, self.tick, initial, self.volatile)
        resume = got.batch + 1 if policy.replays else self.batch
        want = want_at(promised, self.tick, self.batch, policy.replays, initial,
                       policy.complete_rows)  # fmt: skip
        return got, resume, judge(want, got, resume, bits)


SHARES = (0.25, 0.5, 0.75)


def crash_ticks(stretch: Stretch) -> list[int]:
    """Local ticks around each checkpoint op and inside each batch's update."""
    ticks = set()
    for r in stretch.records:
        if r.category == "checkpoint":
            span = r.end - r.start
            ticks.update((r.start - 1, r.start, r.end - 1, r.end, r.end + 1))
            ticks.update(r.start + int(span * f) for f in SHARES)
        elif r.name == "update":
            ticks.add((r.start + r.end) // 2)
    return sorted(t for t in ticks if 0 <= t <= stretch.end_tick)


def describe(options: RunOptions, stretch: Stretch) -> dict:
    """The guarantee the oracle enforced, for the report."""
    return {
        "policy": options.checkpoint,
        "bits": bits_of(options),
        "checkpoints": len(stretch.board.ft.taken),
        "resume": "replay from the checkpoint" if stretch.board.ft.replays else "partial",
        "rows": "state at its batch" if stretch.board.ft.complete_rows else "as last saved",
    }


def final_model_fields(model: ModelState, reference: ModelState) -> dict[str, Any]:
    """A software policy's run ends with the failure-free model exactly, or off by
    what the lost updates left (partial recovery): both, for the failure entry."""
    exact = same_bits(model.table, reference.table) and same_bits(
        model.mlp_flat(), reference.mlp_flat()
    )
    deviation = float(np.abs(model.table - reference.table).max(initial=0.0))
    return {"final_model_exact": exact, "final_max_deviation": deviation}


class CheckpointPolicy(FailureTolerance):
    """A software policy's store across failures: the checkpoints each stretch wrote
    (``variant``: a ChainRecovery subclass reading the store instead, for mutants)."""

    def __init__(
        self, options: RunOptions, recorded: Stretch, lr: float, optimizer: str, variant=None
    ) -> None:
        if optimizer != "sgd":
            raise UsageError(f"--checkpoint {options.checkpoint} failure runs train with SGD")
        super().__init__(options, recorded, lr, optimizer)
        is_codec = isinstance(variant, type) and issubclass(variant, ChainRecovery)
        self.codec = variant() if is_codec else ChainRecovery()
        self.bits = bits_of(options)
        self.policy = recorded.board.ft
        start = recorded.initial_state()
        self.initial = (start.table, start.mlp)
        self.store = CheckpointStore()
        self.promised: list[Promised] = []
        self.stretch, self.offset, self.history = recorded, 0, None

    @staticmethod
    def prepare(options: RunOptions, variant=None) -> RunOptions:
        """The options to record with: a policy subclass (a mutant) replaces the board's
        policy (configure.software_policy keeps it)."""
        if variant is None or not issubclass(variant, SoftwareCheckpoint):
            return options
        board = fresh_board(replace(options, board=None))
        board.ft = variant()
        return replace(options, board=board)

    # ----- injection ----------------------------------------------------------------------
    def extend(self, stretch: Stretch, offset: int, until: int | None) -> None:
        until = -1 if until is None else until  # no failure left: nothing read back
        history = StretchHistory(stretch)
        more = stored_of(
            stretch, offset, history, self.store.next_seq(), self.codec, self.bits, until
        )
        self.store = self.store.added(*more).prune(until)
        self.promised += promised_of(stretch, offset, history)
        self.stretch, self.offset, self.history = stretch, offset, history

    def settle(self) -> None:
        """Every checkpoint is in the store as written: nothing to apply."""

    def close(self) -> None:
        """The store lives in memory: nothing outlives the run."""

    def fail(self, tick: int, pending: list[int]) -> Failure:
        self.store, self.promised = self.store.at(tick), [p.cut(tick) for p in self.promised]
        crash = Crash.at(self.stretch, self.history, self.offset, tick)
        got, resume, (outcome, why, worst) = crash.recover(
            self.store, self.promised, self.codec, self.bits, self.policy, self.initial
        )
        ticks, energy, interrupted = _timed(self.options, got.bytes_read, pending, tick)
        entry = {
            "tick": tick,
            "time_ms": round(ticks_to_ms(tick), 6),
            "batch": crash.batch,
            "phase": ", ".join(sorted({f"{r.name}@{r.batch}" for r in crash.running})),
            "checkpoint_batch": got.batch if got.batch >= 0 else None,
            "checkpoints_read": len(got.chain),
            "recovery_bytes": got.bytes_read,
            "resume_batch": resume,
            "batches_redone" if self.policy.replays else "batches_lost": max(
                crash.batch - got.batch - 1, 0
            ),
            "recovery_ms": round(ticks_to_ms(ticks), 6),
            "recovery_energy_j": round(energy, 9),
            "interrupted_recoveries": interrupted,
            "verdict": outcome,
            "detail": why,
            "max_error": worst,
        }
        return Failure(entry, resume, ModelState(got.table, got.mlp), tick + ticks)

    def final_fields(self, final: Stretch | None) -> dict[str, Any]:
        return final_model_fields(final.model, self.recorded.model)

    # ----- crash exploration --------------------------------------------------------------
    def guarantee(self) -> dict[str, Any]:
        return describe(self.options, self.recorded)

    def explore(
        self,
        settings: CheckSettings,
        report: CrashReport,
        resume: Callable[[Resumption], None],
    ) -> None:
        """Every crash point of the recorded run; ``settings.resumed`` of them, spread
        over the run, resumed and crashed again at their own points."""
        stretch = self.recorded
        history = StretchHistory(stretch)
        store = CheckpointStore(stored_of(stretch, 0, history, 0, self.codec, self.bits))
        promised = promised_of(stretch, 0, history)
        ticks = crash_ticks(stretch)
        spread = np.linspace(len(ticks) / 4, len(ticks), settings.resumed, endpoint=False)
        due = set(spread.astype(int))
        for i, tick in enumerate(ticks):
            crash = Crash.at(stretch, history, 0, tick)
            got, batch, outcome = self._check(crash, store, promised, report)
            if i in due and outcome != VIOLATION and batch < self.options.batches:
                walk = self._resumed_walk(store.at(tick), [p.cut(tick) for p in promised], tick)
                resume(Resumption(batch, ModelState(got.table, got.mlp), walk))

    def _resumed_walk(self, left: CheckpointStore, cut: list[Promised], tick: int):
        """The crash points of a stretch resumed after a failure at ``tick``: its
        checkpoints join the store that survived (``left``)."""

        def walk(again: Stretch, report: CrashReport) -> None:
            history, offset = StretchHistory(again), tick + 1
            more = stored_of(again, offset, history, left.next_seq(), self.codec, self.bits)
            store, promised = left.added(*more), cut + promised_of(again, offset, history)
            for t in crash_ticks(again):
                crash = Crash.at(again, history, offset, offset + t)
                self._check(crash, store, promised, report, "resumed")

        return walk

    def _check(
        self, crash: Crash, store: CheckpointStore, promised: list[Promised],
        report: CrashReport, mode: str = "checkpoint",
    ) -> tuple[ChainState, int, str]:  # fmt: skip
        """Recover one crash point from the store as it survived, and count it."""
        view = store.at(crash.tick)
        cut = [p.cut(crash.tick) for p in promised]
        got, resume, (outcome, why, _) = crash.recover(
            view, cut, self.codec, self.bits, self.policy, self.initial
        )
        report.recoveries += 1
        phase = ", ".join(sorted({f"{r.name}@{r.batch}" for r in crash.running}))
        report.count(mode, (outcome, why), tick=crash.tick, regions=[phase])
        return got, resume, outcome


def _timed(
    options: RunOptions, nbytes: int, pending: list[int], tick: int
) -> tuple[int, float, int]:
    """A recovery's ticks and joules, started over at each failure landing during it
    (it only reads: the store is as before). Returns (ticks, joules, interruptions)."""
    ticks, energy = time_store_recovery(options, nbytes)
    total, joules, now, interrupted = 0, 0.0, tick, 0
    while ticks and pending and pending[0] < now + ticks:
        cut = pending.pop(0)
        total, joules = total + cut - now, joules + energy * (cut - now) / ticks
        now, interrupted = cut, interrupted + 1
    return total + ticks, joules + energy, interrupted
