"""Op-level scheduling on shared resources, with critical-path bookkeeping.

A board turns each batch into ops: named pieces of work on one resource (the GPU, the
CXL-MEM engine, a link) that start when their dependencies have finished and the
resource is free. Durations are computed when an op starts, because memory timing
depends on what is in flight at that instant (read-after-write stalls).

Background ops (checkpoint logging) queue behind foreground ops waiting for the same
unit; an op that waits on a background op has that wait charged to the background
op's category, which is how logging shows up as a stall only when it outlasts the
time it was given.

Every op records which event released it last (a dependency finishing, or the
previous holder freeing the resource). Walking those links back from a batch's last
op yields the critical path used for the per-batch breakdown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from components.sim.engine import Engine

DurationFn = Callable[[int], int]


@dataclass
class OpRecord:
    """One op as it ran: where, when, and what it waited for last."""

    uid: int
    name: str
    category: str
    resource: str
    batch: int
    start: int = -1
    end: int = -1
    ready: int = -1
    pred: int | None = None
    fg_pred: int | None = None
    background: bool = False


class SharedResource:
    """A unit that runs one op (or one background chunk) at a time, by priority."""

    def __init__(self, engine: Engine, name: str) -> None:
        self.name = name
        self._engine = engine
        self._busy = False
        self._waiting: list[tuple[int, int, object]] = []
        self._seq = 0
        self.last_release_uid: int | None = None
        self.busy_ticks = 0

    def acquire(self, priority: int):
        """Event that fires when the resource is granted (lower priority value first)."""
        grant = self._engine.event()
        if not self._busy:
            self._busy = True
            grant.succeed(False)
        else:
            self._seq += 1
            self._waiting.append((priority, self._seq, grant))
            self._waiting.sort(key=lambda item: (item[0], item[1]))
        return grant

    def release(self, uid: int, held_ticks: int) -> None:
        self.last_release_uid = uid
        self.busy_ticks += held_ticks
        if self._waiting:
            _, _, grant = self._waiting.pop(0)
            grant.succeed(True)
        else:
            self._busy = False


class Scheduler:
    """Creates ops as SimPy processes and keeps their records."""

    FOREGROUND, BACKGROUND = 0, 1

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.resources: dict[str, SharedResource] = {}
        self.records: list[OpRecord] = []

    def resource(self, name: str) -> SharedResource:
        if name not in self.resources:
            self.resources[name] = SharedResource(self.engine, name)
        return self.resources[name]

    def op(
        self,
        name: str,
        category: str,
        batch: int,
        resource: str,
        duration: DurationFn,
        deps: Iterable[Op] = (),
        background: bool = False,
    ) -> Op:
        record = OpRecord(len(self.records), name, category, resource, batch, background=background)
        self.records.append(record)
        handle = Op(record)
        handle.done = self.engine.event()
        self.engine.process(self._run(handle, list(deps), duration))
        return handle

    def _run(self, handle: Op, deps: list[Op], duration: DurationFn):
        record = handle.record
        if deps:
            yield self.engine.all_of([d.done for d in deps])
            record.pred = _latest(deps)
            record.fg_pred = _latest([d for d in deps if not d.record.background])
        record.ready = self.engine.now
        unit = self.resources[record.resource] if record.resource else None
        priority = Scheduler.BACKGROUND if record.background else Scheduler.FOREGROUND
        if unit is not None:
            waited = yield unit.acquire(priority)
            if waited:
                record.pred = unit.last_release_uid
        record.start = self.engine.now
        ticks = duration(self.engine.now)
        yield self.engine.timeout(ticks)
        if unit is not None:
            unit.release(record.uid, ticks)
        record.end = self.engine.now
        handle.done.succeed()


class Op:
    """Handle to a scheduled op: its record and an event that fires at its end."""

    def __init__(self, record: OpRecord) -> None:
        self.record = record
        self.done = None


def _latest(ops: list[Op]) -> int | None:
    if not ops:
        return None
    return max(ops, key=lambda d: (d.record.end, d.record.uid)).record.uid


def critical_path(records: list[OpRecord], last_uid: int, window_start: int) -> dict[str, int]:
    """Ticks per category along the chain of ops that set the pace of one window.

    Starting at the window's last op, each op contributes the part of its run inside
    the window, and the walk continues with whatever released it last: a dependency
    finishing, or the previous holder freeing its resource. When that release came from
    a background op (a checkpoint log the op had to wait for), only the wait beyond the
    op's latest foreground dependency is charged to the background op's category, and
    the walk continues along the foreground chain: that wait is the stall. Time where
    nothing on the chain ran is 'idle'. The categories sum to the window's length.
    """
    totals: dict[str, int] = {}

    def charge(category: str, ticks: int) -> None:
        if ticks > 0:
            totals[category] = totals.get(category, 0) + ticks

    uid: int | None = last_uid
    cursor = records[last_uid].end
    while uid is not None and cursor > window_start:
        record = records[uid]
        charge("idle", cursor - max(record.end, window_start))
        cursor = min(cursor, record.end)
        begin = max(record.start, window_start)
        charge(record.category, cursor - begin)
        cursor = begin
        following = record.pred
        if following is not None and records[following].background and not record.background:
            blocker = records[following]
            foreground = record.fg_pred
            resume = records[foreground].end if foreground is not None else blocker.start
            resume = max(min(resume, cursor), window_start)
            charge(blocker.category, cursor - resume)
            cursor = resume
            following = foreground if foreground is not None else blocker.pred
        uid = following
    charge("idle", cursor - window_start)
    return totals
