"""components/memory/lru.py: the vector cache's LRU against the sort-everything
reference (tests/lru_oracle.py), op for op, and its cost against the op, not the cache."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from components.memory import SsdWithCache
from components.memory.lru import COMPACT_FLOOR, LruRows
from tests.lru_oracle import SortedLru


def _ops(seed: int, ops: int, rows: int, skew: float):
    """Ops of random sizes over ``rows`` rows, skewed towards low rows."""
    rng = np.random.default_rng(seed)
    for _ in range(ops):
        size = int(rng.integers(0, 3 * rows // 2 + 2))
        yield (rows * rng.random(size) ** skew).astype(np.int64)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 400),
    st.integers(1, 500), st.floats(1, 4), st.booleans(), st.sampled_from([0, 3, 1 << 16]),
)  # fmt: skip
def test_matches_the_sorted_reference_op_for_op(seed, ops, rows, capacity, skew, bounded, floor):
    """Every hit and the resident set after every op, with compaction as often as
    possible (floor 0), now and then, and never."""
    lru, reference = LruRows(), SortedLru()
    lru.bound, lru.floor = (rows if bounded else None), floor
    for n, op in enumerate(_ops(seed, ops, rows, skew)):
        hits = reference.hits(op)
        if n % 2:  # a read: hits and use in one call
            assert np.array_equal(lru.access(op, capacity), hits)
        else:  # hits from the residency, then a use alone (as writes and warming)
            first = np.zeros(op.size, dtype=bool)
            first[np.unique(op, return_index=True)[1]] = True
            assert np.array_equal(lru.resident(op) | ~first, hits)
            lru.touch(op, capacity)
        reference.touch(op, capacity)
        assert np.array_equal(lru.resident_rows(), reference.rows)
        assert lru.count == reference.rows.size
        assert lru.tail - lru.head <= 1.5 * lru.count + floor


def test_the_log_stays_within_one_and_a_half_times_the_resident_rows():
    """Reuse without eviction leaves dead entries; compaction bounds them."""
    lru = LruRows()
    hot = np.arange(1000, dtype=np.int64)
    for _ in range(400):
        lru.touch(hot, 10**6)
    assert lru.tail - lru.head <= 1.5 * lru.count + COMPACT_FLOOR


def test_eviction_scans_about_what_it_drops():
    """A cache far larger than an op: each op passes over about the op's log entries,
    not the cache's, so a run's cost follows what it touches."""
    lru, rng, scanned = LruRows(), np.random.default_rng(3), []
    alive = lru._alive

    def counted(start, stop):
        scanned.append(stop - start)
        return alive(start, stop)

    lru._alive = counted
    for _ in range(300):
        lru.touch(rng.integers(0, 4_000_000, 2000), 200_000)
    assert lru.count == 200_000
    assert max(scanned) <= 4 * 2000


def test_off_grid_rows_are_refused():
    dev = SsdWithCache()
    dev.read(np.array([0, 128], dtype=np.int64), 128)
    try:
        dev.read(np.array([64], dtype=np.int64), 128)
    except ValueError as exc:
        assert "128 B grid" in str(exc)
    else:
        raise AssertionError("an address between rows was accepted")


def test_rows_outside_the_cached_range_go_to_the_ssd_alone():
    dev = SsdWithCache()
    dev.hold(0, 128 * 1000)
    log = np.full(3, 10**6, dtype=np.int64)  # a log word read thrice
    dev.read(log, 8)
    dev.read(log, 8)
    assert (dev.hits.value, dev.misses.value) == (0, 6)
    assert dev.resident_addresses().size == 0
