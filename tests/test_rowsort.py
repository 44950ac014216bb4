"""The compiled distinct rows and previous-batch slots (components/rowsort.py) equal
their numpy definitions; without numba they are those definitions (skipped)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path

from components import compiled, rowsort

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="numba not installed")


@pytest.mark.parametrize("numpy_sort", [True, False])  # numpy's sort, or the radix sort
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 2000), st.integers(0, 62))
def test_unique_counts_match_numpy(numpy_sort, seed, size, bits):
    values = np.random.default_rng(seed).integers(0, 2**bits + 1, size)
    rowsort.NUMPY_SORT_FASTER, chosen = numpy_sort, rowsort.NUMPY_SORT_FASTER
    try:
        got = rowsort.unique_counts(values)
    finally:
        rowsort.NUMPY_SORT_FASTER = chosen
    want = numpy_path(compiled, lambda: rowsort.unique_counts(values))
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def _radix_sorts_as_numpy(values: np.ndarray) -> None:
    """With the radix sort chosen, unique_counts gives np.unique's arrays."""
    rowsort.NUMPY_SORT_FASTER, chosen = False, rowsort.NUMPY_SORT_FASTER
    try:
        got = rowsort.unique_counts(values)
    finally:
        rowsort.NUMPY_SORT_FASTER = chosen
    for a, b in zip(got, np.unique(values, return_counts=True), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bits", [20, 27, 40])
def test_arrays_past_the_cache_sort_by_buckets_alike(bits):
    """Past LSD_MAX_VALUES ids the radix sort spreads them into buckets first."""
    rng = np.random.default_rng(bits)
    _radix_sorts_as_numpy(rng.integers(0, 1 << bits, rowsort.LSD_MAX_VALUES + 999))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 2000))
def test_negative_ids_are_sorted_by_numpy_alike(seed, size):
    _radix_sorts_as_numpy(np.random.default_rng(seed).integers(-(2**40), 2**40, size))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 500), st.integers(1, 500), st.booleans())
def test_previous_matches_count_as_numpy(seed, before, after, weighted):
    """The slots and matches are numpy's searchsorted and comparison; the reused rows
    and their lookups come out of the merge: numpy's sum and dot."""
    rng = np.random.default_rng(seed)
    previous = np.unique(rng.integers(0, 800, before))
    unique = np.unique(rng.integers(0, 1000, after))
    counts = rng.integers(1, 100, unique.size) if weighted else None
    got = rowsort.previous_matches(previous, unique, counts)
    want = numpy_path(compiled, lambda: rowsort.previous_matches(previous, unique, counts))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2:] == want[2:] == (int(want[1].sum()), int(counts @ want[1]) if weighted else 0)


def test_the_first_sort_chooses_the_faster_way_once(monkeypatch):
    """Unchosen, the first int64 sort times both ways and keeps the choice; the arrays
    are numpy's whichever way wins."""
    timed = []

    def faster() -> bool:
        timed.append(True)
        return False

    monkeypatch.setattr(rowsort, "NUMPY_SORT_FASTER", None)
    monkeypatch.setattr(rowsort, "_numpy_sort_is_faster", faster)
    values = np.random.default_rng(1).integers(0, 1 << 27, 5000)
    for _ in range(2):
        got = rowsort.unique_counts(values)
        want = np.unique(values, return_counts=True)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    assert timed == [True] and rowsort.NUMPY_SORT_FASTER is False


@pytest.mark.parametrize("slowed", ["numpy", "radix"])
def test_the_timing_picks_the_sort_that_is_not_slowed(monkeypatch, slowed):
    def slow(run):
        def slowed_run(*args):
            time.sleep(0.05)
            return run(*args)

        return slowed_run

    if slowed == "numpy":
        monkeypatch.setattr(rowsort, "np", SimpleNamespace(**{**vars(np), "sort": slow(np.sort)}))
    else:
        monkeypatch.setattr(rowsort, "_radix_unique_counts", slow(rowsort._radix_unique_counts))
    assert rowsort._numpy_sort_is_faster() is (slowed == "radix")
