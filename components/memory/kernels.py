"""Compiled one-pass kernels for steps of the stream analysis in streams.py.

numpy derives a stream's lines, episodes, coverage and ranks in many passes and
several argsorts; each kernel here does one step in one or two passes, with per-slot
or per-controller state, and returns exactly what the numpy definition in streams.py
returns (the same integers, the same float operations in the same order). What is
left here serves the streams no fused kernel covers (WPQ merges without a buffer, log
bursts); fused.py analyses the rest whole. Compiled with numba and cached on disk
(``cache=True``: the first run of a fresh install compiles, later runs load). Without
numba (``COMPILED`` False) streams.py uses its numpy definitions, which
tests/test_memory_kernels.py checks these against.
"""

from __future__ import annotations

import numpy as np

from components.compiled import compile_kernel

try:
    from numba import njit
except ImportError:  # a fresh install without numba: streams.py's numpy definitions
    COMPILED = False
else:
    COMPILED = True

SUB_BLOCKS = 32
FULL = np.uint64((1 << SUB_BLOCKS) - 1)


def _kernel(function):
    """The function compiled where numba is available, else left as Python."""
    return compile_kernel(function) if COMPILED else function


def _inline(function):
    """A kernel's helper, inlined into its callers at compile time: a call numba
    leaves out of line checks an error status each time (2x slower per-line loops)."""
    return njit(inline="always")(function) if COMPILED else function


@_kernel
def write_episodes(lo, hi, episode, line, ctrl, unit):  # pragma: no cover - compiled
    """Per episode (numbered contiguously along its stream, first access first): its
    first access's line and controller, the union of its writes' sub-block masks
    compared with a full line, and its rank among its controller's episodes by first
    access."""
    size = episode.size
    count = 0
    controllers = 0
    for i in range(size):
        if episode[i] + 1 > count:
            count = episode[i] + 1
        if ctrl[i] + 1 > controllers:
            controllers = ctrl[i] + 1
    sub = unit / SUB_BLOCKS
    union = np.zeros(count, dtype=np.uint64)
    first = np.full(count, -1, dtype=np.int64)
    one = np.uint64(1)
    for i in range(size):
        lo_blk = np.uint64(np.floor(lo[i] / sub))
        hi_blk = np.uint64(np.ceil(hi[i] / sub))
        width = hi_blk - lo_blk
        if width >= SUB_BLOCKS:
            mask = FULL
        else:
            mask = ((one << width) - one) << lo_blk
        e = episode[i]
        union[e] |= mask
        if first[e] < 0:
            first[e] = i
    rank = np.empty(count, dtype=np.int64)
    placed = np.zeros(controllers, dtype=np.int64)
    for i in range(size):
        e = episode[i]
        if first[e] == i:
            rank[e] = placed[ctrl[i]]
            placed[ctrl[i]] += 1
    ep_line = np.empty(count, dtype=np.int64)
    ep_ctrl = np.empty(count, dtype=np.int64)
    full = np.empty(count, dtype=np.bool_)
    for e in range(count):
        ep_line[e] = line[first[e]]
        ep_ctrl[e] = ctrl[first[e]]
        full[e] = union[e] == FULL
    return ep_line, ep_ctrl, rank, full


@_kernel
def rank_in_group(group):  # pragma: no cover - compiled
    """Each element's place among the earlier elements of its group."""
    groups = 0
    for i in range(group.size):
        if group[i] + 1 > groups:
            groups = group[i] + 1
    placed = np.zeros(groups, dtype=np.int64)
    rank = np.empty(group.size, dtype=np.int64)
    for i in range(group.size):
        rank[i] = placed[group[i]]
        placed[group[i]] += 1
    return rank


@_kernel
def split(addr, size, unit, per_chunk, controllers, ranges):  # pragma: no cover - compiled
    """A stream of ``size``-byte requests split into line accesses: each access's
    request, line, controller and controller-local line, and with ``ranges`` the byte
    range it covers within its line (Geometry.ctrl/local and split_lines' arithmetic,
    on non-negative integers)."""
    requests = addr.size
    total = 0
    for i in range(requests):
        total += (addr[i] + size - 1) // unit - addr[i] // unit + 1
    request = np.empty(total, dtype=np.int64)
    line = np.empty(total, dtype=np.int64)
    ctrl = np.empty(total, dtype=np.int64)
    local = np.empty(total, dtype=np.int64)
    lo = np.empty(total if ranges else 0, dtype=np.int64)
    hi = np.empty(total if ranges else 0, dtype=np.int64)
    ushift = _log2(unit)  # powers of two (every device's) divide by shifting
    cshift = _log2(per_chunk)
    k = 0
    for i in range(requests):
        start = addr[i]
        if ushift >= 0:
            first = start >> ushift
            last = (start + size - 1) >> ushift
        else:
            first = start // unit
            last = (start + size - 1) // unit
        for ln in range(first, last + 1):
            request[k] = i
            line[k] = ln
            if cshift == 0:  # line-interleaved (DRAM channels)
                ctrl[k] = ln % controllers
                local[k] = ln // controllers
            else:
                if cshift > 0:
                    chunk = ln >> cshift
                    within = ln & (per_chunk - 1)
                else:
                    chunk = ln // per_chunk
                    within = ln % per_chunk
                ctrl[k] = chunk % controllers
                local[k] = (chunk // controllers) * per_chunk + within
            if ranges:
                base = ln * unit
                lo[k] = max(start, base) - base
                hi[k] = min(start + size, base + unit) - base
            k += 1
    return request, line, lo, hi, ctrl, local


@_inline
def _log2(value):  # pragma: no cover - compiled
    """k where value == 2**k, else -1."""
    if value <= 0 or value & (value - 1):
        return -1
    k = 0
    while value > 1:
        value >>= 1
        k += 1
    return k


@_kernel
def queue_merges(line, ctrl, order, queue):  # pragma: no cover - compiled
    """streams.queue_merges' hit mask and episodes given its ``order`` (the accesses
    stably sorted by line): the lines each controller's stream has entered are counted
    per controller in one pass (numpy sorts the accesses by controller for it), then
    each access along the order merges into the previous access to its line when at
    most ``queue`` lines entered its controller in between."""
    n = line.size
    controllers = 0
    for i in range(n):
        controllers = max(controllers, ctrl[i] + 1)
    last = np.full(controllers, -1, dtype=np.int64)
    count = np.zeros(controllers, dtype=np.int64)
    entered = np.empty(n, dtype=np.int64)
    for i in range(n):
        c = ctrl[i]
        if line[i] != last[c]:
            count[c] += 1
            last[c] = line[i]
        entered[i] = count[c]
    hit = np.empty(n, dtype=np.bool_)
    episode = np.empty(n, dtype=np.int64)
    e = -1
    for k in range(n):
        i = order[k]
        merged = False
        if k > 0:
            j = order[k - 1]
            merged = line[j] == line[i] and entered[i] - entered[j] <= queue
        hit[i] = merged
        e += not merged
        episode[i] = e
    return hit, episode
