"""Replays op plans on a ReplayBoard, run by gem5's stdlib Simulator (imported under gem5).

Two phases on one instantiated board, each one ``Simulator.run()``:
- ``concurrent``: every op starts at the tick the built-in schedule started it, so
  gem5 arbitrates the same overlaps (a lookup next to the previous batch's log drain,
  MLP-log slices during the top MLP); an op's stages run one after another as gem5
  finishes them.
- ``alone``: one op at a time on an idle system (after the write queues drained), to
  compare with the built-in engine's ``alone_ticks``.

A stream runs on a generator of its pool: a TraceGen over a packet trace (memory
streams) or a LinearGen (transfers), then an exit state. The Simulator hands each
exit to a handler: ``EXIT`` (a generator has issued its last request) and
``SCHEDULED_TICK`` (a tick this replay asked for: a stage's software wait, an op's
start, or a look at a stream's response count, which no stock generator reports by
an exit). Counts are looked at a thousandth of the stream's elapsed time apart (10
ns .. 2 us), so a duration is known to 0.1%. Handlers return True when the phase's
last op has ended, which ends ``run()``.

gem5's statistics are reset when a phase starts and dumped at each batch's end (the
concurrent phase: when its ``batch_end`` op ends, the last batch at the phase's end;
the alone phase: after the batch's last op), so stats.txt holds one dump per batch
and phase, concurrent ones first. The per-exit "Entering event queue" lines are
gem5 info messages, silenced while the replay runs (``--debug-flags`` still trace).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from components.gem5.ops import LinearStream, OpPlan, StagePlan, TraceStream
from components.gem5.pools import pool_key
from components.gem5.trace import write_trace

ISSUE_DONE = " has encountered the exit state"
MIN_STEP, MAX_STEP, STEP_SHARE = 10_000, 2_000_000, 1000
QUIESCE = 100_000_000  # 100 us between ops replayed alone: the write queues drain


@dataclass(eq=False)
class _Stream:
    stream: TraceStream | LinearStream
    gen: object
    stage: _Stage
    target: int  # the generator's response count once the stream is done
    start: int
    trace: Path | None = None
    issued: bool = False
    next_poll: int = 0


@dataclass(eq=False)
class _Stage:
    op: _Op
    plan: StagePlan
    remaining: int = 0


@dataclass(eq=False)
class _Op:
    plan: OpPlan
    start: int = -1
    end: int = -1
    index: int = 0
    done: Callable[[_Op], None] | None = None
    marks: list[int] = field(default_factory=list)  # tick each stage began


@dataclass
class Replay:
    """Runs plans on a ReplayBoard's generator pools (``pools``) under a stdlib
    Simulator given ``handlers()`` (``attach``); ``workdir`` holds the live traces."""

    pools: dict
    workdir: Path
    _simulator: object = None
    _busy: Callable[[], bool] | None = None
    _scheduled: set = field(default_factory=set)
    _timers: list = field(default_factory=list)
    _running: dict = field(default_factory=dict)
    _free: dict = field(default_factory=dict)
    _blocked: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)
    _files: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self._free = {key: list(gens) for key, gens in self.pools.items()}

    # ----- the Simulator's exit events ---------------------------------------------------
    def handlers(self) -> dict:
        """``on_exit_event`` for gem5's stdlib Simulator."""
        from gem5.simulate.exit_event import ExitEvent

        return {
            ExitEvent.EXIT: self._issued,
            ExitEvent.SCHEDULED_TICK: self._tick,
            ExitEvent.MAX_TICK: self._stalled,
        }

    def attach(self, simulator) -> None:
        self._simulator = simulator

    def _issued(self) -> bool:
        """A generator has issued its stream's last request."""
        cause = self._simulator.get_last_exit_event_cause()
        name = cause.split(ISSUE_DONE)[0] if ISSUE_DONE in cause else None
        if name not in self._running:
            raise RuntimeError(f"gem5 stopped unexpectedly: {cause.strip()}")
        self._running[name].issued = True
        return self._advance()

    def _tick(self) -> bool:
        import m5

        self._scheduled.discard(m5.curTick())
        return self._busy is None or self._advance()

    def _stalled(self) -> bool:
        raise RuntimeError("gem5 replay stalled: no event left before the last op ended")

    def _run(self, busy: Callable[[], bool]) -> None:
        """One phase: ``Simulator.run()`` until ``busy`` turns false."""
        import m5

        self._busy = busy
        m5.stats.reset()
        if self._advance():
            self._busy = None
            return
        self._simulator.run()
        self._busy = None

    # ----- the two replays -----------------------------------------------------------
    def concurrent(self, plans: list[OpPlan]) -> dict[int, tuple[int, int]]:
        """The built-in schedule again, with gem5 timing the memory ops: an op starts
        once its dependencies have ended (the op it starts with has started, its batch
        has been created) and its unit is free, foreground before background, as in
        components/sim/schedule.py; ops without memory traffic keep their built-in
        duration. (start, end) ticks per op uid."""
        import m5

        ops = {plan.trace.record.uid: _Op(plan) for plan in plans}
        waiting: dict[int, set[int]] = {}
        followers: dict[int, list[int]] = {uid: [] for uid in ops}
        starters: dict[int, list[int]] = {uid: [] for uid in ops}
        for uid, op in ops.items():
            trace = op.plan.trace
            ended = set(trace.deps)
            if trace.created_after is not None:
                ended.add(trace.created_after)
            for dep in ended:
                followers[dep].append(uid)
            waiting[uid] = set(ended)
            if trace.start_with is not None:
                waiting[uid].add(-1 - trace.start_with)  # "started", not "ended"
                starters[trace.start_with].append(uid)
        units = _Units()

        def satisfy(uid: int, token: int) -> None:
            waiting[uid].discard(token)
            if not waiting[uid]:
                ready(uid)

        def ready(uid: int) -> None:
            op = ops[uid]
            record = op.plan.trace.record
            if record.resource is None:
                start(uid)
            else:
                units.acquire(record.resource, record.background, lambda: start(uid))

        def start(uid: int) -> None:
            op = ops[uid]
            op.done = lambda _op: end(uid)
            for other in starters[uid]:
                satisfy(other, -1 - uid)
            if op.plan.realized:
                self._begin(op)
            else:
                op.start = m5.curTick()
                self._at(op.start + op.plan.trace.builtin_ticks, lambda: self._next_stage(op))

        last_batch = max(op.plan.batch for op in ops.values())

        def end(uid: int) -> None:
            record = ops[uid].plan.trace.record
            if record.name == "batch_end" and record.batch != last_batch:
                self._dump()
            if record.resource is not None:
                units.release(record.resource)
            for other in followers[uid]:
                satisfy(other, uid)

        now = m5.curTick()
        for uid in sorted(ops):
            if not waiting[uid]:
                self._at(now, lambda uid=uid: ready(uid))
        self._run(lambda: any(op.end < 0 for op in ops.values()))
        self._dump()
        return {uid: (op.start, op.end) for uid, op in ops.items()}

    def alone(self, plans: list[OpPlan]) -> dict[int, list[int]]:
        """Each op with memory traffic by itself, QUIESCE after the previous one; gem5
        ticks of each of its stages, per op uid."""
        import m5

        ops = [_Op(plan) for plan in plans if plan.realized]
        queue = list(ops)

        def next_op(finished: _Op | None = None) -> None:
            if finished is not None and (not queue or queue[0].plan.batch != finished.plan.batch):
                self._dump()  # the batch's last op
            if queue:
                op = queue.pop(0)
                op.done = next_op
                self._at(m5.curTick() + QUIESCE, lambda: self._begin(op))

        next_op()
        self._run(lambda: any(op.end < 0 for op in ops))
        return {op.plan.trace.record.uid: list(np.diff(op.marks).tolist()) for op in ops}

    # ----- ops and stages --------------------------------------------------------------
    def _begin(self, op: _Op) -> None:
        import m5

        op.start = m5.curTick()
        self._next_stage(op)

    def _next_stage(self, op: _Op) -> None:
        import m5

        op.marks.append(m5.curTick())
        if op.index == len(op.plan.stages):
            op.end = m5.curTick()
            if op.done is not None:
                op.done(op)
            return
        plan = op.plan.stages[op.index]
        op.index += 1
        stage = _Stage(op, plan)
        if not plan.streams:
            self._at(m5.curTick() + plan.wait, lambda: self._next_stage(op))
        elif not self._launch(stage):
            self._blocked.append(stage)

    def _launch(self, stage: _Stage) -> bool:
        """Start every stream of a stage, or none while a pool has too few generators."""
        import m5

        keys = [pool_key(stream) for stream in stage.plan.streams]
        need = {key: keys.count(key) for key in keys}
        if any(len(self._free.get(key, ())) < count for key, count in need.items()):
            return False
        stage.remaining = len(keys)
        for stream, key in zip(stage.plan.streams, keys, strict=True):
            gen = self._free[key].pop()
            running = _Stream(stream, gen, stage, _responses(gen) + stream.packets, m5.curTick())
            gen.start(self._states(gen, running))
            self._running[gen.path()] = running
        return True

    def _states(self, gen, running: _Stream):
        stream = running.stream
        if isinstance(stream, TraceStream):
            running.trace = self.workdir / f"stream{next(self._files)}.trc"
            write_trace(running.trace, np.full(stream.packets, stream.write), stream.addr,
                        stream.size, stream.ticks)  # fmt: skip
            yield gen.createTrace(0, str(running.trace))
        else:
            if stream.delay:
                yield gen.createIdle(stream.delay)
            end = stream.start + stream.packets * 64
            read_percent = 0 if stream.write else 100
            yield gen.createLinear(
                0, stream.start, end, 64, stream.period, stream.period, read_percent,
                stream.packets * 64,
            )  # fmt: skip
        yield gen.createExit(0)

    def _finish(self, running: _Stream) -> None:
        import m5

        del self._running[running.gen.path()]
        self._free[pool_key(running.stream)].append(running.gen)
        if running.trace is not None:
            running.trace.unlink()
        stage = running.stage
        stage.remaining -= 1
        if stage.remaining == 0:
            op = stage.op
            self._at(m5.curTick() + stage.plan.wait, lambda: self._next_stage(op))
        blocked, self._blocked = self._blocked, []
        for waiting in blocked:
            if not self._launch(waiting):
                self._blocked.append(waiting)

    # ----- timers and polls ------------------------------------------------------------
    def _at(self, tick: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (tick, next(self._seq), action))

    def _advance(self) -> bool:
        """Run what is due now, then ask for an exit at the next thing due; True once
        the phase is over."""
        import m5

        now = m5.curTick()
        while self._timers and self._timers[0][0] <= now:
            heapq.heappop(self._timers)[2]()
        for running in list(self._running.values()):
            if running.issued and running.next_poll <= now:
                self._poll(running, now)
        if not self._busy():
            return True
        wakes = [self._timers[0][0]] if self._timers else []
        wakes += [r.next_poll for r in self._running.values() if r.issued]
        if not wakes and not self._running:
            raise RuntimeError("gem5 replay stalled: ops wait for generators none will free")
        if wakes:
            wake = max(min(wakes), now + 1)
            if wake not in self._scheduled:
                self._scheduled.add(wake)
                m5.scheduleTickExitAbsolute(wake)
        return False

    def _dump(self) -> None:
        """One dump of gem5's statistics and a fresh start for the next; the reset
        zeroes the response counts, so running streams count what is left to come."""
        import m5

        m5.stats.dump()
        for running in self._running.values():
            running.target -= _responses(running.gen)
        m5.stats.reset()

    def _poll(self, running: _Stream, now: int) -> None:
        if _responses(running.gen) >= running.target:
            self._finish(running)
            return
        step = (now - running.start) // STEP_SHARE
        running.next_poll = now + min(max(step, MIN_STEP), MAX_STEP)


class _Units:
    """Units that run one op at a time, granted foreground first, then in request order."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._queue: dict[str, list] = {}
        self._seq = itertools.count()

    def acquire(self, unit: str, background: bool, grant: Callable[[], None]) -> None:
        if unit not in self._busy:
            self._busy.add(unit)
            grant()
            return
        heapq.heappush(self._queue.setdefault(unit, []), (background, next(self._seq), grant))

    def release(self, unit: str) -> None:
        queue = self._queue.get(unit)
        if queue:
            heapq.heappop(queue)[2]()
        else:
            self._busy.discard(unit)


_COUNTERS: dict[str, tuple] = {}


def _responses(gen) -> int:
    """Responses the generator has received so far (its totalReads + totalWrites
    stats, resolved once per generator: the stat objects read the live counts)."""
    path = gen.path()
    if path not in _COUNTERS:
        group = gen.getCCObject()
        _COUNTERS[path] = tuple(group.resolveStat(n) for n in ("totalReads", "totalWrites"))
    reads, writes = _COUNTERS[path]
    return int(reads.value + writes.value)
