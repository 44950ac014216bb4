"""A batch's distinct rows and their match in the previous batch, compiled.

Every batch sorts its ~10^5-10^6 row ids to find the distinct rows and their counts,
then looks each up among the previous batch's: numpy's comparison sort and binary
searches took a fifth of a simulated batch's CPU time. Where numpy sorts with SIMD
(x86-simd-sort) its sort is the fastest, and one pass counts the runs; elsewhere, row
ids being non-negative and below the model's total rows, a radix sort sorts them in a
few linear passes. Two sorted arrays match in one merge. The results are the same
arrays as the numpy definitions here (tests/test_rowsort.py); which sort runs is
timed per process and size of array. Compiled with numba and cached on disk where
available.
"""

from __future__ import annotations

import math
import time

import numpy as np

from components import compiled

LSD_MAX_VALUES = 1 << 18
"""Up to this many ids (2 MB, the L2 cache of a core of the AMD EPYC VM measured) are
sorted least significant digit first: a few passes over the whole array, near the core
(RM1's 205k ids: 1.4 against 1.9 ms for the bucketed sort). Larger arrays are spread
into buckets first, each sorted in cache (RM2's 819k ids: 9.4 against 12.9 ms for
whole-array passes)."""
MIN_DIGIT_BITS = 8
MAX_DIGIT_BITS = 15  # a digit's 32k counters (256 KB) stay in the L2 cache
BUCKET_DIGIT_BITS = 11  # within a bucket of the larger arrays
MAX_TOP_BITS = 16  # their buckets: at most 2**16 (ids of any size)
MERGE_LANES = 4  # merges interleaved (8 were no faster)

NUMPY_SORT_FASTER: dict[int, bool] = {}
"""Per size class of the arrays sorted (the bit length of their size): whether numpy's
sort beats the radix sort on this machine, once timed on the class's first arrays
(_timed_unique_counts)."""
TIMINGS = 3  # arrays of a class sorted each way, timed, before one way is kept
_trials: dict[int, list] = {}  # per class being timed: best seconds each way, arrays
_NO_COUNTS = np.zeros(0, dtype=np.int64)


def _timed_unique_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """unique_counts of non-empty int64 ``values`` of a size class not decided yet: its
    first 2 x TIMINGS arrays are sorted numpy's way and the radix way in turn, each
    timed, then the way with the better best time is kept for the class. None where
    the radix sort refuses a negative value (not counted). Timed on the arrays a run
    sorts, as it sorts them (warm, beside the engine's thread), at no extra cost. The
    CPU's flags do not tell which wins (numpy sorts int64 with SIMD, x86-simd-sort, on
    some AVX-512 CPUs and not on others with the same flags: RM1's 205k row ids took
    13.9 against 4.0 ms on one AMD EPYC VM), nor does a stand-in: on another AMD EPYC
    VM the radix sort won by a hair on 65k uniform ids, the former stand-in, and lost
    on RM1's ids (1.2 against 2.0 ms alone; RM1 CXL runs 0.98x the wall and CPU with
    numpy's sort forced, 14 alternating pairs, within this VM's noise). Both give the
    same arrays, so the choice changes speed only."""
    size_class = values.size.bit_length()
    trial = _trials.setdefault(size_class, [math.inf, math.inf, 0])
    radix = trial[2] % 2
    start = time.perf_counter()
    result = _radix_unique_counts(values) if radix else _runs(np.sort(values))
    if not result[0].size:
        return None
    trial[radix] = min(trial[radix], time.perf_counter() - start)
    trial[2] += 1
    if trial[2] == 2 * TIMINGS:
        NUMPY_SORT_FASTER[size_class] = trial[0] < trial[1]
        _trials.pop(size_class, None)
    return result


@compiled.kernel
def _radix_unique_counts(values):  # pragma: no cover - compiled
    """Sorted distinct values of non-empty ``values`` and their counts, by a radix sort
    on as many bits as the largest value has (one pass finds it); two empty arrays
    where a value is negative (the caller sorts those otherwise)."""
    low = high = values[0]
    for i in range(1, values.size):
        low = min(low, values[i])
        high = max(high, values[i])
    if low < 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    bits = 1
    while high >> bits:
        bits += 1
    if values.size <= LSD_MAX_VALUES:
        return _runs(_lsd_sorted(values, bits))
    return _runs(_msd_sorted(values, bits))


@compiled.kernel
def _lsd_sorted(values, bits):  # pragma: no cover - compiled
    """``values`` (below 2**bits) sorted least significant digit first: one pass counts
    every digit's values, then each digit scatters the values by it in turn (a stable
    pass each). Digits of up to MAX_DIGIT_BITS bits, fewer for small arrays (so the
    counters stay below the values in number): RM1's 27-bit row ids take two passes
    of 14 bits."""
    size = values.size
    widest = MIN_DIGIT_BITS
    while widest < MAX_DIGIT_BITS and (1 << widest) < size:
        widest += 1
    passes = -(-bits // widest)
    digit = -(-bits // passes)
    mask = (1 << digit) - 1
    starts = np.zeros((passes, 1 << digit), dtype=np.int64)
    for i in range(size):
        v = values[i]
        for p in range(passes):
            starts[p, (v >> (p * digit)) & mask] += 1
    for p in range(passes):
        total = 0
        for d in range(1 << digit):
            count = starts[p, d]
            starts[p, d] = total
            total += count
    ordered = np.empty(size, dtype=np.int64)
    for i in range(size):
        v = values[i]
        d = v & mask
        ordered[starts[0, d]] = v
        starts[0, d] += 1
    spare = np.empty(size if passes > 1 else 0, dtype=np.int64)
    for p in range(1, passes):
        shift = p * digit
        for i in range(size):
            v = ordered[i]
            d = (v >> shift) & mask
            spare[starts[p, d]] = v
            starts[p, d] += 1
        ordered, spare = spare, ordered
    return ordered


@compiled.kernel
def _msd_sorted(values, bits):  # pragma: no cover - compiled
    """``values`` (below 2**bits) sorted for arrays past the cache: one counting pass on
    the bits above the lowest two BUCKET_DIGIT_BITS digits spreads the values into
    buckets (row ids: a few thousand each, in cache), each then sorted by LSD radix on
    those two digits."""
    size = values.size
    top = min(max(bits - 2 * BUCKET_DIGIT_BITS, 0), MAX_TOP_BITS)
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
    passes = -(-low_bits // BUCKET_DIGIT_BITS)
    spare = np.empty(size, dtype=np.int64)
    count = np.empty(1 << BUCKET_DIGIT_BITS, dtype=np.int64)
    mask = (1 << BUCKET_DIGIT_BITS) - 1
    for b in range(1 << top):
        lo, hi = bounds[b], bounds[b + 1]
        if hi - lo < 2:
            continue
        src, dst = ordered[lo:hi], spare[lo:hi]
        for p in range(passes):
            shift = p * BUCKET_DIGIT_BITS
            count[:] = 0
            for i in range(hi - lo):
                count[(src[i] >> shift) & mask] += 1
            total = 0
            for d in range(1 << BUCKET_DIGIT_BITS):
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
    return ordered


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
def _merge_slots(previous, unique, counts):  # pragma: no cover - compiled
    """np.searchsorted(previous, unique) for sorted ``unique``, by merging; clipped to
    the last index; whether previous holds the value there; how many values it holds,
    and their lookups where ``counts`` gives each value's (else 0). A merge step waits
    for the one before (a load, a compare), so MERGE_LANES merges of consecutive parts
    of ``unique``, each started at its first value's slot by a binary search, take
    turns for the CPU to overlap them (RM1: 0.6 against 0.94 ms for one merge)."""
    size = unique.size
    slot = np.empty(size, dtype=np.int64)
    last = previous.size - 1
    at = np.empty(MERGE_LANES, dtype=np.int64)  # per lane: its next value of unique,
    stop = np.empty(MERGE_LANES, dtype=np.int64)  # the end of its part,
    j = np.empty(MERGE_LANES, dtype=np.int64)  # the first of previous not below it
    for lane in range(MERGE_LANES):
        at[lane] = lane * size // MERGE_LANES
        stop[lane] = (lane + 1) * size // MERGE_LANES
        low = j[lane - 1] if lane else 0
        j[lane] = _lower_bound(previous, unique[at[lane]], low) if at[lane] < size else last + 1
    merging = True
    while merging:
        merging = False
        for lane in range(MERGE_LANES):
            i = at[lane]
            if i < stop[lane]:  # each step moves j or i on, by arithmetic: no branch
                s = min(j[lane], last)
                slot[i] = s  # final once i moves on
                step = (j[lane] <= last) & (previous[s] < unique[i])
                j[lane] += step
                at[lane] = i + 1 - step
                merging = True
    shared = np.empty(size, dtype=np.bool_)
    held = 0
    lookups = 0
    weighted = counts.size > 0
    for i in range(size):
        match = previous[slot[i]] == unique[i]
        shared[i] = match
        held += match
        if weighted:
            lookups += counts[i] * match
    return slot, shared, held, lookups


@compiled.kernel
def _lower_bound(ordered, value, low):  # pragma: no cover - compiled
    """The first index from ``low`` on whose entry is not below ``value`` (binary)."""
    high = ordered.size
    while low < high:
        middle = (low + high) >> 1
        if ordered[middle] < value:
            low = middle + 1
        else:
            high = middle
    return low


def unique_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values and how often each occurs."""
    if compiled.COMPILED and values.size and values.dtype == np.int64:
        numpy_sort = NUMPY_SORT_FASTER.get(values.size.bit_length())
        if numpy_sort is None:
            timed = _timed_unique_counts(values)
            if timed is not None:
                return timed
        elif numpy_sort:
            return _runs(np.sort(values))
        else:
            unique, counts = _radix_unique_counts(values)
            if unique.size:
                return unique, counts
    ordered = np.sort(values)
    if not ordered.size:
        return ordered, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return ordered[starts], np.diff(np.r_[starts, ordered.size])


def previous_matches(
    previous: np.ndarray, unique: np.ndarray, counts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """For each of the sorted distinct ``unique``: its index in the sorted, non-empty
    ``previous`` (np.searchsorted's, clipped to the last) and whether it is there; then
    how many of ``unique`` are there and, with ``counts`` (each value's lookups), their
    lookups (else 0): a batch's reused rows and lookups, counted in the same merge."""
    if compiled.COMPILED and previous.size and previous.dtype == unique.dtype == np.int64:
        weights = _NO_COUNTS if counts is None else counts
        if weights.dtype == np.int64 and weights.ndim == 1:
            slot, shared, held, lookups = _merge_slots(previous, unique, weights)
            return slot, shared, int(held), int(lookups)
    slot = np.minimum(np.searchsorted(previous, unique), previous.size - 1)
    shared = previous[slot] == unique
    lookups = 0 if counts is None else int(counts @ shared)
    return slot, shared, int(shared.sum()), lookups
