"""The discrete-event engine: SimPy on integer ticks, behind a narrow interface.

Components see only ``Engine``: the current tick, timeouts, processes, events and
resources. Keeping SimPy behind this wrapper means the engine can be swapped (for
gem5's event queue, see components/gem5/) without touching a component.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

import simpy


class Engine:
    """One simulation's clock and event queue (1 tick = 1 ps)."""

    def __init__(self) -> None:
        self._env = simpy.Environment(initial_time=0)

    @property
    def now(self) -> int:
        return int(self._env.now)

    def timeout(self, ticks: int) -> simpy.Event:
        if ticks < 0:
            raise ValueError(f"negative delay {ticks}")
        return self._env.timeout(int(ticks))

    def process(self, generator: Generator) -> simpy.Process:
        return self._env.process(generator)

    def event(self) -> simpy.Event:
        return self._env.event()

    def all_of(self, events: Iterable[simpy.Event]) -> simpy.Event:
        return simpy.AllOf(self._env, list(events))

    def any_of(self, events: Iterable[simpy.Event]) -> simpy.Event:
        return simpy.AnyOf(self._env, list(events))

    def resource(self, capacity: int = 1) -> simpy.Resource:
        return simpy.Resource(self._env, capacity=capacity)

    def run(self, until: int | simpy.Event | None = None) -> Any:
        return self._env.run(until=until)
