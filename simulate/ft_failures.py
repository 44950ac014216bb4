"""Power failures injected into a run under a software checkpoint policy (--checkpoint).

The recorded run (simulate/recording.py) trains with real numerics while its board's
policy takes checkpoints (components/boards/software_ft.py logs each: batch, rows,
bytes, write op). Their contents, the recorded tables after that batch (quantized as
the policy writes them), go to a store model that outlives the power
(components/persistence/checkpoints.py), durable when their write op ends. A failure at
tick T tears the write in flight; recovery reads the newest complete chain back (timed
on a fresh board: its bytes from ``board.ft.store`` into the tables' memory, the MLPs
to the GPU; a failure during it starts it over); training resumes on a fresh board
(Check-N-Run: from the batch after the checkpoint, replaying; CPR: from the batch the
failure interrupted, the ones between lost; nothing complete: the initial weights).
Each recovery is judged by simulate/ft_oracle.py against the policy's guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from components.boards.software_ft import SoftwareCheckpoint
from components.energy import EnergyReport
from components.persistence.checkpoints import (
    ChainRecovery,
    ChainState,
    CheckpointStore,
    Stored,
)
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import ticks_to_ms
from simulate.configure import connected_board, resolve_functional
from simulate.ft_oracle import StretchHistory, judge, promised_of, want_at
from simulate.options import RunOptions, UsageError
from simulate.oracle import same_bits
from simulate.recording import ModelState, Stretch, run_stretch
from workloads.training import DEFAULT_LR


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


def time_recovery(options: RunOptions, nbytes: int) -> tuple[int, float]:
    """(ticks, joules) of reading ``nbytes`` of checkpoints back on a fresh board
    (nothing to read: nothing to time, the job restarts from its initial weights)."""
    if nbytes == 0:
        return 0, 0.0
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    scheduler.op("recovery", "recovery", -1, None, lambda now: board.ft.recovery(board, nbytes))
    engine.run()
    ticks = max(engine.now, 1)
    return ticks, EnergyReport.build(board, ticks).total


def software_failures(
    options: RunOptions,
    recorded: Stretch,
    pending: list[int],
    lr: float = DEFAULT_LR,
    optimizer: str = "sgd",
) -> list[dict[str, Any]]:
    """Inject the failures at ``pending`` (global ticks, sorted); one entry each."""
    return inject_software(options, recorded, pending, lr, optimizer)[0]


def inject_software(
    options: RunOptions,
    recorded: Stretch,
    pending: list[int],
    lr: float = DEFAULT_LR,
    optimizer: str = "sgd",
    codec: ChainRecovery | None = None,
) -> tuple[list[dict[str, Any]], Stretch]:
    """The failure entries and the last stretch (whose model is the final one)."""
    if optimizer != "sgd":
        raise UsageError(f"--checkpoint {options.checkpoint} failure runs train with SGD")
    codec = codec or ChainRecovery()
    bits, policy = bits_of(options), recorded.board.ft
    replays = policy.replays
    start = recorded.initial_state()
    initial = (start.table, start.mlp)
    store, promised, results = CheckpointStore(), [], []
    stretch, offset, pending = recorded, 0, list(pending)
    while True:
        history = StretchHistory(stretch)
        until = pending[0] if pending else -1  # no failure left: nothing read back
        more = stored_of(stretch, offset, history, store.next_seq(), codec, bits, until)
        store = store.added(*more).prune(until)
        promised += promised_of(stretch, offset, history)
        if not pending or pending[0] >= offset + stretch.end_tick:
            break
        tick = pending.pop(0)
        store, promised = store.at(tick), [p.cut(tick) for p in promised]
        crash = Crash.at(stretch, history, offset, tick)
        got, resume, (outcome, why, worst) = crash.recover(
            store, promised, codec, bits, policy, initial
        )
        running = crash.running
        ticks, energy, interrupted = _timed(options, got.bytes_read, pending, tick)
        results.append(
            {
                "tick": tick,
                "time_ms": round(ticks_to_ms(tick), 6),
                "batch": crash.batch,
                "phase": ", ".join(sorted({f"{r.name}@{r.batch}" for r in running})),
                "checkpoint_batch": got.batch if got.batch >= 0 else None,
                "checkpoints_read": len(got.chain),
                "recovery_bytes": got.bytes_read,
                "resume_batch": resume,
                "batches_redone" if replays else "batches_lost": max(
                    crash.batch - got.batch - 1, 0
                ),
                "recovery_ms": round(ticks_to_ms(ticks), 6),
                "recovery_energy_j": round(energy, 9),
                "interrupted_recoveries": interrupted,
                "verdict": outcome,
                "detail": why,
                "max_error": worst,
            }
        )
        offset = tick + ticks
        if resume >= options.batches:
            break
        stretch = run_stretch(options, resume, ModelState(got.table, got.mlp), lr, optimizer)
    if pending:
        end = ticks_to_ms(offset + stretch.end_tick)
        late = ", ".join(f"{ticks_to_ms(t):g} ms" for t in pending)
        raise UsageError(f"failure instant {late} is after the run ends at {end:g} ms")
    final = stretch.model
    exact = same_bits(final.table, recorded.model.table) and same_bits(
        final.mlp_flat(), recorded.model.mlp_flat()
    )
    deviation = float(np.abs(final.table - recorded.model.table).max(initial=0.0))
    for entry in results:
        entry["final_model_exact"] = exact
        entry["final_max_deviation"] = deviation
    return results, stretch


def _timed(
    options: RunOptions, nbytes: int, pending: list[int], tick: int
) -> tuple[int, float, int]:
    """A recovery's ticks and joules, started over at each failure landing during it
    (it only reads: the store is as before). Returns (ticks, joules, interruptions)."""
    ticks, energy = time_recovery(options, nbytes)
    total, joules, now, interrupted = 0, 0.0, tick, 0
    while ticks and pending and pending[0] < now + ticks:
        cut = pending.pop(0)
        total, joules = total + cut - now, joules + energy * (cut - now) / ticks
        now, interrupted = cut, interrupted + 1
    return total + ticks, joules + energy, interrupted
