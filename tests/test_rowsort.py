"""The compiled distinct rows and previous-batch slots (components/memory/rowsort.py) equal
their numpy definitions; without numba they are those definitions (skipped)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path

from components import compiled
from components.memory import rowsort

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="numba not installed")


class _Chosen(dict):
    """One sort chosen for every size class (as if timed)."""

    def __init__(self, numpy_sort: bool) -> None:
        super().__init__()
        self.numpy_sort = numpy_sort

    def get(self, size_class, default=None):
        return self.numpy_sort


@pytest.mark.parametrize("numpy_sort", [True, False])  # numpy's sort, or the radix sort
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 2000), st.integers(0, 62))
def test_unique_counts_match_numpy(numpy_sort, seed, size, bits):
    values = np.random.default_rng(seed).integers(0, 2**bits + 1, size)
    rowsort.NUMPY_SORT_FASTER, chosen = _Chosen(numpy_sort), rowsort.NUMPY_SORT_FASTER
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
    rowsort.NUMPY_SORT_FASTER, chosen = _Chosen(False), rowsort.NUMPY_SORT_FASTER
    try:
        got = rowsort.unique_counts(values)
    finally:
        rowsort.NUMPY_SORT_FASTER = chosen
    _assert_numpy_unique(values, got)


def _assert_numpy_unique(values: np.ndarray, got: tuple[np.ndarray, np.ndarray]) -> None:
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


def _slowed(run):
    def slowed_run(*args):
        time.sleep(0.02)
        return run(*args)

    return slowed_run


@pytest.mark.parametrize("slowed", ["numpy", "radix"])
def test_each_size_class_is_timed_on_its_first_arrays_then_keeps_the_faster_sort(
    monkeypatch, slowed
):
    """A size class's first 2 x TIMINGS arrays are sorted each way in turn, once each,
    timed; the way not slowed is then kept for the class alone. The arrays are numpy's
    whichever way runs."""
    monkeypatch.setattr(rowsort, "NUMPY_SORT_FASTER", {})
    monkeypatch.setattr(rowsort, "_trials", {})
    calls = {"numpy": 0, "radix": 0}

    def counted(name, run):
        def counted_run(*args):
            calls[name] += 1
            return run(*args)

        return _slowed(counted_run) if name == slowed else counted_run

    fake_np = SimpleNamespace(**{**vars(np), "sort": counted("numpy", np.sort)})
    monkeypatch.setattr(rowsort, "np", fake_np)
    monkeypatch.setattr(
        rowsort, "_radix_unique_counts", counted("radix", rowsort._radix_unique_counts)
    )
    rng = np.random.default_rng(1)
    timings = rowsort.TIMINGS
    for size in [5000, 6000] * timings + [700] * (2 * timings) + [4200, 8000]:
        values = rng.integers(0, 1 << 27, size)
        _assert_numpy_unique(values, rowsort.unique_counts(values))
    assert rowsort.NUMPY_SORT_FASTER == {13: slowed == "radix", 10: slowed == "radix"}
    kept = {"numpy": 2 * (slowed == "radix"), "radix": 2 * (slowed == "numpy")}
    assert calls == {name: 2 * timings + kept[name] for name in calls}


def test_negative_ids_are_sorted_by_numpy_and_never_decide_a_class(monkeypatch):
    """The radix sort refuses negative ids: such arrays are sorted numpy's way, and a
    refusal is not a timing."""
    monkeypatch.setattr(rowsort, "NUMPY_SORT_FASTER", {})
    monkeypatch.setattr(rowsort, "_trials", {})
    rng = np.random.default_rng(2)
    for _ in range(2 * rowsort.TIMINGS + 1):
        values = rng.integers(-(2**40), 2**40, 3000)
        _assert_numpy_unique(values, rowsort.unique_counts(values))
    assert rowsort.NUMPY_SORT_FASTER == {}
