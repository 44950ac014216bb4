"""The flow solver as it was before it moved onto arrays (commit 1e28313), kept as the
oracle of tests/test_flows_scale.py: a plain O(N^2) progressive filling and accounting
over Python lists and dicts, whose float results the array solver must reproduce."""

from __future__ import annotations

import math
from collections import defaultdict

from components.sim.engine import Engine
from components.sim.flows import EPSILON, Flow, ResourceUse


class ReferenceNetwork:
    """The active flows and their max-min rates; wakes the engine at completions."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.active: list[Flow] = []
        self.use: dict[str, ResourceUse] = defaultdict(ResourceUse)
        self._last = 0
        self._generation = 0
        self._pending = False

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
        self.active.append(flow)
        self._reschedule()
        return flow._finished

    def stop(self, flow: Flow) -> float:
        """Stop a flow before it finished (its window closed); returns its progress."""
        if flow not in self.active:
            return flow.done
        now = self.engine.now
        self._advance(now)
        self.active.remove(flow)
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
        self._reschedule()
        return event

    def progress(self, flow: Flow) -> float:
        """The flow's progress now, between two events (its ``done`` is as of the last)."""
        if flow.end >= 0 or flow not in self.active:
            return flow.done
        return min(flow.done + flow.rate * (self.engine.now - self._last), 1.0)

    # ----- the fluid model --------------------------------------------------------------
    def _advance(self, now: int) -> None:
        """Move every active flow's progress to ``now`` and account the interval."""
        elapsed = now - self._last
        if elapsed > 0 and self.active:
            self._account(elapsed)
            for flow in self.active:
                progress = min(flow.rate * elapsed, 1.0 - flow.done)
                flow.done += progress
                for resource, need in flow.needs.items():
                    self.use[resource].busy += need * progress
        self._last = now

    def _account(self, elapsed: int) -> None:
        for flow in self.active:
            alone = flow.alone_rate
            if flow.rate >= alone * (1 - 1e-9) or flow._bottleneck is None:
                continue
            lost = elapsed * (1.0 - flow.rate / alone)
            flow.waited += lost
            self.use[flow._bottleneck].queueing += lost
            others = [
                (other, other.needs[flow._bottleneck] * other.rate)
                for other in self.active
                if other is not flow and flow._bottleneck in other.needs
            ]
            total = sum(share for _, share in others)
            for other, share in others:
                if total > 0:
                    key = other.owner
                    flow.waited_on[key] = flow.waited_on.get(key, 0.0) + lost * share / total

    def _solve(self) -> None:
        """Max-min shares, with every fence chain's bound stretched by the slowdown its
        writes' service sees at the shares the flows would take unbounded."""
        fenced = [flow for flow in self.active if flow.fence_ticks > 0 and flow.needs]
        if not fenced:
            self._fill({})
            return
        self._fill({flow: 0.0 for flow in fenced})
        caps, bottlenecks = self._fence_caps(fenced), {f: f._bottleneck for f in fenced}
        self._fill(caps)
        for flow in fenced:
            if flow._bottleneck is None and flow.rate < flow.alone_rate * (1 - 1e-9):
                flow._bottleneck = bottlenecks[flow]  # where its acceptances waited

    @staticmethod
    def _fence_caps(fenced: list[Flow]) -> dict[Flow, float]:
        """Each chain waits, per write, for that write's service at the flow's share
        (``rate``, from an unbounded fill) instead of alone: the whole flow's service
        loss, spread over its parallel chains, adds to the chain's idle duration. A flow
        alone, or bounded by bandwidth anyway, keeps its bound (the max of the two)."""
        caps = {}
        for flow in fenced:
            service = flow.service_rate
            lost = 0.0
            if 0 < flow.rate < service * (1 - 1e-9):
                lost = (1.0 / flow.rate - 1.0 / service) / flow.fence_chains
            caps[flow] = max(flow.min_ticks, flow.fence_ticks + lost)
        return caps

    def _fill(self, bounds: dict[Flow, float]) -> None:
        """Weighted max-min shares by progressive filling. A flow's share is counted on
        its own most-needed resource (its scale), so equal weights mean equal shares of
        a bottleneck, as in a processor-sharing server or a fair link; its window bound
        (``bounds`` where given, else ``min_ticks``; 0 for none) caps it; resources it
        needs less of are consumed in proportion."""
        spare: dict[str, float] = defaultdict(lambda: 1.0)
        free = []
        for flow in self.active:
            flow.rate, flow._bottleneck = 0.0, None
            if flow.needs:
                free.append(flow)
            else:
                flow.rate = 1.0 / bounds.get(flow, flow.min_ticks)
        while free:
            demand: dict[str, float] = defaultdict(float)
            for flow in free:
                scale = flow.scale
                for resource, need in flow.needs.items():
                    demand[resource] += need / scale * flow.weight
            levels = {r: max(spare[r], 0.0) / demand[r] for r in sorted(demand)}
            level = min(levels.values())
            for flow in free:
                bound = bounds.get(flow, flow.min_ticks)
                if bound > 0:
                    level = min(level, flow.scale / bound / flow.weight)
            # every resource that saturates at this level (ties included) freezes its flows
            tied = level * (1 + 1e-12)
            saturated = [r for r, candidate in levels.items() if candidate <= tied]
            frozen = []
            for flow in free:
                limit = next((r for r in saturated if r in flow.needs), None)
                bound = bounds.get(flow, flow.min_ticks)
                capped = bound > 0 and flow.scale / bound / flow.weight <= tied
                if limit is None and not capped:
                    continue
                flow.rate = level * flow.weight / flow.scale
                flow._bottleneck = limit
                for resource, need in flow.needs.items():
                    spare[resource] -= need * flow.rate
                frozen.append(flow)
            free = [flow for flow in free if flow not in frozen]

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
        self._solve()
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
        wake = None
        for flow in self.active:
            ticks = [self._due(flow, 1.0, now)]
            ticks += [self._due(flow, fraction, now) for fraction, _ in flow._milestones]
            soonest = min(ticks)
            wake = soonest if wake is None else min(wake, soonest)
        if wake is None or math.isinf(wake):
            return None
        return max(wake, now + 1)

    def _complete(self, now: int) -> None:
        """Finish the flows whose work is done and fire reached milestones."""
        still = []
        for flow in self.active:
            remaining = (1.0 - flow.done) / flow.rate if flow.rate > 0 else math.inf
            reached = [(f, e) for f, e in flow._milestones if flow.done >= f - 1e-9]
            for item in reached:
                flow._milestones.remove(item)
                item[1].succeed()
            if remaining < 1.0 or flow.done >= 1.0 - EPSILON:
                for resource, need in flow.needs.items():  # the last sub-tick's share
                    self.use[resource].busy += need * (1.0 - flow.done)
                flow.done = 1.0
                self._finish(flow, now)
            else:
                still.append(flow)
        self.active = still

    def _finish(self, flow: Flow, now: int, complete: bool = True) -> None:
        flow.end = now
        if complete:
            flow.done = 1.0
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
