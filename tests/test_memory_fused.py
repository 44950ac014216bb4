"""The fused stream kernels (components/memory/fused.py) give what the numpy
composition in components/memory/digest.py gives, element for element, floats bit for
bit, on random streams (hypothesis) whose requests may span lines, over geometries with
and without power-of-two sizes. Without numba both are the numpy path: skipped.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path

from components.memory import digest, fused, kernels
from components.memory.memo import DigestMemo
from components.memory.streams import Geometry

pytestmark = pytest.mark.skipif(not kernels.COMPILED, reason="numba not installed")


@st.composite
def request_streams(draw):
    """Requests over a few controllers: repeats, runs and line-spanning sizes."""
    unit = draw(st.sampled_from([64, 80, 96, 256, 4096]))  # 80: sub-blocks not whole
    geometry = Geometry(unit, unit * draw(st.sampled_from([1, 2, 3, 16])), draw(st.integers(1, 6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(1, 300))
    addr = rng.integers(0, draw(st.integers(1, 64)) * unit, count)
    if draw(st.booleans()):
        addr = np.sort(addr)  # increasing streams: long runs in one entry
    size = draw(st.sampled_from([1, 8, 128, 136, unit, 3 * unit + 5]))
    return addr.astype(np.int64), size, geometry, draw(st.integers(0, 9))


@st.composite
def monotone_streams(draw):
    """Requests whose lines never go down (an update's sorted rows, a log's appends):
    each starts in the line the one before ends in or later, so requests share lines,
    repeat one, or span several."""
    unit = draw(st.sampled_from([64, 80, 96, 256, 4096]))
    geometry = Geometry(unit, unit * draw(st.sampled_from([1, 2, 3, 16])), draw(st.integers(1, 6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    size = draw(st.sampled_from([1, 8, 128, 136, unit, 3 * unit + 5]))
    start = int(rng.integers(0, 8 * unit))
    addr = []
    for _ in range(draw(st.integers(1, 300))):
        addr.append(start)
        last_line = (start + size - 1) // unit
        start = max(start, last_line * unit) + int(rng.integers(0, 2 * unit))
    return np.array(addr, dtype=np.int64), size, geometry, draw(st.integers(0, 9))


@st.composite
def contiguous_streams(draw):
    """Requests that tile one range in order (a log's entries, DMA bursts): each starts
    where the one before ends, so they share lines, fill them or span several."""
    unit = draw(st.sampled_from([64, 80, 96, 256, 4096]))
    geometry = Geometry(unit, unit * draw(st.sampled_from([1, 2, 3, 16])), draw(st.integers(1, 6)))
    size = draw(st.sampled_from([1, 8, 128, 136, unit, 3 * unit + 5]))
    start = draw(st.integers(0, 8 * unit))
    addr = start + size * np.arange(draw(st.integers(1, 300)), dtype=np.int64)
    return addr, size, geometry, draw(st.integers(0, 9))


@st.composite
def row_gathers(draw):
    """Rows of ``size`` bytes in random order, each within one line (a gather)."""
    unit = draw(st.sampled_from([64, 96, 256, 4096]))
    size = draw(st.sampled_from([d for d in (1, 8, 32, 64, 128) if unit % d == 0]))
    geometry = Geometry(unit, unit * draw(st.sampled_from([1, 2, 3, 16])), draw(st.integers(1, 6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = rng.integers(0, draw(st.integers(1, 4096)), draw(st.integers(1, 300)))
    return rows.astype(np.int64) * size, size, geometry, draw(st.integers(0, 9))


def _same(got, want, name):
    assert (got is None) == (want is None), name
    if got is not None:
        assert got.dtype == want.dtype, name
        assert got.tobytes() == want.tobytes(), name


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(request_streams(), row_gathers(), monotone_streams()), st.booleans(), st.booleans()
)
def test_read_digest_matches_numpy(case, lines, missed):
    addr, size, geometry, entries = case
    got = digest.digest_reads(addr, size, geometry, entries, lines, missed)
    want = numpy_path(
        kernels, lambda: digest.digest_reads(addr, size, geometry, entries, lines, missed)
    )
    for name in ("misses", "hits", "accesses", "requested", "line", "missed_ctrl", "missed_local"):
        _same(getattr(got, name), getattr(want, name), name)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(request_streams(), monotone_streams(), contiguous_streams()),
    st.integers(0, 2**32 - 1),
)
def test_write_digest_matches_numpy(case, seed):
    addr, size, geometry, entries = case
    entries = max(entries, 1)  # without a buffer the WPQ merges (no fused kernel)
    got = digest.digest_writes(addr, size, geometry, entries, 4)
    want = numpy_path(kernels, lambda: digest.digest_writes(addr, size, geometry, entries, 4))
    for name in ("line", "ctrl", "rank", "full", "writes_c", "rmw_c", "count_c", "covered_c"):
        _same(getattr(got, name), getattr(want, name), name)
    rng = np.random.default_rng(seed)
    n = geometry.controllers
    free_c = rng.integers(0, 5, n).astype(float)
    head_c = np.maximum(got.writes_c - free_c, 0)
    accepted = got.accept(head_c, free_c)
    _same(accepted, numpy_path(kernels, lambda: want.accept(head_c, free_c)), "accept")
    keys = digest.drain_keys(got.rank, got.ctrl, head_c, got.writes_c, free_c)
    args = (want.rank, want.ctrl, head_c, want.writes_c, free_c)
    _same(keys, numpy_path(kernels, lambda: digest.drain_keys(*args)), "key")


@settings(max_examples=200, deadline=None)
@given(st.one_of(monotone_streams(), request_streams(), contiguous_streams()))
def test_monotone_writes_match_the_buffer_pass(case):
    """A stream whose lines never go down takes the run-of-one-line pass, one that tiles
    a range the pass over its lines; each gives the arrays the per-slot buffer pass
    gives (``any_order``), whatever the buffer size."""
    addr, size, geometry, entries = case
    shape = (geometry.unit, geometry.interleave // geometry.unit, geometry.controllers)
    got = fused.line_writes(addr, size, *shape, max(entries, 1))
    want = fused.line_writes(addr, size, *shape, max(entries, 1), True)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        _same(a, b, str(index))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 50), st.integers(1, 300))
def test_line_span_is_the_first_and_last_line(seed, size, count):
    """The one-pass bounds against numpy's min and max, negative addresses included."""
    rng = np.random.default_rng(seed)
    addr = rng.integers(-(2**40), 2**40, count)
    size += 1
    for unit in (64, 80, 256):
        want = (int(addr.min()) // unit, (int(addr.max()) + size - 1) // unit)
        assert digest.line_span(addr, size, unit) == want
        assert numpy_path(kernels, lambda unit=unit: digest.line_span(addr, size, unit)) == want
    assert digest.line_span(addr[:0], size, 64) == (0, -1)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 300), st.integers(1, 300))
def test_held_max_matches_numpy(seed, waiting_size, lines):
    rng = np.random.default_rng(seed)
    waiting = np.unique(rng.integers(0, 400, waiting_size))
    keys = rng.random(waiting.size) * 2
    line = rng.integers(0, 500, lines)
    stalled, reference = np.zeros(lines, dtype=bool), np.zeros(lines, dtype=bool)
    got = digest.held_max(waiting, keys, line, stalled)
    want = numpy_path(kernels, lambda: digest.held_max(waiting, keys, line, reference))
    assert got == want
    np.testing.assert_array_equal(stalled, reference)


def test_accept_keeps_the_shifted_running_maximum():
    """Acceptance is the running maximum of (v + 2c) - 2c per controller c, as the
    numpy definition computes it, not of v: the two differ in the last bits."""
    rank = np.array([0, 1, 2])
    ctrl = np.array([3, 3, 3])
    head = np.array([0.0, 0.0, 0.0, 10.0 / 3])
    free = np.zeros(4)
    got = fused.accept_progress(rank, ctrl, np.arange(1, 4), head, free)
    plain = np.maximum.accumulate((rank + 1) / head[3])
    shifted = np.maximum.accumulate((rank + 1) / head[3] + 6.0) - 6.0
    assert got.tobytes() == shifted.tobytes() != plain.tobytes()


def test_buffered_writes_on_a_known_stream():
    """Independent expectation: one controller, 2 entries, whole 256 B lines 0, 2, 2,
    1, 1, 3 map to entries 0, 0, 0, 1, 1, 1: four media writes, in first-access order,
    the repeats combined."""
    geometry = Geometry(256, 256, 1)
    lines = np.array([0, 2, 2, 1, 1, 3], dtype=np.int64)
    got = digest.digest_writes(lines * 256, 256, geometry, 2, 4)
    np.testing.assert_array_equal(got.line, [0, 2, 1, 3])
    np.testing.assert_array_equal(got.rank, [0, 1, 2, 3])
    assert got.full.all() and got.writes_c.tolist() == [4.0] and got.count_c.tolist() == [6]


@settings(max_examples=100, deadline=None)
@given(request_streams(), request_streams())
def test_a_memo_gives_each_read_stream_its_own_counts(first, second):
    """A device's memo of read counts (DigestMemo): a read-only stream asked again,
    after others, gets its counts without a pass; any other stream, size or geometry
    (or a writable array, which may have changed) gets its own."""
    memo = DigestMemo()
    streams = []
    for addr, size, geometry, entries in (first, second):
        addr.flags.writeable = False
        streams.append((addr, size, geometry, entries))
    streams.append((streams[0][0], streams[0][1] + 1, *streams[0][2:]))  # same array, size + 1
    streams.append((streams[0][0].copy(), *streams[0][1:]))  # same values, writable
    for _ in range(2):
        for addr, size, geometry, entries in streams:
            got = digest.digest_reads(addr, size, geometry, entries, False, False, memo)
            want = digest.digest_reads(addr, size, geometry, entries, False, False)
            for name in ("misses", "hits", "accesses", "requested"):
                _same(getattr(got, name), getattr(want, name), name)


def test_the_memo_skips_the_pass_only_for_the_same_read_only_array(monkeypatch):
    """The second read of one read-only array costs no kernel call; a writable array
    changed in place between two reads gets its new counts."""
    calls = []
    kernel = fused.read_summary
    monkeypatch.setattr(fused, "read_summary", lambda *a: calls.append(1) or kernel(*a))
    geometry, memo = Geometry(256, 4096, 4), DigestMemo()
    addr = np.arange(0, 256 * 64, 256, dtype=np.int64)
    addr.flags.writeable = False
    for _ in range(3):
        digest.digest_reads(addr, 128, geometry, 8, False, False, memo)
    assert len(calls) == 1
    writable = addr.copy()
    before = digest.digest_reads(writable, 128, geometry, 8, False, False, memo)
    writable[:] = 0  # every request on one line: hits after the first
    after = digest.digest_reads(writable, 128, geometry, 8, False, False, memo)
    assert before.hits.sum() == 0 and after.hits.sum() == writable.size - 1
    assert len(calls) == 3
