"""Compiled one-pass kernels for the stream analysis in components/memory/streams.py.

numpy derives a stream's buffer hits, episodes, coverage and running maxima in ~30
passes and several argsorts; each kernel here does it in one or two passes over the
stream, with per-slot or per-controller state, and returns exactly what the numpy
definition in streams.py returns (the same integers, the same float operations in the
same order). Compiled with numba and cached on disk (``cache=True``: the first run of a
fresh install compiles, later runs load). Without numba (``COMPILED`` False) streams.py
uses its numpy definitions, which tests/test_memory_kernels.py checks these against.
"""

from __future__ import annotations

import numpy as np

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
    return njit(cache=True, nogil=True)(function) if COMPILED else function


@_kernel
def buffer_hits(line, ctrl, local, entries, episodes):  # pragma: no cover - compiled
    """Direct-mapped buffer of ``entries`` per controller, in access order: an access
    hits when its entry last held its line. Episodes are numbered along the entries'
    streams (slot-major, access order within), as the stable sort by slot numbers them;
    ``order`` is that stable sort (a counting sort over the slots)."""
    size = line.size
    slot = np.empty(size, dtype=np.int64)
    slots = 0
    for i in range(size):
        s = ctrl[i] * entries + local[i] % entries
        slot[i] = s
        if s + 1 > slots:
            slots = s + 1
    last = np.full(slots, -1, dtype=np.int64)
    runs = np.zeros(slots, dtype=np.int64)  # episodes per slot so far
    seen = np.zeros(slots, dtype=np.int64)  # accesses per slot
    hit = np.zeros(size, dtype=np.bool_)
    nth = np.empty(size if episodes else 0, dtype=np.int64)
    for i in range(size):
        s = slot[i]
        if last[s] == line[i] and seen[s] > 0:
            hit[i] = True
        else:
            last[s] = line[i]
            runs[s] += 1
        seen[s] += 1
        if episodes:
            nth[i] = runs[s] - 1
    episode = np.empty(size if episodes else 0, dtype=np.int64)
    order = np.empty(size if episodes else 0, dtype=np.int64)
    if episodes:
        base = np.empty(slots, dtype=np.int64)
        start = np.empty(slots, dtype=np.int64)
        e = 0
        p = 0
        for s in range(slots):
            base[s] = e
            start[s] = p
            e += runs[s]
            p += seen[s]
        for i in range(size):
            s = slot[i]
            episode[i] = base[s] + nth[i]
            order[start[s]] = i
            start[s] += 1
    return hit, episode, order


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
def running_max_per_group(values, group):  # pragma: no cover - compiled
    """The numpy definition's float operations, per element: the running maximum of
    ``values + 2 group`` within the group (groups never mix: shifted values of a later
    group exceed every earlier one), less ``2 group``."""
    groups = 0
    for i in range(group.size):
        if group[i] + 1 > groups:
            groups = group[i] + 1
    best = np.full(groups, -np.inf)
    out = np.empty(values.size)
    for i in range(values.size):
        g = group[i]
        shift = 2.0 * g
        shifted = values[i] + shift
        if shifted > best[g]:
            best[g] = shifted
        out[i] = best[g] - shift
    return out


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


@_kernel
def read_counts(ctrl, hit, controllers):  # pragma: no cover - compiled
    """Per controller: misses and hits (floats, added in access order as bincount adds
    its weights) and line accesses."""
    misses = np.zeros(controllers)
    hits = np.zeros(controllers)
    accesses = np.zeros(controllers, dtype=np.int64)
    for i in range(ctrl.size):
        c = ctrl[i]
        accesses[c] += 1
        if hit[i]:
            hits[c] += 1.0
        else:
            misses[c] += 1.0
    return misses, hits, accesses


@_kernel
def _log2(value):  # pragma: no cover - compiled
    """k where value == 2**k, else -1."""
    if value <= 0 or value & (value - 1):
        return -1
    k = 0
    while value > 1:
        value >>= 1
        k += 1
    return k
