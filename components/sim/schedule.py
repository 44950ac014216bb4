"""Ops on units and flows, with critical-path and contention bookkeeping.

A board turns each batch into ops: named pieces of work that start when their
dependencies have finished. An op may hold a *unit* for its whole life (a command
processor that runs one op at a time: the GPU's stream, the near-memory engine, a DMA
channel), and runs as a sequence of *stages*. A stage is a set of flows (what it needs
of shared resources: PMEM controllers, link directions, compute) served by the flow
network (components/sim/flows.py), then a fixed latency (the response of its last
request). The network, not the op, decides how long the flows take, given everything
else running: that is where overlapping ops pay for sharing.

Background ops (checkpoint logging) queue behind foreground ops waiting for the same
unit; an op that waits on a background op has that wait charged to the background
op's category, which is how logging shows up as a stall only when it outlasts the time
it was given. Time an op's flows lost to other ops' flows is its contention, kept with
the ops it waited on.

Every op records which event released it last (a dependency finishing, or the previous
holder freeing the unit). Walking those links back from a batch's last op yields the
critical path used for the per-batch breakdown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from components.sim.engine import Engine
from components.sim.flows import Flow, FlowNetwork
from components.sim.stats import ledger, refund


@dataclass(eq=False)
class Stage:
    """One step of an op: ``flows`` served together, then ``latency`` ticks. ``gates``
    are events that must also have fired before the latency starts (a read of lines
    still draining waits for them)."""

    flows: list[Flow] = field(default_factory=list)
    latency: int = 0
    gates: list = field(default_factory=list)
    progress: float = 1.0
    booked: list = field(default_factory=list)  # served-work stats booked when built
    alone: int | None = None
    """Ticks this stage's share of the op's work takes alone, where that is not its flows'
    (a gather that RAW gates cut into pieces: alone, on an idle device, it is one stream;
    the first piece carries that, the others none)."""


Body = Callable[[int], "int | Stage | Iterator[Stage]"]


@dataclass
class OpRecord:
    """One op as it ran: where, when, what it waited for last, and whom it shared with."""

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
    wait: int = 0
    waited_on: dict[int | None, float] = field(default_factory=dict)
    resources: tuple[str, ...] = ()
    deps: tuple[int, ...] = ()  # uids of the ops it waited for (crash schedules read them)


class Unit:
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
        """Event that fires when the unit is granted (lower priority value first)."""
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
    """Creates ops as engine processes and keeps their records."""

    FOREGROUND, BACKGROUND = 0, 1

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.network = FlowNetwork(engine)
        self.resources: dict[str, Unit] = {}
        self.records: list[OpRecord] = []
        self.current: int | None = None
        self.prefix = ""  # prepended to op names (a pooled run's job{j}. for its other jobs)

    def resource(self, name: str) -> Unit:
        if name not in self.resources:
            self.resources[name] = Unit(self.engine, name)
        return self.resources[name]

    def op(
        self,
        name: str,
        category: str,
        batch: int,
        resource: str | None,
        body: Body,
        deps: Iterable[Op] = (),
        background: bool = False,
        start_with: Op | None = None,
        until: Op | None = None,
    ) -> Op:
        """An op on ``resource`` (a unit, or None) running ``body(now)``: ticks of pure
        latency, one Stage, or an iterator of Stages (each built when it begins, so it
        sees the devices as they are then; it is sent the progress the previous stage
        reached). ``start_with``: ready once that op has started instead of ended;
        ``until``: its flows stop when that op ends (a window it may only work in)."""
        deps = list(deps)
        record = OpRecord(
            len(self.records), self.prefix + name, category, resource, batch, background=background,
            deps=tuple(d.record.uid for d in deps),
        )  # fmt: skip
        self.records.append(record)
        handle = Op(record, self.engine.event(), self.engine.event())
        self.engine.process(self._run(handle, deps, body, start_with, until))
        return handle

    def _run(self, handle: Op, deps: list[Op], body: Body, start_with, until):
        record = handle.record
        if start_with is not None:
            yield start_with.started
        if deps:
            yield self.engine.all_of([d.done for d in deps])
            record.pred = _latest(deps)
            record.fg_pred = _latest([d for d in deps if not d.record.background])
        record.ready = self.engine.now
        unit = self.resource(record.resource) if record.resource else None
        priority = Scheduler.BACKGROUND if record.background else Scheduler.FOREGROUND
        if unit is not None:
            waited = yield unit.acquire(priority)
            if waited:
                record.pred = unit.last_release_uid
        record.start = self.engine.now
        handle.started.succeed()
        flows: list[Flow] = []
        self.current = record.uid
        try:
            with ledger() as booked:
                work = body(self.engine.now)
        finally:
            self.current = None
        if isinstance(work, Stage):
            work.booked = booked
        if isinstance(work, (int, Stage)):
            work = _once(work)
        progress = None
        while True:
            self.current = record.uid
            try:
                with ledger() as booked:
                    stage = work.send(progress) if progress is not None else next(work)
            except StopIteration:
                break
            finally:
                self.current = None
            if isinstance(stage, int):
                stage = Stage(latency=stage)
            elif booked:
                stage.booked = stage.booked + booked
            yield from self._stage(record, stage, flows, until)
            progress = stage.progress
        ticks = self.engine.now - record.start
        if unit is not None:
            unit.release(record.uid, ticks)
        record.end = self.engine.now
        record.wait = min(int(round(sum(f.waited for f in flows))), ticks)
        for flow in flows:
            for uid, lost in flow.waited_on.items():
                record.waited_on[uid] = record.waited_on.get(uid, 0.0) + lost
        record.resources = tuple(sorted({r for f in flows for r in f.needs}))
        handle.done.succeed()

    def _stage(self, record: OpRecord, stage: Stage, flows: list[Flow], until):
        for flow in stage.flows:
            flow.owner = record.uid
        events = [self.network.start(flow) for flow in stage.flows]
        flows.extend(stage.flows)
        if events:
            served = self.engine.all_of(events)
            if until is not None and not until.done.triggered:
                yield self.engine.any_of([served, until.done])
                if not served.triggered:
                    stage.progress = min(self.network.stop(f) for f in stage.flows)
                    refund(stage.booked, stage.progress)
                    return
            else:
                yield served
        if stage.gates:
            yield self.engine.all_of(stage.gates)
        if stage.latency:
            yield self.engine.timeout(stage.latency)


@dataclass(eq=False)
class Op:
    """Handle to a scheduled op: its record and events at its start and end."""

    record: OpRecord
    started: object
    done: object


def alone_ticks(work: int | Stage | Iterator[int | Stage]) -> int:
    """How long op work would take with every resource to itself (its stages in turn;
    RAW gates ignored): the analytical figure contention is measured against."""
    stages = [work] if isinstance(work, (int, Stage)) else list(work)
    total = 0
    for stage in stages:
        if isinstance(stage, int):
            total += stage
            continue
        if stage.alone is not None:
            total += stage.alone
            continue
        total += _together_ticks(stage.flows) + stage.latency
    return total


def _together_ticks(flows: list[Flow]) -> int:
    """How long a stage's flows take on an otherwise idle network: alone each takes its
    own bound; together they share what they both cross (a link, a DCOH's trackers)."""
    if len(flows) <= 1:
        return max((flow.alone_ticks for flow in flows), default=0)
    engine = Engine()
    network = FlowNetwork(engine)
    copies = [
        Flow(dict(f.needs), min_ticks=f.min_ticks, weight=f.weight, alone_needs=f.alone_needs,
             fence_ticks=f.fence_ticks, fence_chains=f.fence_chains)
        for f in flows
    ]  # fmt: skip
    for copy in copies:
        network.start(copy)
    engine.run()
    return max(copy.end for copy in copies)


def _once(stage: int | Stage) -> Iterator[int | Stage]:
    yield stage


def _latest(ops: list[Op]) -> int | None:
    if not ops:
        return None
    return max(ops, key=lambda d: (d.record.end, d.record.uid)).record.uid


def critical_path(
    records: list[OpRecord], last_uid: int, window_start: int, contention: dict | None = None
) -> dict[str, int]:
    """Ticks per category along the chain of ops that set the pace of one window.

    Starting at the window's last op, each op contributes the part of its run inside
    the window, and the walk continues with whatever released it last: a dependency
    finishing, or the previous holder freeing its unit. The share of an op's run its
    flows spent slowed by other ops is charged to 'contention' (and, when
    ``contention`` is given, to the categories of the ops it waited on there). When a
    release came from a background op (a checkpoint log the op had to wait for), only
    the wait beyond the op's latest foreground dependency is charged to the background
    op's category, and the walk continues along the foreground chain: that wait is the
    stall, and the share of it the background op spent slowed by others is contention
    too. Time where nothing on the chain ran is 'idle'. The categories sum to the
    window's length.
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
        span = cursor - begin
        length = record.end - record.start
        _charge_run(records, record, span, length, charge, contention)
        cursor = begin
        following = record.pred
        if following is not None and records[following].background and not record.background:
            blocker = records[following]
            foreground = record.fg_pred
            resume = records[foreground].end if foreground is not None else blocker.start
            resume = max(min(resume, cursor), window_start)
            stall = cursor - resume
            _charge_run(records, blocker, stall, blocker.end - blocker.start, charge, contention)
            cursor = resume
            following = foreground if foreground is not None else blocker.pred
        uid = following
    charge("idle", cursor - window_start)
    return totals


def _charge_run(records, record: OpRecord, span: int, length: int, charge, contention) -> None:
    """Charge ``span`` ticks of ``record``'s run: the share its flows spent slowed by
    other ops to 'contention' (split by whom into ``contention``), the rest to its own
    category."""
    part = min(span, length)
    lost = math.floor(part * record.wait / length) if length > 0 and record.wait else 0
    charge(record.category, span - lost)
    charge("contention", lost)
    if contention is not None and lost:
        _split_contention(records, record, lost, contention)


def _split_contention(records, record: OpRecord, lost: int, out: dict) -> None:
    """Spread an op's contention over the categories of the ops it waited on."""
    total = sum(record.waited_on.values())
    for uid, share in sorted(record.waited_on.items(), key=lambda item: str(item[0])):
        category = records[uid].category if uid is not None else "other"
        if total:
            out[category] = out.get(category, 0.0) + lost * share / total
