"""A batch's distinct rows and their match in the previous batch, compiled.

Every batch sorts its ~10^5-10^6 row ids to find the distinct rows and their counts,
then looks each up among the previous batch's: numpy's comparison sort and binary
searches took a fifth of a simulated batch's CPU time. Where numpy sorts with SIMD
(x86-simd-sort) its sort is the fastest, and one pass counts the runs; elsewhere, row
ids being non-negative and below the model's total rows, a radix sort (a pass on the
top bits, then 11-bit digits within each bucket, in cache) sorts them in a few linear
passes. Two sorted arrays match in one merge. The results are the same arrays as the
numpy definitions here (tests/test_rowsort.py); which sort runs is measured once per
process. Compiled with numba and cached on disk where available.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from components import compiled

DIGIT_BITS = 11
MAX_TOP_BITS = 16  # buckets of the first pass at most 2**16 (ids of any size)

NUMPY_SORT_FASTER: bool | None = None
"""Whether numpy's sort beats the radix sort on this machine; None until the first
sort measures it (_numpy_sort_is_faster)."""
CALIBRATION_IDS = 1 << 16  # row ids each way is timed on (~1-4 ms each)


def _numpy_sort_is_faster() -> bool:
    """Time both ways on the same row-like ids (the best of 3 each). The CPU's flags do
    not tell: numpy sorts int64 with SIMD (x86-simd-sort) on some AVX-512 CPUs and not
    on others with the same flags. RM1's 205k row ids: ~1.0 ms against the radix
    sort's ~3 ms on one AVX-512 VM, 13.9 against 4.0 ms on an AMD EPYC (Zen 4) VM.
    Both give the same arrays, so the choice changes speed only."""
    bits = 27  # RM1's 80M rows
    ids = np.random.default_rng(0).integers(0, 1 << bits, CALIBRATION_IDS)

    def best(sort: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            start = time.perf_counter()
            sort()
            times.append(time.perf_counter() - start)
        return min(times)

    return best(lambda: _runs(np.sort(ids))) < best(lambda: _radix_unique_counts(ids, bits))


@compiled.kernel
def _radix_unique_counts(values, bits):  # pragma: no cover - compiled
    """Sorted distinct values (below 2**bits) and their counts: one counting pass on
    the bits above the lowest two DIGIT_BITS digits spreads the values into buckets
    (row ids: a few thousand each, in cache), each then sorted by LSD radix on those
    two digits."""
    size = values.size
    top = min(max(bits - 2 * DIGIT_BITS, 0), MAX_TOP_BITS)  # two digits left for row ids
    low_bits = bits - top
    bounds = np.zeros((1 << top) + 1, dtype=np.int64)
    for i in range(size):
        bounds[(values[i] >> low_bits) + 1] += 1
    for b in range(1 << top):
        bounds[b + 1] += bounds[b]
    fill = bounds[:-1].copy()
    ordered = np.empty(size, dtype=np.int64)
    for i in range(size):
        b = values[i] >> low_bits
        ordered[fill[b]] = values[i]
        fill[b] += 1
    passes = -(-low_bits // DIGIT_BITS)
    spare = np.empty(size, dtype=np.int64)
    count = np.empty(1 << DIGIT_BITS, dtype=np.int64)
    mask = (1 << DIGIT_BITS) - 1
    for b in range(1 << top):
        lo, hi = bounds[b], bounds[b + 1]
        if hi - lo < 2:
            continue
        src, dst = ordered[lo:hi], spare[lo:hi]
        for p in range(passes):
            shift = p * DIGIT_BITS
            count[:] = 0
            for i in range(hi - lo):
                count[(src[i] >> shift) & mask] += 1
            total = 0
            for d in range(1 << DIGIT_BITS):
                c = count[d]
                count[d] = total
                total += c
            for i in range(hi - lo):
                d = (src[i] >> shift) & mask
                dst[count[d]] = src[i]
                count[d] += 1
            src, dst = dst, src
        if passes % 2:
            ordered[lo:hi] = src
    return _runs(ordered)


@compiled.kernel
def _runs(ordered):  # pragma: no cover - compiled
    """The distinct values of sorted, non-empty ``ordered`` and the length of each run."""
    size = ordered.size
    distinct = 1  # arithmetic, not branches: a repeat is a coin flip to predict
    for i in range(1, size):
        distinct += ordered[i] != ordered[i - 1]
    unique = np.empty(distinct, dtype=np.int64)
    counts = np.zeros(distinct, dtype=np.int64)
    unique[0] = ordered[0]
    counts[0] = 1
    j = 0
    for i in range(1, size):
        j += ordered[i] != ordered[i - 1]
        unique[j] = ordered[i]
        counts[j] += 1
    return unique, counts


@compiled.kernel
def _merge_slots(previous, unique):  # pragma: no cover - compiled
    """np.searchsorted(previous, unique) for sorted ``unique``, by one merge; clipped
    to the last index, and whether previous holds the value there."""
    size = unique.size
    slot = np.empty(size, dtype=np.int64)
    last = previous.size - 1
    i = 0
    j = 0
    while i < size:  # each step moves j or i on, by arithmetic: no branch to mispredict
        s = min(j, last)
        slot[i] = s  # final once i moves on
        step = (j <= last) & (previous[s] < unique[i])
        j += step
        i += 1 - step
    shared = np.empty(size, dtype=np.bool_)
    for i in range(size):
        shared[i] = previous[slot[i]] == unique[i]
    return slot, shared


def unique_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values and how often each occurs."""
    global NUMPY_SORT_FASTER
    if compiled.COMPILED and values.size and values.dtype == np.int64:
        if NUMPY_SORT_FASTER is None:
            NUMPY_SORT_FASTER = _numpy_sort_is_faster()
        if NUMPY_SORT_FASTER:
            return _runs(np.sort(values))
        if int(values.min()) >= 0:
            return _radix_unique_counts(values, max(int(values.max()).bit_length(), 1))
    ordered = np.sort(values)
    if not ordered.size:
        return ordered, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return ordered[starts], np.diff(np.r_[starts, ordered.size])


def previous_slots(previous: np.ndarray, unique: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of the sorted distinct ``unique``: its index in the sorted, non-empty
    ``previous`` (np.searchsorted's, clipped to the last) and whether it is there."""
    if compiled.COMPILED and previous.size and previous.dtype == unique.dtype == np.int64:
        return _merge_slots(previous, unique)
    slot = np.minimum(np.searchsorted(previous, unique), previous.size - 1)
    return slot, previous[slot] == unique
