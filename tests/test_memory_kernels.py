"""The compiled stream kernels return exactly what streams.py's numpy definitions do.

Random streams (hypothesis) go through both; every output must be equal element for
element, floats bit for bit. Without numba the kernels are the numpy path itself and
these tests are skipped. A mutant of each kernel's rule must be caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.memory import kernels, streams
from components.memory.streams import Geometry, Lines

pytestmark = pytest.mark.skipif(not kernels.COMPILED, reason="numba not installed")


@st.composite
def line_streams(draw):
    """Lines of a stream over a few controllers, with repeats and runs (buffer hits)."""
    size = draw(st.integers(1, 300))
    span = draw(st.integers(1, 64))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    line = rng.integers(0, span, size)
    if draw(st.booleans()):
        line = np.sort(line)  # increasing streams: long runs in one entry
    geometry = Geometry(256, 256 * draw(st.sampled_from([1, 4, 16])), draw(st.integers(1, 6)))
    return line, geometry, draw(st.integers(1, 9))


@settings(max_examples=150, deadline=None)
@given(line_streams(), st.integers(0, 2**32 - 1))
def test_write_episodes_kernel_matches_numpy(case, seed):
    line, geometry, entries = case
    rng = np.random.default_rng(seed)
    lo = rng.integers(0, 256, line.size)
    hi = np.minimum(lo + rng.integers(1, 257, line.size), 256)
    ctrl, local = geometry.ctrl(line), geometry.local(line)
    hit, episode, order = streams.buffer_hits(line, ctrl, local, entries, True)
    lines = Lines(np.arange(line.size), line, lo, hi, ctrl, local, hit, episode, order)
    got = kernels.write_episodes(lo, hi, episode, line, ctrl, 256)
    want = streams._write_episodes(lines, 256)
    for a, b in zip(got, (want.line, want.ctrl, want.rank, want.full), strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 400), st.integers(1, 8))
def test_rank_kernel_matches_numpy(seed, size, groups):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, groups, size)
    np.testing.assert_array_equal(
        kernels.rank_in_group(group), streams._rank_in_group(group, groups)
    )


def test_streams_without_numba_give_the_same_lines(monkeypatch):
    """The fallback a fresh install without numba takes (COMPILED False) splits a write
    stream into the same lines, hits and episodes as the compiled path."""
    rng = np.random.default_rng(7)
    addr = np.sort(rng.integers(0, 1 << 16, 500)) * 8
    geometry = Geometry(256, 4096, 4)
    compiled = streams.split_lines(addr, 136, geometry, 16, 32, True)
    monkeypatch.setattr(kernels, "COMPILED", False)
    fallback = streams.split_lines(addr, 136, geometry, 16, 32, True)
    for name in ("line", "lo", "hi", "ctrl", "local", "hit", "episode", "order"):
        np.testing.assert_array_equal(getattr(compiled, name), getattr(fallback, name))
    got, want = (streams.write_episodes(x, 256) for x in (compiled, fallback))
    for name in ("line", "ctrl", "rank", "full"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 1 << 20), min_size=1, max_size=200),
    st.integers(1, 1000),
    st.sampled_from([64, 96, 256, 4096]),  # 96: not a power of two (no shifts)
    st.sampled_from([1, 2, 3, 16]),
    st.integers(1, 6),
    st.booleans(),
)
def test_split_kernel_matches_numpy(addr, size, unit, chunks, controllers, writes):
    """The compiled split (lines, byte ranges, controllers, local lines, buffer hits)
    against split_lines' numpy definition, on requests that may span lines."""
    addr = np.array(addr, dtype=np.int64)
    geometry = Geometry(unit, unit * chunks, controllers)
    compiled = streams._split_compiled(addr, size, geometry, 8, 4, writes)
    streams.kernels.COMPILED = False
    try:
        reference = streams.split_lines(addr, size, geometry, 8, 4, writes)
    finally:
        streams.kernels.COMPILED = True
    for name in ("request", "line", "lo", "hi", "ctrl", "local", "hit", "episode", "order"):
        got, want = getattr(compiled, name), getattr(reference, name)
        assert (got is None) == (want is None), name
        if got is not None:
            np.testing.assert_array_equal(got, want, err_msg=name)
