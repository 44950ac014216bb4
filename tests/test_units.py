"""Unit parsing: exact conversions, round trips and clear errors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from components.sim import units
from components.sim.units import UnitError


@pytest.mark.parametrize(
    ("text", "ticks"),
    [
        ("305ns", 305_000),
        ("1.5us", 1_500_000),
        ("3ms", 3_000_000_000),
        ("2s", 2 * 10**12),
        ("14.16ns", 14_160),
        ("100ps", 100),
        ("42", 42),
        (7, 7),
        ("0ns", 0),
    ],
)
def test_time_to_ticks(text, ticks):
    assert units.parse_time(text) == ticks


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("6.6GB/s", 6.6e9),
        ("6.6GiB/s", 6.6 * 2**30),
        ("64Gbps", 8e9),
        ("19.2GB/s", 19.2e9),
        ("512MB/s", 512e6),
        ("1KiB/s", 1024.0),
    ],
)
def test_bandwidth(text, value):
    assert units.parse_bandwidth(text) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("256B", 256),
        ("16KiB", 16384),
        ("512GiB", 512 * 2**30),
        ("64GB", 64 * 10**9),
        ("4096", 4096),
    ],
)
def test_size(text, value):
    assert units.parse_size(text) == value


def test_other_dimensions():
    assert units.parse_power("15W") == 15.0
    assert units.parse_power("350W") == 350.0
    assert units.parse_frequency("1.7GHz") == pytest.approx(1.7e9)
    assert units.parse_energy("15pJ") == pytest.approx(15e-12)
    assert units.parse_flops("35.6TFLOPS") == pytest.approx(35.6e12)


@pytest.mark.parametrize(
    ("parser", "text", "needle"),
    [
        (units.parse_time, "-3ns", "negative"),
        (units.parse_time, "3 parsecs", "unit"),
        (units.parse_time, "fast", "malformed"),
        (units.parse_bandwidth, "6.6GB", "unit"),
        (units.parse_size, "1.5B", "whole"),
        (units.parse_frequency, "0Hz", "positive"),
        (units.parse_time, "1.5", "integer"),
        (units.parse_power, "15", "needs a unit"),
        (units.parse_size, "3XiB", "prefix"),
        (units.parse_time, "nanns", "malformed"),
    ],
)
def test_errors_name_the_problem(parser, text, needle):
    with pytest.raises(UnitError, match=needle):
        parser(text)


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["ps", "ns", "us", "ms"]))
def test_time_scales_exactly(count, unit):
    scale = {"ps": 1, "ns": 10**3, "us": 10**6, "ms": 10**9}[unit]
    assert units.parse_time(f"{count}{unit}") == count * scale


@given(
    st.floats(min_value=0.001, max_value=1e4, allow_nan=False),
    st.sampled_from([("GB/s", 1e9), ("MB/s", 1e6), ("GiB/s", 2.0**30)]),
)
def test_bandwidth_round_trip(value, unit):
    suffix, scale = unit
    assert units.parse_bandwidth(f"{value!r}{suffix}") == pytest.approx(value * scale)


@given(st.integers(min_value=1, max_value=10**12), st.floats(min_value=1e3, max_value=1e12))
def test_transfer_never_free_and_monotone(nbytes, bandwidth):
    ticks = units.transfer_ticks(nbytes, bandwidth)
    assert ticks >= 1
    assert ticks >= nbytes / bandwidth * units.TICKS_PER_SECOND - 1e-6 * ticks
    assert units.transfer_ticks(nbytes * 2, bandwidth) >= ticks
