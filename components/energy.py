"""Energy accounting over a component tree (docs/architecture.md, Energy contract).

Generic on purpose: any SimObject that declares a ``static_power`` parameter is charged
static_power x simulated time, and any ``dynamicEnergy`` stat is added as dynamic
energy. A component with active/idle power (the GPU) declares an ``active_power``
parameter and a ``busy_ticks()`` method: it is charged active_power while busy and
static_power for the rest of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.sim.simobject import SimObject
from components.sim.units import ticks_to_seconds


@dataclass(frozen=True)
class ComponentEnergy:
    """Joules one component used: static (power x time) and dynamic (per work)."""

    static: float
    dynamic: float

    @property
    def total(self) -> float:
        return self.static + self.dynamic


@dataclass(frozen=True)
class EnergyReport:
    """Energy of every energy-consuming component under a root, for results.json."""

    sim_ticks: int
    components: dict[str, ComponentEnergy] = field(default_factory=dict)

    @classmethod
    def build(cls, root: SimObject, sim_ticks: int) -> EnergyReport:
        if sim_ticks < 0:
            raise ValueError(f"simulated time must not be negative, got {sim_ticks}")
        parts = {}
        for obj in root.descendants():
            energy = component_energy(obj, sim_ticks)
            if energy is not None:
                parts[obj.path] = energy
        return cls(sim_ticks, parts)

    @property
    def static(self) -> float:
        return sum(part.static for part in self.components.values())

    @property
    def dynamic(self) -> float:
        return sum(part.dynamic for part in self.components.values())

    @property
    def total(self) -> float:
        return self.static + self.dynamic

    def as_dict(self) -> dict:
        """{total, static, dynamic, components: {path: {static, dynamic, total}}} in J."""
        return {
            "total": self.total,
            "static": self.static,
            "dynamic": self.dynamic,
            "components": {
                path: {"static": e.static, "dynamic": e.dynamic, "total": e.total}
                for path, e in self.components.items()
            },
        }


def component_energy(obj: SimObject, sim_ticks: int) -> ComponentEnergy | None:
    """Energy of one component over sim_ticks, or None if it declares no energy."""
    has_static = hasattr(obj, "static_power")
    dynamic_stat = next((s for s in obj._stats if s.name == "dynamicEnergy"), None)
    if not has_static and dynamic_stat is None:
        return None
    static = 0.0
    if has_static:
        seconds = ticks_to_seconds(sim_ticks)
        static = obj.static_power * seconds
        if hasattr(obj, "active_power") and hasattr(obj, "busy_ticks"):
            busy = ticks_to_seconds(min(obj.busy_ticks(), sim_ticks))
            static = obj.active_power * busy + obj.static_power * (seconds - busy)
    dynamic = _stat_total(dynamic_stat) if dynamic_stat is not None else 0.0
    return ComponentEnergy(static, dynamic)


def _stat_total(stat) -> float:
    """A scalar's value, or a vector's sum (per-bucket dynamic energy)."""
    values = getattr(stat, "values", None)
    return float(values.sum()) if values is not None else float(stat.value)
