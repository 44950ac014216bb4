"""Flow-level sharing of bandwidth resources: the timing core's fluid model.

An op's stream of requests is a *flow*. It declares how much work it needs of every
resource it crosses, in ticks of that resource at full speed (media time on a PMEM
controller, serialization on one direction of a link, compute on the GPU), plus its own
bound (``min_ticks``: the requester's window of outstanding requests, a fence chain).
Between two events every active flow progresses at a constant rate set by weighted
max-min fairness, computed by progressive filling as in SimGrid's LMM and other
validated flow-level simulators: every flow's share (of its most-needed resource)
grows in proportion to its weight until a resource saturates or the flow reaches its
own bound; the flows through a saturated resource freeze and the rest keep growing.
Rates are recomputed whenever a flow starts, stops or finishes, so concurrent ops share
every resource as time advances, whichever started first.

While a flow runs slower than it would alone, the lost time is *contention*: charged
to the resource that froze it and to the flows that shared that resource, in
proportion to what each consumed of it. Each flow keeps its progress breakpoints, so a
request at a given position of the stream gets the tick at which it was served.

The solver works on arrays of the active flows (``_Active``): each step of an event is
one compiled loop over them (components/sim/flow_kernels.py, numba; numpy calls where
numba is missing), with the very floats of per-flow loops (docs/architecture.md,
"Cost"; tests/test_flows_scale.py, tests/test_flow_kernels.py).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from components.sim import flow_kernels, loaded
from components.sim.blame import WaitLedger
from components.sim.engine import Engine

EPSILON = 1e-12


@dataclass(eq=False)
class Flow:
    """A stream's needs: ``needs[resource]`` ticks of that resource at full speed for the
    whole flow, ``min_ticks`` its own lower bound on duration, ``weight`` its share;
    ``alone_needs`` what it would need on an idle system where that differs (writes
    that found the WPQ held by others' writes), the reference its contention is
    counted against; ``load`` what a load-dependent device says of it (components/sim/
    loaded.py: requesters, thrashing curve, queueing). ``fence_ticks`` is the part of
    ``min_ticks`` that ``fence_chains`` requesters spend each waiting for its write's
    acceptance before issuing the next (clwb + sfence chains): under load each
    acceptance also waits for the write's slower service, so the solver stretches that
    bound (see ``_fence_caps``).
    ``waited`` and ``waited_on`` are final once the flow has ended: while it runs the
    network keeps them in its arrays."""

    needs: dict[str, float]
    min_ticks: float = 0.0
    weight: float = 1.0
    label: str = ""
    owner: int | None = None
    bytes: dict[str, float] = field(default_factory=dict)
    done: float = 0.0
    rate: float = 0.0
    start: int = -1
    end: int = -1
    history: list[tuple[int, float]] = field(default_factory=list)
    alone_needs: dict[str, float] | None = None
    waited: float = 0.0
    waited_on: dict[int | None, float] = field(default_factory=dict)
    fence_ticks: float = 0.0
    fence_chains: int = 1
    load: loaded.FlowLoad | None = None  # its device's load-dependent service, if any

    def __post_init__(self) -> None:
        self.needs = {r: float(v) for r, v in self.needs.items() if v > 0}
        if self.alone_needs is not None:
            self.alone_needs = {r: float(v) for r, v in self.alone_needs.items() if v > 0}
        if any(not math.isfinite(v) for v in self.needs.values()):
            raise ValueError(f"flow {self.label}: infinite need {self.needs}")
        self._finished = None
        self._milestones: list[tuple[float, object]] = []
        self.on_end: list[Callable[[Flow], None]] = []
        self.then: list[Flow] = []  # started when this one completes (WPQ drains)
        self.writes: list = []  # write streams riding on this flow (for their owners)
        self.network: FlowNetwork | None = None
        self._row = -1  # its row in the network's waited_on ledger while active

    @property
    def scale(self) -> float:
        """Its need of its most-needed resource: the unit its fair share is counted in."""
        return max(self.needs.values())

    @property
    def alone_rate(self) -> float:
        """Progress per tick with every resource to itself."""
        rate = 1.0 / self.min_ticks if self.min_ticks > 0 else math.inf
        return min(rate, self.service_rate)

    @property
    def service_rate(self) -> float:
        """Progress per tick that its resources allow alone, ignoring its own bound."""
        return min(
            (1.0 / need for need in (self.alone_needs or self.needs).values()), default=math.inf
        )

    @property
    def alone_ticks(self) -> int:
        rate = self.alone_rate
        return 0 if math.isinf(rate) else math.ceil(1.0 / rate - EPSILON)

    def tick_at(self, fractions: np.ndarray) -> np.ndarray:
        """Ticks (float) at which the flow reached each progress fraction."""
        ticks = np.array([t for t, _ in self.history], dtype=np.float64)
        done = np.array([d for _, d in self.history], dtype=np.float64)
        if ticks.size == 1:
            return np.full(np.shape(fractions), ticks[0])
        return np.interp(np.asarray(fractions, dtype=np.float64), done, ticks)


@dataclass
class ResourceUse:
    """What the network saw of one resource over the run."""

    busy: float = 0.0
    queueing: float = 0.0
    bytes: float = 0.0
    flows: int = 0


class FlowNetwork:
    """The active flows and their max-min rates; wakes the engine at completions.

    Between membership changes the active flows live in arrays (one entry per flow and
    resource it needs, in the flows' start order), so every step of an event is one
    compiled loop (or a few numpy calls) over the active flows instead of Python loops
    over pairs of them. Every sum is still added in the order the per-flow loops added
    it (the kernels run those loops; ``np.add.at``, ``np.bincount`` and
    ``np.add.accumulate`` add one term at a time, in index order), so rates, ticks and
    statistics are the same floats."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.active: dict[Flow, None] = {}  # insertion-ordered: the start order
        self.use: dict[str, ResourceUse] = defaultdict(ResourceUse)
        self._last = 0
        self._generation = 0
        self._pending = False
        self._state = _Active()
        self._started: list[Flow] = []  # not yet in the arrays
        self._ended: list[int] = []  # in the arrays, no longer active
        self._count = 0  # flows started: each one's start order
        self._solved = False  # the rates are those of the active set
        self._ledger = WaitLedger(lambda: {flow.owner for flow in self.active})
        self._marked: dict[Flow, float] = {}  # active flows with milestones: the nearest
        self._completing: list[Flow] | None = None
        self._id: dict[str, int] = {}  # every resource seen, numbered as first seen
        self._names: list[str] = []
        self._by_rank: list[str] = []  # the same, sorted by name
        self._rank = np.zeros(0, dtype=np.int64)  # number -> place in that order
        self._version = 0  # bumped as resources are added
        self._loaded = 0  # active flows with a load (then the fill is loaded.solve's)

    # ----- public ---------------------------------------------------------------------
    def start(self, flow: Flow):
        """Start a flow now; returns the event that fires when it has all been served."""
        now = self.engine.now
        self._advance(now)
        flow.network = self
        flow.start, flow.done, flow.history = now, 0.0, [(now, 0.0)]
        flow._finished = self.engine.event()
        for resource, amount in flow.bytes.items():
            self.use[resource].bytes += amount
        for resource in flow.needs:
            self.use[resource].flows += 1
        if not flow.needs and flow.min_ticks <= 0:
            self._finish(flow, now)
            return flow._finished
        flow._row = self._ledger.open(flow.waited_on)
        self._loaded += flow.load is not None
        self._register(flow)
        self.active[flow] = None
        self._started.append(flow)
        self._solved = False
        if flow._milestones:
            self._marked[flow] = min(fraction for fraction, _ in flow._milestones)
        if self._completing is not None:
            self._completing.append(flow)
        self._reschedule()
        return flow._finished

    def stop(self, flow: Flow) -> float:
        """Stop a flow before it finished (its window closed); returns its progress."""
        if flow not in self.active:
            return flow.done
        now = self.engine.now
        self._advance(now)
        for resource, amount in flow.bytes.items():
            self.use[resource].bytes -= amount * (1.0 - flow.done)
        self._finish(flow, now, complete=False)
        self._reschedule()
        return flow.done

    def milestone(self, flow: Flow, fraction: float):
        """Event that fires once the flow's progress reaches ``fraction``."""
        event = self.engine.event()
        if flow.done >= fraction - EPSILON or flow.end >= 0:
            event.succeed()
            return event
        flow._milestones.append((fraction, event))
        if flow in self.active:
            self._marked[flow] = min(fraction, self._marked.get(flow, math.inf))
        self._reschedule()
        return event

    def progress(self, flow: Flow) -> float:
        """The flow's progress now, between two events (its ``done`` is as of the last)."""
        if flow.end >= 0 or flow not in self.active:
            return flow.done
        return min(flow.done + flow.rate * (self.engine.now - self._last), 1.0)

    # ----- the fluid model --------------------------------------------------------------
    def _register(self, flow: Flow) -> None:
        """Cache what the solver reads of a starting flow (fixed while it runs): its
        resources' numbers, needs and scalars."""
        fresh = [r for r in flow.needs if r not in self._id]
        if fresh:
            for name in fresh:
                self._id[name] = len(self._names)
                self._names.append(name)
            self._by_rank = sorted(self._names)
            self._version += 1
            rank = {name: i for i, name in enumerate(self._by_rank)}
            self._rank = np.array([rank[name] for name in self._names], dtype=np.int64)
        flow._ids = np.array([self._id[r] for r in flow.needs], dtype=np.int64)
        flow._need = np.array(list(flow.needs.values()), dtype=float)
        flow._seq, self._count = self._count, self._count + 1
        flow._static = (
            max(flow.needs.values(), default=0.0),
            flow.weight,
            flow.min_ticks,
            flow.alone_rate,
            flow.service_rate,
            flow.fence_ticks,
            flow.fence_chains,
        )

    def _arrays(self) -> _Active:
        if self._started or self._ended or self._state.version != self._version:
            self._state.update(self, self._ended, self._started)
            self._started, self._ended = [], []
        return self._state

    def _advance(self, now: int) -> None:
        """Move every active flow's progress to ``now`` and account the interval."""
        elapsed = now - self._last
        if elapsed > 0 and self.active:
            state = self._arrays()
            if flow_kernels.COMPILED:
                self._advance_compiled(state, elapsed)
            else:
                self._account(state, elapsed)
                progress = np.minimum(state.rate * elapsed, 1.0 - state.done)
                state.done += progress
                busy = np.zeros(len(state.names))
                busy[state.touched] = [use.busy for use in state.uses]
                np.add.at(busy, state.resource, state.need * progress[state.flow])
                for use, value in zip(state.uses, busy[state.touched].tolist(), strict=True):
                    use.busy = value
            for flow, done in zip(state.flows, state.done.tolist(), strict=True):
                flow.done = done
        self._last = now

    def _advance_compiled(self, state: _Active, elapsed: int) -> None:
        """``_advance`` and ``_account`` in one compiled pass (components/sim/flow_kernels.py),
        on a table of the touched resources' busy and queueing sums."""
        uses, ledger = state.uses, self._ledger
        table = np.array([(use.busy, use.queueing) for use in uses], dtype=float).reshape(-1, 2)
        ledger.interval = flow_kernels.advance(
            elapsed,
            state.rate,
            state.alone,
            state.bottleneck,
            state.done,
            state.waited,
            table,
            state.spot,
            state.flow,
            state.resource,
            state.need,
            state.by_resource,
            state.first,
            state.row,
            state.col,
            ledger.values,
            ledger.rank,
            ledger.interval,
        )
        for use, (busy, queueing) in zip(uses, table.tolist(), strict=True):
            use.busy, use.queueing = busy, queueing

    def _account(self, state: _Active, elapsed: int) -> None:
        """Charge each slowed flow's lost time to its bottleneck and, split by owner in
        proportion to what each consumed of it, to the other flows sharing it."""
        slowed = ~(state.rate >= state.alone * (1 - 1e-9)) & (state.bottleneck >= 0)
        index = slowed.nonzero()[0]
        if not index.size:
            return
        lost = elapsed * (1.0 - state.rate[index] / state.alone[index])
        state.waited[index] += lost
        where = state.bottleneck[index]
        queueing = np.zeros(len(state.names))
        queueing[state.touched] = [use.queueing for use in state.uses]
        np.add.at(queueing, where, lost)
        for use, value in zip(state.uses, queueing[state.touched].tolist(), strict=True):
            use.queueing = value
        for resource in np.bincount(where).nonzero()[0].tolist():
            entries = state.members(resource)
            sharers = state.flow[entries]
            shares = state.need[entries] * state.rate[sharers]
            mine = where == resource
            at = np.searchsorted(sharers, index[mine])
            cols = state.col[sharers]
            distinct = state.distinct.get(resource)
            if distinct is None:  # one sharer per owner? fixed until the flows change
                distinct = state.distinct[resource] = np.bincount(cols).max() == 1
            self._ledger.charge(state.row[index[mine]], lost[mine], shares, cols, at, distinct)

    def _solve(self) -> None:
        """Max-min shares, with every fence chain's bound stretched by the slowdown its
        writes' service sees at the shares the flows would take unbounded; while a flow
        with a load is active, with its device's thrashing and queueing (loaded.py)."""
        state = self._arrays()
        if self._loaded:
            rate, bottleneck = loaded.solve(state, self._fenced_fill)
        elif flow_kernels.COMPILED:
            rate, bottleneck = flow_kernels.solve(
                state.count,
                state.flow,
                state.resource,
                state.need,
                state.scale,
                state.weight,
                state.min_ticks,
                state.alone,
                state.service,
                state.fence,
                state.chains,
                len(state.names),
            )
        else:
            rate, bottleneck = self._fenced_fill(state)
        state.rate[:], state.bottleneck[:] = rate, bottleneck
        for flow, value in zip(state.flows, rate.tolist(), strict=True):
            flow.rate = value

    def _fenced_fill(self, state: _Active) -> tuple[np.ndarray, np.ndarray]:
        """Rates and bottlenecks: one fill, or, with fence chains, an unbounded fill that
        sets their bounds (``_fence_caps``) and a second fill under those bounds."""
        fenced = np.flatnonzero((state.fence > 0) & (state.count > 0))
        if not fenced.size:
            return self._fill(state, state.min_ticks)
        bounds = state.min_ticks.copy()
        bounds[fenced] = 0.0
        rate, first = self._fill(state, bounds)
        bounds[fenced] = self._fence_caps(state, fenced, rate)
        rate, bottleneck = self._fill(state, bounds)
        restore = fenced[
            (bottleneck[fenced] < 0) & (rate[fenced] < state.alone[fenced] * (1 - 1e-9))
        ]
        bottleneck[restore] = first[restore]  # where its acceptances waited
        return rate, bottleneck

    @staticmethod
    def _fence_caps(state: _Active, fenced: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """Each chain waits, per write, for that write's service at the flow's share
        (``rate``, from an unbounded fill) instead of alone: the whole flow's service
        loss, spread over its parallel chains, adds to the chain's idle duration. A flow
        alone, or bounded by bandwidth anyway, keeps its bound (the max of the two)."""
        rate, service = rate[fenced], state.service[fenced]
        slowed = (rate > 0) & (rate < service * (1 - 1e-9))
        with np.errstate(divide="ignore"):
            lost = (1.0 / rate - 1.0 / service) / state.chains[fenced]
        lost = np.where(slowed, lost, 0.0)
        return np.maximum(state.min_ticks[fenced], state.fence[fenced] + lost)

    @staticmethod
    def _fill(state: _Active, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Weighted max-min shares by progressive filling. A flow's share is counted on
        its own most-needed resource (its scale), so equal weights mean equal shares of
        a bottleneck, as in a processor-sharing server or a fair link; its window bound
        (``bounds``; 0 for none) caps it; resources it needs less of are consumed in
        proportion. Each round freezes the flows of the resources that saturate (the
        first by name is a frozen flow's bottleneck) and those at their bound."""
        n, width = len(state.flows), len(state.names)
        rate, bottleneck = np.zeros(n), np.full(n, -1, dtype=np.int64)
        free = (state.count > 0).nonzero()[0]  # the flows still growing, in order
        spare = np.ones(width)
        with np.errstate(divide="ignore", invalid="ignore"):
            alone = state.count == 0
            rate[alone] = 1.0 / bounds[alone]
            capped_at = np.where(bounds > 0, state.scale / bounds / state.weight, np.inf)
            live = (state.count[state.flow] > 0).nonzero()[0]  # their entries, in order
            flows, resources, needs = state.flow[live], state.resource[live], state.need[live]
            demands = needs / state.scale[flows] * state.weight[flows]
            counts, capped = state.count[free], capped_at[free]
            while free.size:
                demand = np.bincount(resources, weights=demands, minlength=width)
                levels = np.maximum(spare, 0.0) / demand
                levels[demand == 0] = np.inf
                level = min(np.minimum.reduce(levels), np.minimum.reduce(capped))
                tied = level * (1 + 1e-12)
                # per free flow (its entries are contiguous): its first saturated resource
                heads = counts.cumsum() - counts
                candidates = np.where(levels[resources] <= tied, resources, width)
                limit = np.minimum.reduceat(candidates, heads)
                frozen = (limit < width) | (capped <= tied)
                done = free[frozen]
                rate[done] = level * state.weight[done] / state.scale[done]
                bottleneck[done] = np.where(limit[frozen] < width, limit[frozen], -1)
                if done.size == free.size:
                    break
                used = frozen.repeat(counts)
                np.subtract.at(spare, resources[used], needs[used] * rate[flows[used]])
                kept, left = ~used, ~frozen
                flows, resources, needs, demands = (
                    flows[kept],
                    resources[kept],
                    needs[kept],
                    demands[kept],
                )
                free, counts, capped = free[left], counts[left], capped[left]
        return rate, bottleneck

    def _reschedule(self) -> None:
        """Recompute rates once the current tick's starts and stops are all in."""
        if self._pending:
            return
        self._pending = True
        self.engine.timeout(0).callbacks.append(self._recompute)

    def _recompute(self, _event=None) -> None:
        self._pending = False
        now = self.engine.now
        self._advance(now)
        self._complete(now)
        if self.active and not self._solved:  # the shares depend on the active set only
            self._solve()
            self._solved = True
        for flow in self.active:
            flow.history.append((now, flow.done))
        self._generation += 1
        wake = self._next_wake(now)
        if wake is not None:
            generation = self._generation
            timer = self.engine.timeout(wake - now)
            timer.callbacks.append(lambda _e: self._wake(generation))

    def _wake(self, generation: int) -> None:
        if generation == self._generation:
            self._reschedule()

    def _due(self, flow: Flow, fraction: float, now: int) -> int | float:
        if flow.done >= fraction - EPSILON:
            return now
        if flow.rate <= 0:
            return math.inf
        return now + math.ceil((fraction - flow.done) / flow.rate - 1e-6)

    def _next_wake(self, now: int) -> int | None:
        if not self.active:
            return None
        state = self._arrays()
        if flow_kernels.COMPILED:
            wake = flow_kernels.soonest(now, state.done, state.rate)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                due = np.ceil((1.0 - state.done) / state.rate - 1e-6)
            due = np.where(state.rate > 0, now + due, np.inf)
            due[state.done >= 1.0 - EPSILON] = now
            wake = np.minimum.reduce(due)
        for flow, nearest in self._marked.items():  # the nearest milestone is due first
            wake = min(wake, self._due(flow, nearest, now))
        if math.isinf(wake):
            return None
        return max(int(wake), now + 1)

    def _complete(self, now: int) -> None:
        """Finish the flows whose work is done and fire reached milestones, in start
        order (flows started meanwhile, followers, are visited after the others)."""
        if not self.active:
            return
        state = self._arrays()
        if flow_kernels.COMPILED:
            ending = flow_kernels.ending(state.done, state.rate)
        else:
            with np.errstate(divide="ignore"):
                remaining = np.where(state.rate > 0, (1.0 - state.done) / state.rate, np.inf)
            ending = ((remaining < 1.0) | (state.done >= 1.0 - EPSILON)).nonzero()[0]
        ends = [state.flows[i] for i in ending.tolist()]
        reached = [f for f, nearest in self._marked.items() if f.done >= nearest - 1e-9]
        visit = sorted({*ends, *reached}, key=_start_order) if reached else ends
        self._completing = visit
        ends = set(ends)
        for flow in visit:  # grows while we go: started followers
            if flow._milestones:
                reached = [(f, e) for f, e in flow._milestones if flow.done >= f - 1e-9]
                if reached:
                    flow._milestones = [m for m in flow._milestones if m not in reached]
                    for _, event in reached:
                        event.succeed()
                if not flow._milestones:
                    self._marked.pop(flow, None)
                elif flow in self._marked:
                    self._marked[flow] = min(fraction for fraction, _ in flow._milestones)
            if flow in ends:
                for resource, need in flow.needs.items():  # the last sub-tick's share
                    self.use[resource].busy += need * (1.0 - flow.done)
                flow.done = 1.0
                self._finish(flow, now)
        self._completing = None

    def _finish(self, flow: Flow, now: int, complete: bool = True) -> None:
        flow.end = now
        if complete:
            flow.done = 1.0
        if flow in self.active:
            del self.active[flow]
            self._loaded -= flow.load is not None
            self._marked.pop(flow, None)
            self._solved = False
            if flow in self._started:  # ended before the arrays saw it
                self._started.remove(flow)
            else:  # its lost time, kept in the arrays while it ran
                state = self._state
                flow.waited = float(state.waited[np.searchsorted(state.seq, flow._seq)])
                self._ended.append(flow._seq)
            flow.waited_on = self._ledger.close(flow._row)
        flow.history.append((now, flow.done))
        for _, event in flow._milestones:
            if complete:
                event.succeed()
        flow._milestones = []
        for listener in flow.on_end:
            listener(flow)
        flow._finished.succeed(flow.done)
        if complete:
            for follower in flow.then:
                follower.owner = flow.owner
                self.start(follower)


def _start_order(flow: Flow) -> int:
    return flow._seq


REALS = ("scale", "weight", "min_ticks", "alone", "service", "fence", "chains")
REALS += ("rate", "done", "waited")
INTS = ("seq", "count", "bottleneck", "row", "col")


class _Active:
    """The active flows as arrays, kept up to date as flows start and end: per flow
    (start order, a column of ``reals`` and ``ints``) its scalars, rate, progress, lost
    time and bottleneck; per entry (a flow and one resource it needs, in the order of
    its needs) the flow, the resource (numbered by name: its rank among every resource
    seen) and the need; per resource its entries."""

    def __init__(self) -> None:
        self.flows: list[Flow] = []
        self.reals = np.zeros((len(REALS), 0))  # a row per field, a column per flow
        self.ints = np.zeros((len(INTS), 0), dtype=np.int64)
        self.ids, self.need = np.zeros(0, dtype=np.int64), np.zeros(0)
        self.version = 0
        self.id_of_rank = np.zeros(0, dtype=np.int64)
        self._fields()

    def _fields(self) -> None:
        """Name the rows of the tables (contiguous views, which the kernels take)."""
        (self.scale, self.weight, self.min_ticks, self.alone, self.service) = self.reals[:5]
        self.fence, self.chains, self.rate, self.done, self.waited = self.reals[5:]
        self.seq, self.count, self.bottleneck, self.row, self.col = self.ints

    def update(self, network: FlowNetwork, ended: list[int], started: list[Flow]) -> None:
        """Drop the flows numbered ``ended``, append ``started``; renumber resources."""
        if ended:
            keep = np.ones(len(self.flows), dtype=bool)
            keep[np.searchsorted(self.seq, ended)] = False  # seq rises in start order
            entries = np.repeat(keep, self.count)
            self.flows = [f for f, k in zip(self.flows, keep.tolist(), strict=True) if k]
            self.ids, self.need = self.ids[entries], self.need[entries]
            self.reals = np.compress(keep, self.reals, axis=1)
            self.ints = np.compress(keep, self.ints, axis=1)
        if started:
            self.flows += started
            self.ids = np.concatenate([self.ids, *(f._ids for f in started)])
            self.need = np.concatenate([self.need, *(f._need for f in started)])
            reals = [(*f._static, f.rate, f.done, f.waited) for f in started]
            col = network._ledger.col
            ints = [(f._seq, f._ids.size, -1, f._row, col(f.owner)) for f in started]
            # C order, so that each field's row stays contiguous
            reals = np.array(reals, dtype=float).T.copy()
            self.reals = np.concatenate([self.reals, reals], axis=1)
            ints = np.array(ints, dtype=np.int64).T.copy()
            self.ints = np.concatenate([self.ints, ints], axis=1)
        self._fields()
        rank = network._rank
        if self.version != network._version:  # new resources: ranks moved (not the new flows')
            moved = self.bottleneck >= 0
            self.bottleneck[moved] = rank[self.id_of_rank[self.bottleneck[moved]]]
            self.id_of_rank = np.argsort(rank)
            self.version = network._version
        self.resource = rank[self.ids]
        self.names = network._by_rank
        width = len(self.names)
        if flow_kernels.COMPILED:
            self.flow, self.by_resource, self.first, self.touched, self.spot = flow_kernels.index(
                self.count, self.resource, width
            )
        else:
            self.flow = np.repeat(np.arange(len(self.flows)), self.count)
            self.by_resource = np.argsort(self.resource, kind="stable")
            counts = np.bincount(self.resource, minlength=width)
            self.first = np.concatenate([[0], np.cumsum(counts)])
            self.touched = np.flatnonzero(counts)
        self.uses = [network.use[self.names[r]] for r in self.touched.tolist()]
        self.distinct: dict[int, bool] = {}  # per resource: its sharers' owners all differ

    def members(self, resource: int) -> np.ndarray:
        """The entries of ``resource``, in start order."""
        return self.by_resource[self.first[resource] : self.first[resource + 1]]
