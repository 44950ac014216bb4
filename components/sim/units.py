"""Unit-carrying values as gem5 writes them ("305ns", "6.6GB/s", "15W").

Everything is converted to one canonical unit per dimension so that the rest of the
simulator never juggles prefixes: time in integer ticks (1 tick = 1 ps, as in gem5),
bandwidth in bytes per second, sizes in bytes, power in watts, energy in joules,
frequency in hertz. Decimal prefixes (k, M, G, T) mean powers of 1000 and binary ones
(Ki, Mi, Gi, Ti) powers of 1024, for sizes and bandwidths alike, so that "GB/s" is
the 1e9 B/s that datasheets and the paper quote.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

TICKS_PER_SECOND = 10**12
TICKS_PER_NS = 1000
MAX_TICKS = 2**63 - 1
"""The clock's range: ticks are int64 in every numpy array that holds them (~106 days)."""

_NUMBER = r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_PATTERN = re.compile(r"^\s*" + _NUMBER + r"\s*([A-Za-z/]*)\s*$", re.ASCII)
"""ASCII only: Python's \\d and float() also take other scripts' digits ('٣', '３')."""

_DECIMAL = {
    "": 1.0,
    "p": 1e-12,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


class UnitError(ValueError):
    """A value whose number or unit cannot be read for the dimension asked."""


def plain_text_number(text: str) -> str:
    """``text`` if it is written as numbers are typed: ASCII, no '_' separators
    (int() and float() take '1_000', '٣' and '３'); ValueError otherwise."""
    if not text.isascii() or "_" in text:
        raise ValueError(f"{text!r} is not a number written in ASCII digits")
    return text


def _split(text: str | int | float, dimension: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"expected a {dimension}, got a boolean {text!r}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise UnitError(f"{dimension} {str(text)[:40]} is not finite")
        return value, ""
    match = _PATTERN.match(str(text))
    if not match:
        raise UnitError(f"malformed {dimension} {text!r}")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise UnitError(f"{dimension} {text!r} is not finite")
    return value, match.group(2)


def _scaled(
    text, dimension: str, suffixes: tuple[str, ...], allow_binary: bool, bare_unit: str | None
) -> float:
    value, unit = _split(text, dimension)
    if unit == "" and not isinstance(text, str):  # a number, as a parameter reads back
        return _finite(value, dimension, text)
    if unit == "":
        if bare_unit is None:
            raise UnitError(f"{dimension} {text!r} needs a unit (e.g. {suffixes[0]})")
        unit = bare_unit
    for suffix in suffixes:
        if unit.endswith(suffix):
            prefix = unit[: len(unit) - len(suffix)]
            if prefix in _DECIMAL:
                return _finite(value * _DECIMAL[prefix], dimension, text)
            if allow_binary and prefix in _BINARY:
                return _finite(value * _BINARY[prefix], dimension, text)
            raise UnitError(f"unknown unit {unit!r} (prefix {prefix!r}) in {dimension} {text!r}")
    raise UnitError(f"unknown unit {unit!r} in {dimension} {text!r}")


def _finite(value: float, dimension: str, text) -> float:
    """A prefix can overflow a finite number ("1e300GB/s" is 1e309 B/s = inf)."""
    if not math.isfinite(value):
        raise UnitError(f"{dimension} {text!r} is too large (not a finite number)")
    return value


def _in_clock(ticks: int, text) -> int:
    if ticks > MAX_TICKS:
        raise UnitError(f"time {text!r} is beyond the simulator's clock (at most 2^63 ps)")
    return ticks


def _non_negative(value: float, dimension: str, text) -> float:
    if value < 0:
        raise UnitError(f"{dimension} {text!r} must not be negative")
    return value


_TIME_SCALE = {"s": 10**12, "ms": 10**9, "us": 10**6, "ns": 10**3, "ps": 1}


def parse_time(text: str | int | float) -> int:
    """Time as integer ticks (ps). A bare number is taken as ticks, as gem5 does.

    Scaled with exact rationals so that "56183575ms" is exactly 56183575 * 10**9 ticks.
    """
    value, unit = _split(text, "time")
    _non_negative(value, "time", text)
    bare = unit in ("", "t", "tick", "ticks")
    if not bare and unit not in _TIME_SCALE:
        raise UnitError(f"unknown unit {unit!r} in time {text!r} (use s, ms, us, ns, ps)")
    number = (
        Fraction(str(text).strip()[: len(str(text).strip()) - len(unit)].strip())
        if isinstance(text, str)
        else Fraction(text)
    )
    if bare:
        if number.denominator != 1:
            raise UnitError(f"tick count {text!r} must be an integer")
        return _in_clock(int(number), text)
    return _in_clock(int(round(number * _TIME_SCALE[unit])), text)


def parse_bandwidth(text: str | int | float) -> float:
    """Bandwidth in bytes per second ("6.6GB/s", "6.6GiB/s", "64Gbps" = bits)."""
    value, unit = _split(text, "bandwidth")
    if unit.endswith("bps"):
        bits = _scaled(text, "bandwidth", ("bps",), True, None)
        return _non_negative(bits / 8.0, "bandwidth", text)
    return _non_negative(_scaled(text, "bandwidth", ("B/s",), True, None), "bandwidth", text)


def parse_size(text: str | int | float) -> int:
    """Memory size in bytes ("256B", "16KiB", "512GiB"); a bare number is bytes."""
    value = _scaled(text, "size", ("B",), True, "B")
    if value != int(value):
        raise UnitError(f"size {text!r} is not a whole number of bytes")
    return int(_non_negative(value, "size", text))


def parse_power(text: str | int | float) -> float:
    return _non_negative(_scaled(text, "power", ("W",), False, None), "power", text)


def parse_energy(text: str | int | float) -> float:
    return _non_negative(_scaled(text, "energy", ("J",), False, None), "energy", text)


def parse_frequency(text: str | int | float) -> float:
    value = _scaled(text, "frequency", ("Hz",), False, None)
    if value <= 0:
        raise UnitError(f"frequency {text!r} must be positive")
    return value


def parse_flops(text: str | int | float) -> float:
    """Compute throughput in FLOP/s ("35.6TFLOPS")."""
    return _non_negative(
        _scaled(text, "compute rate", ("FLOPS",), False, None), "compute rate", text
    )


def ticks_to_seconds(ticks: int | float) -> float:
    return ticks / TICKS_PER_SECOND


def ticks_to_ms(ticks: int | float) -> float:
    return ticks / 1e9


def seconds_to_ticks(seconds: float) -> int:
    return int(round(seconds * TICKS_PER_SECOND))


def transfer_ticks(nbytes: float, bytes_per_second: float) -> int:
    """Ticks to move nbytes at a bandwidth (rounded up, so no transfer is free)."""
    if nbytes <= 0:
        return 0
    if bytes_per_second <= 0:
        raise UnitError("cannot transfer over a zero bandwidth")
    return int(math.ceil(nbytes * TICKS_PER_SECOND / bytes_per_second))
