"""Software checkpoint policies on several CXL-MEMs (--system cxl-d --cxl-mems M with
--checkpoint cpr, check-n-run or none) as a failure-tolerance scheme.

Each CXL-MEM's shard is checkpointed by the host to a store of its own
(components/boards/disaggregated.py ``set_policy``): device m's store holds the
checkpoints of m's rows (and of its stripe of the MLPs), each durable once its own
write op ends, as on one device (failures/software.py, components/persistence/
checkpoints.py). A failure at tick T cuts the power of one CXL-MEM (--fail-device D)
or of every device; the batch it interrupted is abandoned on every device (training
goes on from it), and:

- **partial** recovery (CPR's, the default for cpr): each failed device reloads its
  own shard from its newest complete checkpoint chain; every other device keeps its
  state at the crash (its rows after the last batch every device finished), and so do
  the GPUs' MLPs, unless every device failed (then each stripe comes back from its
  device's checkpoint). The failed shards' updates since their checkpoints are lost:
  their share of the tables' rows x the batches since x the batch size, in samples.
- **full** recovery (check-n-run's and none's, --recovery full for cpr): every shard
  and the MLPs go back to the newest batch whose checkpoint is complete on *every*
  device, and the batches since are rerun.

Recovery is timed on a fresh board: each reloaded shard's chain read from its store
into its CXL-MEM's PMEM, all at once (partial: one shard's bytes; full: every shard's,
in parallel), then the MLP stripes to the GPUs where they were lost. The oracle states
each device's guarantee from the schedule (the store-writing op of each device's
checkpoint, by its unit), not from the policy's log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
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
from simulate.failures.crash_report import CheckSettings, CrashReport
from simulate.failures.oracle import (
    EXACT,
    VIOLATION,
    WITHIN_BOUND,
    Promised,
    StretchHistory,
    Want,
    judge,
    saved_rows,
    want_at,
)
from simulate.failures.recording import ModelState, Stretch
from simulate.failures.software import Crash, bits_of, crash_ticks, final_model_fields
from simulate.failures.tolerance import Failure, FailureTolerance, Resumption
from simulate.run.configure import connected_board, fresh_board, resolve_functional
from simulate.run.options import RunOptions, UsageError

WRITES = ("cpr_checkpoint", "cnr_write")
"""The ops that write a checkpoint to its store (its commit record last)."""


def recovery_mode(options: RunOptions) -> str:
    """--recovery, or the policy's own: CPR's partial, a replay (full) otherwise."""
    if options.recovery is not None:
        return options.recovery
    return "partial" if options.checkpoint == "cpr" else "full"


class ShardRecovery:
    """How the cluster recovers from its stores (the real rules; tests/protocol_mutants.py
    breaks them): which store a failed device reads, which devices a partial recovery
    reloads, which batch a full recovery rolls every device back to."""

    def store_of(self, device: int, devices: int) -> int:
        return device

    def reloaded(self, failed: list[int], devices: int) -> list[int]:
        return failed

    def common_batch(self, complete: list[set[int]]) -> int:
        """The newest batch whose checkpoint is complete on every device (-1: none)."""
        both = set.intersection(*complete) if complete else set()
        return max(both, default=-1)


@dataclass
class Recovered:
    """One recovery's result: each reloaded device's checkpoint batch, the state
    training resumes from, the bytes each device read back."""

    batches: dict[int, int]
    table: np.ndarray
    mlp: np.ndarray
    resume: int
    bytes_read: dict[int, int]
    rolled_back: int  # full: the batch every device went back to; partial: -2


class ShardedCheckpointPolicy(FailureTolerance):
    """Every CXL-MEM's checkpoint store across failures (``variant``: a ChainRecovery,
    ShardRecovery or SoftwareCheckpoint subclass, a mutant a check must catch)."""

    def __init__(
        self, options: RunOptions, recorded: Stretch, lr: float, optimizer: str, variant=None
    ) -> None:
        if optimizer != "sgd":
            raise UsageError(f"--checkpoint {options.checkpoint} failure runs train with SGD")
        super().__init__(options, recorded, lr, optimizer)
        is_a = lambda cls: isinstance(variant, type) and issubclass(variant, cls)  # noqa: E731
        self.codec = variant() if is_a(ChainRecovery) else ChainRecovery()
        self.rules = variant() if is_a(ShardRecovery) else ShardRecovery()
        self.bits = bits_of(options)
        self.mode = recovery_mode(options)
        board = recorded.board
        self.policy = board.ft
        self.devices = len(board.shards)
        total = board.spec.total_rows
        owner, local = board.placement.locate(np.arange(total, dtype=np.int64))
        self.rows_of = []
        for m in range(self.devices):
            mine = np.flatnonzero(owner == m)
            glob = np.empty(len(mine), dtype=np.int64)
            glob[local[mine]] = mine
            self.rows_of.append(glob)  # device m's local row i is global row glob[i]
        self.share = [len(r) / total for r in self.rows_of]
        bounds = np.cumsum([0, *(shard.layout.mlp_count for shard in board.shards)])
        self.stripes = [slice(int(a), int(b)) for a, b in zip(bounds, bounds[1:], strict=False)]
        self.batch_size = resolve_functional(options)[1]
        start = recorded.initial_state()
        self.initial = (start.table, start.mlp)
        self.stores = [CheckpointStore() for _ in range(self.devices)]
        self.promised: list[list[Promised]] = [[] for _ in range(self.devices)]
        self.saves: list[list[int]] = [[] for _ in range(self.devices)]
        self.stretch, self.offset, self.history = recorded, 0, None

    @staticmethod
    def prepare(options: RunOptions, variant=None) -> RunOptions:
        """A policy subclass (a mutant) replaces every shard's policy."""
        if variant is None or not issubclass(variant, SoftwareCheckpoint):
            return options
        board = fresh_board(replace(options, board=None))
        board.set_policy(variant())
        return replace(options, board=board)

    # ----- what the stores hold, what the schedule promises ----------------------------------
    def stored(self, stretch: Stretch, offset: int, history: StretchHistory) -> list[list[Stored]]:
        """Each device's checkpoints of the stretch as its store holds them: its rows
        (global ids), the MLPs, durable at the end of the op its policy logged."""
        out = []
        for m, shard in enumerate(stretch.board.shards):
            seq, items = self.stores[m].next_seq(), []
            for i, t in enumerate(shard.ft.taken):
                rows = self.rows_of[m] if t.full else self.rows_of[m][np.asarray(t.rows)]
                payload = self.codec.encode(history.table_after(t.batch)[rows], self.bits)
                record = t.write.record
                items.append(Stored(seq + i, None if t.full else seq + i - 1, t.batch, rows,
                                    payload, history.mlp_after(t.batch).copy(), t.stored,
                                    offset + record.start, offset + record.end))  # fmt: skip
            out.append(items)
        return out

    def promised_of(self, stretch: Stretch, offset: int, history: StretchHistory):
        """Each device's checkpoints as the schedule wrote them: the end of the op on
        that device's copy thread or store queue that wrote batch b's checkpoint."""
        out, saves = [], []
        for m, shard in enumerate(stretch.board.shards):
            units = (shard.ft.unit, shard.ft.store_unit)
            writes = {
                r.batch: r for r in stretch.records if r.name in WRITES and r.resource in units
            }
            items, durations = [], []
            for t in shard.ft.taken:
                record = writes[t.batch]
                local = saved_rows(stretch, t, shard.ft)  # read from the tables: the schedule
                rows = None if local is None else self.rows_of[m][np.asarray(local)]
                items.append(Promised(t.batch, offset + record.end, history, rows))
                durations.append(record.end - record.start)
            out.append(items)
            saves.append(durations)
        return out, saves

    # ----- injection ----------------------------------------------------------------------
    def extend(self, stretch: Stretch, offset: int, until: int | None) -> None:
        history = StretchHistory(stretch)
        more = self.stored(stretch, offset, history)
        self.stores = [store.added(*items) for store, items in zip(self.stores, more, strict=True)]
        promised, saves = self.promised_of(stretch, offset, history)
        for m in range(self.devices):
            self.promised[m] += promised[m]
            self.saves[m] += saves[m]
        self.stretch, self.offset, self.history = stretch, offset, history

    def settle(self) -> None:
        """Every checkpoint is in its store as written."""

    def close(self) -> None:
        """The stores live in memory: nothing outlives the run."""

    def failed_devices(self) -> list[int]:
        fail = self.options.fail_device
        return list(range(self.devices)) if fail is None else [fail]

    def fail(self, tick: int, pending: list[int]) -> Failure:
        self.stores = [store.at(tick) for store in self.stores]
        self.promised = [[p.cut(tick) for p in items] for items in self.promised]
        crash = Crash.at(self.stretch, self.history, self.offset, tick)
        failed = self.failed_devices()
        got = self.recover(crash, self.stores, self.history, failed)
        outcome, why, worst = self.judge(crash, self.promised, self.history, failed, got)
        lost_mlps = self.mode == "full" or len(failed) == self.devices
        ticks, energy, interrupted = self._timed(got.bytes_read, lost_mlps, pending, tick)
        last = crash.batch - 1  # the last batch every device finished
        entry = {
            "tick": tick,
            "time_ms": round(ticks_to_ms(tick), 6),
            "batch": crash.batch,
            "phase": ", ".join(sorted({f"{r.name}@{r.batch}" for r in crash.running})),
            "recovery": self.mode,
            "failed_devices": failed,
            "reloaded_devices": sorted(got.batches),
            "checkpoint_batch": {str(d): (b if b >= 0 else None) for d, b in got.batches.items()},
            "recovery_bytes": int(sum(got.bytes_read.values())),
            "resume_batch": got.resume,
            "save_ms": {
                str(d): round(ticks_to_ms(self._last_save(d, tick)), 6) for d in got.batches
            },
            "recovery_ms": round(ticks_to_ms(ticks), 6),
            "recovery_energy_j": round(energy, 9),
            "interrupted_recoveries": interrupted,
            "verdict": outcome,
            "detail": why,
            "max_error": worst,
        }
        if self.mode == "full":
            redone = max(last - got.rolled_back, 0)
            entry.update(batches_redone=redone, rerun_ms=round(self._rerun_ms(got.rolled_back,
                                                                              last), 6),
                         lost_samples=0)  # fmt: skip
        else:
            lost = {d: max(last - b, 0) for d, b in got.batches.items()}
            entry.update(
                batches_lost={str(d): n for d, n in lost.items()},
                shard_share={str(d): round(self.share[d], 6) for d in lost},
                lost_samples=round(
                    sum(self.share[d] * n * self.batch_size for d, n in lost.items()), 6
                ),
                batches_redone=0,
                rerun_ms=0.0,
            )
        return Failure(entry, got.resume, ModelState(got.table, got.mlp), tick + ticks)

    def _last_save(self, device: int, tick: int) -> int:
        """Ticks of the device's newest checkpoint write complete by ``tick``."""
        done = [(p.end, s) for p, s in zip(self.promised[device], self.saves[device],
                                           strict=True) if p.end <= tick]  # fmt: skip
        return max(done)[1] if done else 0

    def _rerun_ms(self, rolled_back: int, last: int) -> float:
        """The failure-free run's time for batches (rolled_back, last]: what the rerun
        costs (each batch's end to the next's, as the engine timed them)."""
        ends = {r.batch: r.end for r in self.recorded.records if r.name == "batch_end"}
        total = 0
        for n in range(rolled_back + 1, last + 1):
            total += ends[n] - ends.get(n - 1, 0)
        return ticks_to_ms(total)

    def final_fields(self, final: Stretch | None) -> dict[str, Any]:
        return final_model_fields(final.model, self.recorded.model)

    # ----- recovery and its verdict ----------------------------------------------------------
    def recover(
        self, crash: Crash, stores: list[CheckpointStore], history: StretchHistory,
        failed: list[int],
    ) -> Recovered:  # fmt: skip
        """What the cluster reads back from its stores after a crash (the stores as the
        power left them)."""
        tick, last = crash.tick, crash.batch - 1
        table = history.table_after(last).copy()
        mlp = np.array(history.mlp_after(last), copy=True)
        batches, read = {}, {}
        if self.mode == "partial":
            for d in self.rules.reloaded(failed, self.devices):
                got = self._chain(stores[self.rules.store_of(d, self.devices)], tick)
                table[self.rows_of[d]] = got.table[self.rows_of[d]]
                if len(failed) == self.devices:
                    mlp[self.stripes[d]] = got.mlp[self.stripes[d]]
                batches[d], read[d] = got.batch, got.bytes_read
            return Recovered(batches, table, mlp, crash.batch, read, -2)
        complete = [{c.batch for c in s.checkpoints if c.complete(tick)} for s in stores]
        common = self.rules.common_batch(complete)
        for d in range(self.devices):
            upto = CheckpointStore(tuple(c for c in stores[d].checkpoints if c.batch <= common))
            got = self._chain(upto, tick)
            table[self.rows_of[d]] = got.table[self.rows_of[d]]
            mlp[self.stripes[d]] = got.mlp[self.stripes[d]]
            batches[d], read[d] = got.batch, got.bytes_read
        return Recovered(batches, table, mlp, common + 1, read, common)

    def _chain(self, store: CheckpointStore, tick: int) -> ChainState:
        return self.codec.recover(store, tick, self.initial)

    def want(
        self, crash: Crash, promised: list[list[Promised]], history: StretchHistory,
        failed: list[int],
    ) -> tuple[dict[int, int], Want]:  # fmt: skip
        """Each device's guarantee, from the schedule: partial, a failed device's shard
        is its newest complete checkpoint, the others' their state at the crash; full,
        every shard (and the MLPs) the newest checkpoint complete on every device."""
        tick, last = crash.tick, crash.batch - 1
        complete_rows = self.policy.complete_rows
        table = history.table_after(last).copy()
        mlp = np.array(history.mlp_after(last), copy=True)
        batches = {}
        if self.mode == "partial":
            for d in failed:
                want = want_at(promised[d], tick, crash.batch, False, self.initial, complete_rows)
                table[self.rows_of[d]] = want.table[self.rows_of[d]]
                if len(failed) == self.devices:
                    mlp[self.stripes[d]] = want.mlp[self.stripes[d]]
                batches[d] = want.batch
            return batches, Want(min(batches.values()), crash.batch, table, mlp)
        done = [{p.batch for p in items if p.end <= tick} for items in promised]
        common = max(set.intersection(*done), default=-1)
        for d in range(self.devices):
            upto = [p for p in promised[d] if p.batch <= common]
            want = want_at(upto, tick, crash.batch, True, self.initial, complete_rows)
            table[self.rows_of[d]] = want.table[self.rows_of[d]]
            mlp[self.stripes[d]] = want.mlp[self.stripes[d]]
            batches[d] = want.batch
        return batches, Want(common, common + 1, table, mlp)

    def judge(
        self, crash: Crash, promised: list[list[Promised]], history: StretchHistory,
        failed: list[int], got: Recovered,
    ) -> tuple[str, str, float]:  # fmt: skip
        batches, want = self.want(crash, promised, history, failed)
        if got.batches != batches:
            return (
                VIOLATION,
                f"devices read back checkpoints {got.batches}, guaranteed {batches}",
                0.0,
            )
        state = ChainState(want.batch, got.table, got.mlp, [], 0)
        outcome, why, worst = judge(want, state, got.resume, self.bits)
        if outcome in (EXACT, WITHIN_BOUND):
            why = f"{self.mode}: devices {sorted(batches)} at checkpoints {batches}; {why}"
        return outcome, why, worst

    def _timed(
        self, nbytes: dict[int, int], mlps: bool, pending: list[int], tick: int
    ) -> tuple[int, float, int]:
        """A recovery's ticks and joules, started over at each failure landing during it."""
        ticks, energy = time_shard_recovery(self.options, nbytes, mlps)
        total, joules, now, interrupted = 0, 0.0, tick, 0
        while ticks and pending and pending[0] < now + ticks:
            cut = pending.pop(0)
            total, joules = total + cut - now, joules + energy * (cut - now) / ticks
            now, interrupted = cut, interrupted + 1
        return total + ticks, joules + energy, interrupted

    # ----- crash exploration --------------------------------------------------------------
    def guarantee(self) -> dict[str, Any]:
        return {
            "policy": self.options.checkpoint,
            "bits": self.bits,
            "devices": self.devices,
            "recovery": self.mode,
            "checkpoints": [len(shard.ft.taken) for shard in self.recorded.board.shards],
            "resume": "partial" if self.mode == "partial" else "replay from the checkpoint",
            "rows": "state at its batch" if self.policy.complete_rows else "as last saved",
        }

    def failure_sets(self) -> list[list[int]]:
        """Whose power a crash check cuts: --fail-device's; else each device alone and
        all of them (partial), every device (full: all are reloaded)."""
        if self.options.fail_device is not None:
            return [[self.options.fail_device]]
        if self.mode == "full":
            return [list(range(self.devices))]
        return [[d] for d in range(self.devices)] + [list(range(self.devices))]

    def explore(
        self, settings: CheckSettings, report: CrashReport, resume: Callable[[Resumption], None]
    ) -> None:
        """Every crash point of the recorded run, for each set of failed devices;
        ``settings.resumed`` of them resumed (the first set) and crashed again."""
        stretch = self.recorded
        history = StretchHistory(stretch)
        stores = [CheckpointStore(tuple(items)) for items in self.stored(stretch, 0, history)]
        promised, _ = self.promised_of(stretch, 0, history)
        ticks = crash_ticks(stretch)
        spread = np.linspace(len(ticks) / 4, len(ticks), settings.resumed, endpoint=False)
        due = set(spread.astype(int))
        for i, tick in enumerate(ticks):
            crash = Crash.at(stretch, history, 0, tick)
            for k, failed in enumerate(self.failure_sets()):
                got, outcome = self._check(crash, stores, promised, history, failed, report)
                if (
                    k == 0
                    and i in due
                    and outcome != VIOLATION
                    and got.resume < self.options.batches
                ):
                    left = [s.at(tick) for s in stores]
                    cut = [[p.cut(tick) for p in items] for items in promised]
                    walk = self._resumed_walk(left, cut, tick)
                    resume(Resumption(got.resume, ModelState(got.table, got.mlp), walk))

    def _resumed_walk(self, left: list[CheckpointStore], cut: list[list[Promised]], tick: int):
        def walk(again: Stretch, report: CrashReport) -> None:
            history, offset = StretchHistory(again), tick + 1
            saved = self.stores
            self.stores = left
            try:
                more = self.stored(again, offset, history)
            finally:
                self.stores = saved
            stores = [s.added(*items) for s, items in zip(left, more, strict=True)]
            promised, _ = self.promised_of(again, offset, history)
            promised = [c + p for c, p in zip(cut, promised, strict=True)]
            for t in crash_ticks(again):
                crash = Crash.at(again, history, offset, offset + t)
                for failed in self.failure_sets():
                    self._check(crash, stores, promised, history, failed, report, "resumed")

        return walk

    def _check(
        self, crash: Crash, stores: list[CheckpointStore], promised: list[list[Promised]],
        history: StretchHistory, failed: list[int], report: CrashReport, mode: str = "checkpoint",
    ) -> tuple[Recovered, str]:  # fmt: skip
        views = [s.at(crash.tick) for s in stores]
        cut = [[p.cut(crash.tick) for p in items] for items in promised]
        got = self.recover(crash, views, history, failed)
        outcome, why, _ = self.judge(crash, cut, history, failed, got)
        report.recoveries += 1
        phase = ", ".join(sorted({f"{r.name}@{r.batch}" for r in crash.running}))
        report.count(mode, (outcome, why), tick=crash.tick, regions=[f"{phase} fail {failed}"])
        return got, outcome


def time_shard_recovery(
    options: RunOptions, nbytes: dict[int, int], mlps: bool
) -> tuple[int, float]:
    """(ticks, joules) of reading each reloaded device's ``nbytes`` back from its own
    store into its CXL-MEM, all devices at once, on a fresh board (``mlps``: and each
    device's MLP stripe to its GPU; nothing to read: nothing to time)."""
    if not any(nbytes.values()):
        return 0, 0.0
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    for d, count in nbytes.items():
        shard = board.shards[d]
        scheduler.op(
            "recovery", "recovery", -1, None,
            lambda now, shard=shard, count=count: shard.ft.recovery(shard, count, mlps),
        )  # fmt: skip
    engine.run()
    ticks = max(engine.now, 1)
    return ticks, EnergyReport.build(board, ticks).total
