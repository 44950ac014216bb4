"""gem5-style statistics: scalars, averages, vectors and formulas with units.

Stats are registered on a SimObject under its hierarchical path and dumped in gem5's
text format (``name  value  # description (Unit)``) and as JSON. Values are plain
Python numbers so that two runs with the same seed dump byte-identical files.
"""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Callable, Iterator, Sequence

import numpy as np

WHOLE_UNITS = ("Byte", "Count", "Tick")  # a stopped stage serves these in whole units
_ledgers: list[list] = []  # open ledgers of served-work bookings, innermost last


@contextlib.contextmanager
def ledger() -> Iterator[list]:
    """Collect the served-work stats booked inside the block (a stage being built):
    if the stage is stopped early, ``refund`` takes back what it did not serve."""
    entries: list = []
    _ledgers.append(entries)
    try:
        yield entries
    finally:
        _ledgers.pop()


def refund(entries: list, progress: float) -> None:
    """Scale the bookings of a stage stopped at ``progress`` of its work to what it
    served (bytes, counts and ticks stay whole: the unserved share is rounded)."""
    for stat, index, amount in entries:
        cut = amount * (1.0 - progress)
        if stat.unit in WHOLE_UNITS:
            cut = round(cut)
        if index is None:
            stat.value -= cut
        else:
            stat.values[index] -= cut


def _book(stat: Stat, index: int | None, amount) -> None:
    if _ledgers and stat.served:
        _ledgers[-1].append((stat, index, amount))


def add_each(stats: Sequence[Scalar], amounts: Sequence) -> None:
    """``stat += amount`` pairwise, booked as ``+=`` books it, without rebinding an
    attribute per stat: a device adds several counters per controller to every stream."""
    for stat, amount in zip(stats, amounts, strict=True):
        stat.value += amount
        _book(stat, None, amount)


class Stat:
    def __init__(self, name: str, desc: str, unit: str, served: bool = False) -> None:
        self.name, self.desc, self.unit = name, desc, unit
        self.served = served  # counts work a stopped stage may only partly serve

    def rows(self, prefix: str) -> list[tuple[str, float, str, str]]:
        raise NotImplementedError


class Scalar(Stat):
    """A counter or a value set once (bytes read, ticks busy)."""

    def __init__(self, name: str, desc: str, unit: str, served: bool = False) -> None:
        super().__init__(name, desc, unit, served)
        self.value: float = 0

    def __iadd__(self, amount: float) -> Scalar:
        self.value += amount
        _book(self, None, amount)
        return self

    def set(self, value: float) -> None:
        self.value = value

    def rows(self, prefix):
        return [(f"{prefix}{self.name}", self.value, self.desc, self.unit)]


class Average(Stat):
    """Mean of samples (gem5 Average); also dumps the sample count."""

    def __init__(self, name: str, desc: str, unit: str) -> None:
        super().__init__(name, desc, unit)
        self.total = 0.0
        self.count = 0

    def sample(self, value: float, count: int = 1) -> None:
        self.total += float(value) * count
        self.count += count

    @property
    def value(self) -> float:
        return self.total / self.count if self.count else 0.0

    def rows(self, prefix):
        return [(f"{prefix}{self.name}", self.value, self.desc, self.unit)]


class Vector(Stat):
    """Named buckets (per controller, per op); dumps each bucket and the total."""

    def __init__(
        self, name: str, desc: str, unit: str, labels: Sequence[str], served: bool = False
    ) -> None:
        super().__init__(name, desc, unit, served)
        self.labels = list(labels)
        self.values = np.zeros(len(self.labels), dtype=np.float64)

    def add(self, amounts) -> None:
        self.values += np.asarray(amounts, dtype=np.float64)

    def add_at(self, index: int, amount: float) -> None:
        """One bucket's increment (booked as served work where the vector counts it)."""
        self.values[index] += amount
        _book(self, index, amount)

    def __getitem__(self, label: str) -> float:
        return float(self.values[self.labels.index(label)])

    def rows(self, prefix):
        out = [
            (f"{prefix}{self.name}::{label}", _plain(v), self.desc, self.unit)
            for label, v in zip(self.labels, self.values, strict=True)
        ]
        out.append((f"{prefix}{self.name}::total", _plain(self.values.sum()), self.desc, self.unit))
        return out


class Formula(Stat):
    """A value derived from other stats when dumped (bandwidth = bytes / time)."""

    def __init__(self, name: str, desc: str, unit: str, fn: Callable[[], float]) -> None:
        super().__init__(name, desc, unit)
        self.fn = fn

    @property
    def value(self) -> float:
        return self.fn()

    def rows(self, prefix):
        return [(f"{prefix}{self.name}", self.value, self.desc, self.unit)]

    def __deepcopy__(self, memo: dict) -> Formula:
        """A copied component tree's formula reads the copy's stats: a lambda's closure
        (``lambda: self.bytes.value / ...``) is copied through ``memo`` too, where
        ``copy`` would share the function and so read the original's stats."""
        clone = Formula(self.name, self.desc, self.unit, self.fn)
        memo[id(self)] = clone  # the closure's owner may lead back here
        fn = self.fn
        if isinstance(fn, types.FunctionType) and fn.__closure__:
            cells = tuple(
                types.CellType(copy.deepcopy(cell.cell_contents, memo)) for cell in fn.__closure__
            )
            clone.fn = types.FunctionType(
                fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells
            )
        else:
            clone.fn = copy.deepcopy(fn, memo)
        return clone


def _plain(value) -> float | int:
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def format_value(value) -> str:
    """Print a stat value the way gem5 does: integers bare, floats with 6 decimals."""
    value = _plain(value)
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "nan"
    return f"{value:.6f}"


def format_rows(rows: list[tuple[str, float, str, str]]) -> str:
    lines = ["", "---------- Begin Simulation Statistics ----------"]
    for name, value, desc, unit in rows:
        lines.append(f"{name:<60s} {format_value(value):>20s}  # {desc} ({unit})")
    lines += ["", "---------- End Simulation Statistics   ----------", ""]
    return "\n".join(lines)
