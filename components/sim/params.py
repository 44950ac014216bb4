"""Typed parameters with units, defaults and sources, declared on SimObject classes.

A parameter is declared once on the class, gem5 style::

    class Pmem(SimObject):
        read_latency = Latency("305ns", "random read, idle", source="Izraelevitz 2019")

and read on instances as its canonical value (ticks, B/s, bytes, W, J, Hz). The
declaration keeps the human-readable default and its source so that config.json and
docs/parameters.md can show both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from components.sim import units


class ConfigError(ValueError):
    """A configuration problem reported to the user as one line."""


class Param:
    """One typed parameter. Subclasses say how a raw value is parsed, and the range of
    values that describes any hardware at all (``physical``: low, high, as the user
    would write them), so that an absurd --set fails here rather than overflowing the
    clock or memory deep inside a run."""

    kind = "value"
    unit = ""
    physical: tuple[str | None, str | None] = (None, None)

    def __init__(
        self,
        default: Any,
        desc: str,
        source: str = "",
        *,
        check: Callable[[Any], str | None] | None = None,
    ) -> None:
        if not desc:
            raise TypeError("every parameter needs a description")
        self.default = default
        self.desc = desc
        self.source = source
        self.check = check
        self.name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def parse(self, raw: Any) -> Any:
        raise NotImplementedError

    def convert(self, raw: Any, where: str) -> Any:
        """Parse and validate raw, raising ConfigError naming where and the value."""
        try:
            value = self.parse(raw)
        except (units.UnitError, ValueError, TypeError, OverflowError) as exc:
            raise ConfigError(f"{where}: bad value {raw!r}: {exc}") from None
        problem = self._outside_physical(value) or (self.check(value) if self.check else None)
        if problem:
            raise ConfigError(f"{where}: bad value {raw!r}: {problem}")
        return value

    def _outside_physical(self, value) -> str | None:
        low, high = self.physical
        if low is not None and value < type(self).parse(_Unbounded, low):
            return f"must be at least {low} (see {type(self).__name__}.physical)"
        if high is not None and value > type(self).parse(_Unbounded, high):
            return f"must be at most {high} (see {type(self).__name__}.physical)"
        return None

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj._param_values[self.name]

    def __set__(self, obj, raw) -> None:
        obj._param_values[self.name] = self.convert(raw, f"{obj.path}.{self.name}")
        obj._param_raw[self.name] = raw


class Latency(Param):
    kind, unit = "latency", "tick"
    physical = (None, "1s")
    """The slowest time parameter modelled is an SSD page read (16.5 us); op overheads
    are 5-10 us. A second is five orders above: no device, link or runtime the model
    describes, and it keeps an op of 10^6 requests within the int64 tick clock."""

    def parse(self, raw):
        return units.parse_time(raw)


class Bandwidth(Param):
    kind, unit = "bandwidth", "B/s"
    physical = ("1MB/s", None)
    """The slowest bandwidth modelled is the SSD's 0.384 GB/s; 1 MB/s is 384x below it,
    and moves even 1 TB within the int64 tick clock (10^18 ps). No upper bound: an
    unlimited-bandwidth what-if is legitimate, as long as the value is finite."""

    def parse(self, raw):
        return units.parse_bandwidth(raw)


class MemorySize(Param):
    kind, unit = "size", "B"
    physical = (None, "1024TiB")
    """Sizes are of memories, buffers, flits and bursts: the largest the model holds is
    a preset's tables (MLPerf DLRM: ~100 GB); a pebibyte is four orders beyond it and
    keeps byte counts times the model's other factors inside int64."""

    def __init__(
        self, default, desc, source="", *, low: str | None = None, high: str | None = None, **kw
    ) -> None:
        super().__init__(default, desc, source, **kw)
        self.low, self.high = low, high

    def parse(self, raw):
        value = units.parse_size(raw)
        if self.low is not None and value < units.parse_size(self.low):
            raise ValueError(f"must be >= {self.low}")
        if self.high is not None and value > units.parse_size(self.high):
            raise ValueError(f"must be <= {self.high}")
        return value


class Power(Param):
    kind, unit = "power", "W"
    physical = (None, "100kW")
    """The largest power modelled is the GPU's 350 W board power; 100 kW is a whole
    rack of such boards, so a component above it describes no hardware (and its
    energy over a long run would be meaningless)."""

    def parse(self, raw):
        return units.parse_power(raw)


class Energy(Param):
    kind, unit = "energy", "J"
    physical = (None, "1uJ")
    """Energies are per event: a byte, a bit, an operation. The largest modelled is an
    SSD page's 20 nJ per byte; 1 uJ is 50x above it and 10^5 x above DRAM's 130 pJ."""

    def parse(self, raw):
        return units.parse_energy(raw)


class Frequency(Param):
    kind, unit = "frequency", "Hz"
    physical = ("1MHz", None)
    """The slowest clock modelled is the near-memory engine's 250 MHz; 1 MHz is 250x
    below it and keeps a cycle count of 10^12 within the tick clock."""

    def parse(self, raw):
        return units.parse_frequency(raw)


class ComputeRate(Param):
    kind, unit = "compute rate", "FLOP/s"
    physical = ("1GFLOPS", None)
    """The slowest compute modelled is one host core, 59.2 GFLOPS; at 1 GFLOPS a batch
    of RM3 (about 3e10 FLOP: 6 FLOP per MLP parameter per sample, 128 samples) takes
    ~30 s, far inside the int64 tick clock."""

    def parse(self, raw):
        return units.parse_flops(raw)


class Int(Param):
    kind = "integer"
    physical = (None, "1000000000")
    """Integer parameters count hardware (controllers, lanes, queue entries, cores) or
    batches; a billion of anything is beyond every machine modelled, parses exactly,
    and keeps products with other counts inside int64 (a declaration may bound lower)."""

    def __init__(
        self,
        default,
        desc,
        source="",
        *,
        low: int | None = None,
        high: int | None = None,
        unit: str = "",
        **kw,
    ) -> None:
        super().__init__(default, desc, source, **kw)
        self.low, self.high, self.unit = low, high, unit

    def parse(self, raw):
        if isinstance(raw, bool):
            raise ValueError("expected an integer")
        number = float(units.plain_text_number(raw.strip())) if isinstance(raw, str) else raw
        if number != int(number):
            raise ValueError("expected an integer")
        value = int(number)
        _bounds(value, self.low, self.high)
        return value


class Float(Param):
    kind = "number"

    def __init__(
        self,
        default,
        desc,
        source="",
        *,
        low: float | None = None,
        high: float | None = None,
        unit: str = "",
        **kw,
    ) -> None:
        super().__init__(default, desc, source, **kw)
        self.low, self.high, self.unit = low, high, unit

    def parse(self, raw):
        if isinstance(raw, bool):
            raise ValueError("expected a number")
        value = float(units.plain_text_number(raw) if isinstance(raw, str) else raw)
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("must be finite")
        _bounds(value, self.low, self.high)
        return value


class Bool(Param):
    kind = "boolean"

    def parse(self, raw):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")


class Enum(Param):
    kind = "choice"

    def __init__(self, default, desc, source="", *, choices: Sequence[str], **kw) -> None:
        super().__init__(default, desc, source, **kw)
        self.choices = tuple(choices)

    def parse(self, raw):
        text = str(raw)
        if text not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}")
        return text


class _Unbounded:
    """Stands in for a declaration when parsing a physical bound: no declared bounds."""

    low = high = None


def _bounds(value, low, high) -> None:
    if low is not None and value < low:
        raise ValueError(f"must be >= {low}")
    if high is not None and value > high:
        raise ValueError(f"must be <= {high}")


def positive(value) -> str | None:
    """A check for parameters that must be strictly positive."""
    return None if value > 0 else "must be positive"
