"""Fused compiled kernels: a whole read or write stream analysed in one pass.

kernels.py replaces streams.py's numpy steps one by one, so a stream is still split
into per-line arrays (request, line, ctrl, local, byte ranges, hits, episodes) that
the next steps pass over again. The device needs far less than those arrays: per
controller counts, per media write its line, controller, rank and coverage, per
request its acceptance. These kernels go from the request addresses to exactly that
in one pass (and a pass over the episodes), with the same integers and the same float
operations in the same order as streams.py's numpy definitions composed in digest.py,
which tests/test_memory_fused.py checks them against. Compiled and cached as
kernels.py's; their helpers are inlined into them at compile time.
"""

from __future__ import annotations

import numpy as np

from components.memory.kernels import FULL, SUB_BLOCKS, _inline, _kernel, _log2

FULL32 = np.uint32(FULL)
INDEX_BUCKETS = 1 << 16


@_inline
def _div(x, d, shift):  # pragma: no cover - compiled
    """x // d for x >= 0, by shifting where d == 2**shift (a division costs ~40 cycles)."""
    return x >> shift if shift >= 0 else x // d


@_inline
def _mod(x, d, shift):  # pragma: no cover - compiled
    """x % d for x >= 0, by masking where d == 2**shift."""
    return x & (d - 1) if shift >= 0 else x % d


@_inline
def _place(ln, per_chunk, cshift, controllers, nshift):  # pragma: no cover - compiled
    """A line's controller and controller-local line (Geometry.ctrl and .local);
    ``cshift``, ``nshift``: log2 of ``per_chunk`` and ``controllers`` (-1: none)."""
    if cshift == 0:  # line-interleaved (DRAM channels)
        return _mod(ln, controllers, nshift), _div(ln, controllers, nshift)
    chunk = _div(ln, per_chunk, cshift)
    within = _mod(ln, per_chunk, cshift)
    local = _div(chunk, controllers, nshift) * per_chunk + within
    return _mod(chunk, controllers, nshift), local


@_inline
def _line_span(start, size, unit, ushift):  # pragma: no cover - compiled
    """First and last line a request of ``size`` bytes at ``start`` touches."""
    if ushift >= 0:
        return start >> ushift, (start + size - 1) >> ushift
    return start // unit, (start + size - 1) // unit


@_inline
def _line_accesses(addr, size, unit, ushift):  # pragma: no cover - compiled
    """How many line accesses the stream's requests make in all."""
    total = 0
    for i in range(addr.size):
        first, last = _line_span(addr[i], size, unit, ushift)
        total += last - first + 1
    return total


@_kernel
def read_summary(addr, size, unit, per_chunk, controllers, entries):  # pragma: no cover
    """A read stream through direct-mapped buffers of ``entries`` lines per controller:
    per controller its misses and hits, line accesses and bytes requested (floats but
    for the accesses). Counted per buffer slot in integers and summed per controller at
    the end: the float sums of whole numbers in access order are these integers
    exactly (below 2**53), and a controller's running float counter is a chain every
    access waits on (3x slower). Counts only: a loop that also fills arrays where asked
    runs ~1.5x slower, so read_lines and read_misses do that. Where every request
    stays within one line (a gather of rows, found in a first pass that vectorizes),
    a loop without the per-request line loop and its partial-line bytes runs ~1.5x faster.
    """
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    eshift = _log2(entries)
    width = max(entries, 1)  # no buffer: one counter slot per controller
    slots = controllers * width
    held = np.full(slots, -1, dtype=np.int64)
    hits_s = np.zeros(slots, dtype=np.int64)
    accesses_s = np.zeros(slots, dtype=np.int64)
    short_s = np.zeros(slots, dtype=np.int64)  # bytes below ``size`` per line access
    single = True
    for i in range(addr.size):
        first, last = _line_span(addr[i], size, unit, ushift)
        single &= first == last
    for i in range(addr.size if single else 0):
        ln = _div(addr[i], unit, ushift)
        c, local = _place(ln, per_chunk, cshift, controllers, nshift)
        s = c * width + (_mod(local, entries, eshift) if entries > 0 else 0)
        accesses_s[s] += 1
        if entries > 0:
            hits_s[s] += held[s] == ln
            held[s] = ln
    for i in range(0 if single else addr.size):
        start = addr[i]
        first, last = _line_span(start, size, unit, ushift)
        for ln in range(first, last + 1):
            c, local = _place(ln, per_chunk, cshift, controllers, nshift)
            s = c * width + (_mod(local, entries, eshift) if entries > 0 else 0)
            accesses_s[s] += 1
            if first != last:  # a request over several lines moves part of each
                base = ln * unit
                short_s[s] += min(start + size, base + unit) - max(start, base) - size
            if entries > 0:
                hits_s[s] += held[s] == ln
                held[s] = ln
    misses = np.empty(controllers)
    hits = np.empty(controllers)
    accesses = np.empty(controllers, dtype=np.int64)
    requested = np.empty(controllers)
    for c in range(controllers):
        n, hit, short = 0, 0, 0
        for s in range(c * width, (c + 1) * width):
            n += accesses_s[s]
            hit += hits_s[s]
            short += short_s[s]
        accesses[c] = n
        hits[c] = float(hit)
        misses[c] = float(n - hit)
        requested[c] = float(n * size + short)
    return misses, hits, accesses, requested


@_kernel
def read_lines(addr, size, unit):  # pragma: no cover - compiled
    """The line of each line access of a stream of ``size``-byte requests."""
    ushift = _log2(unit)
    total = _line_accesses(addr, size, unit, ushift)
    line = np.empty(total, dtype=np.int64)
    k = 0
    for i in range(addr.size):
        first, last = _line_span(addr[i], size, unit, ushift)
        for ln in range(first, last + 1):
            line[k] = ln
            k += 1
    return line


@_kernel
def read_misses(addr, size, unit, per_chunk, controllers, entries):  # pragma: no cover
    """The controllers and local lines of a read stream's buffer misses, in access
    order (read_summary's hits, for devices whose media time follows the sequence)."""
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    eshift = _log2(entries)
    total = _line_accesses(addr, size, unit, ushift)
    missed_ctrl = np.empty(total, dtype=np.int64)
    missed_local = np.empty(total, dtype=np.int64)
    held = np.full(max(controllers * entries, 1), -1, dtype=np.int64)
    m = 0
    for i in range(addr.size):
        first, last = _line_span(addr[i], size, unit, ushift)
        for ln in range(first, last + 1):
            c, local = _place(ln, per_chunk, cshift, controllers, nshift)
            if entries > 0:
                s = c * entries + _mod(local, entries, eshift)
                if held[s] == ln:
                    continue
                held[s] = ln
            missed_ctrl[m] = c
            missed_local[m] = local
            m += 1
    return missed_ctrl[:m], missed_local[:m]


@_inline
def _sub_blocks(unit):  # pragma: no cover - compiled
    """Whether a line's SUB_BLOCKS sub-blocks are whole bytes (then the float quotients
    are exact and shifts or integer divisions give them), their size as a float and as
    an integer, and its log2 (-1: not a power of two)."""
    sub_int = unit // SUB_BLOCKS
    return unit % SUB_BLOCKS == 0, unit / SUB_BLOCKS, sub_int, _log2(sub_int)


@_inline
def _episode_arrays(total):  # pragma: no cover - compiled
    """Room for a write stream's episodes (at most one per line access): per episode its
    line, controller and rank on the controller."""
    return (
        np.empty(total, dtype=np.int64),
        np.empty(total, dtype=np.int64),
        np.empty(total, dtype=np.int64),
    )


@_inline
def _sub_mask(start, size, base, unit, whole, sub, sub_int, sshift):  # pragma: no cover
    """The bytes a request at ``start`` covers of the line at ``base`` (offsets lo, hi)
    and their SUB_BLOCKS-bit mask of sub-blocks (ceil and floor of the float quotients
    where a sub-block is not a whole number of bytes)."""
    lo = max(start, base) - base
    hi = min(start + size, base + unit) - base
    return lo, hi, _interval_mask(lo, hi, whole, sub, sub_int, sshift)


@_inline
def _interval_mask(lo, hi, whole, sub, sub_int, sshift):  # pragma: no cover - compiled
    """The SUB_BLOCKS-bit mask of the sub-blocks bytes [lo, hi) of a line meet."""
    if whole:
        lo_blk = np.uint64(_div(lo, sub_int, sshift))
        hi_blk = np.uint64(_div(hi + sub_int - 1, sub_int, sshift))
    else:
        lo_blk = np.uint64(np.floor(lo / sub))
        hi_blk = np.uint64(np.ceil(hi / sub))
    width = hi_blk - lo_blk
    one = np.uint64(1)
    return FULL32 if width >= SUB_BLOCKS else np.uint32(((one << width) - one) << lo_blk)


@_kernel
def line_writes(  # pragma: no cover - compiled
    addr, size, unit, per_chunk, controllers, entries, any_order=False
):
    """A write stream combined in direct-mapped buffers of ``entries`` (> 0) lines per
    controller, one media write per episode (a miss and the hits that follow it).
    Per episode, in the order of their first accesses: its line, controller, rank among
    its controller's episodes and whether its writes' sub-block masks cover the line.
    Per controller: media writes and partial ones (floats), line accesses and bytes
    covered (float; counted in integers, as read_summary). The per-access ranks the
    WPQ's acceptance needs come from write_accesses, only for the streams whose
    acceptance is asked for (filling them here cost this pass ~15%).
    A stream whose lines never go down (an update's sorted rows, a log's appends) has
    its episodes as runs of one line: no line comes back once left, so a line access
    hits exactly when its line is the previous access's. Those streams take
    _monotone_writes (the same arrays, 10-25% faster) unless ``any_order`` (tests);
    the rest _writes_any_order. Requests that tile one range in order (a log's
    entries) take _contiguous_writes, a pass over the range's lines alone."""
    ushift = _log2(unit)
    monotone = contiguous = not any_order
    total, previous = 0, -1
    for i in range(addr.size):
        first, last = _line_span(addr[i], size, unit, ushift)
        total += last - first + 1
        monotone &= first >= previous
        contiguous &= addr[i] == addr[0] + i * size
        previous = last
    if contiguous:
        return _contiguous_writes(addr[0], addr.size, size, unit, per_chunk, controllers)
    if monotone:
        return _monotone_writes(addr, size, unit, per_chunk, controllers, total)
    return _writes_any_order(addr, size, unit, per_chunk, controllers, entries, total)


@_kernel
def _monotone_writes(addr, size, unit, per_chunk, controllers, total):  # pragma: no cover
    """line_writes of a stream of ``total`` line accesses whose lines never go down,
    for any buffer size: an episode is a run of one line, so its line, mask union and
    counts stay in registers and no buffer slot is looked at (the controllers' sums
    are whole numbers). A request's bytes in each line follow from where it starts and
    ends, without clipping it to every line (RM1's update 0.58 against 0.72 ms)."""
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    whole, sub, sub_int, sshift = _sub_blocks(unit)
    ep_line, ep_ctrl, ep_rank = _episode_arrays(total)
    full = np.empty(total, dtype=np.bool_)
    placed = np.zeros(controllers, dtype=np.int64)  # media writes so far, per controller
    rmw_i = np.zeros(controllers, dtype=np.int64)
    count_c = np.zeros(controllers, dtype=np.int64)
    covered_i = np.zeros(controllers, dtype=np.int64)
    count, current, c, accesses, covered = 0, -1, 0, 0, 0
    union = FULL32
    for i in range(addr.size):
        start = addr[i]
        first, last = _line_span(start, size, unit, ushift)
        ln, lo = first, start - first * unit  # bytes [lo, hi) of line ln
        end = start + size - last * unit  # where the request stops in its last line
        while True:  # its lines in turn (a branch per line in a range loop cost 2x)
            hi = end if ln == last else unit
            mask = _interval_mask(lo, hi, whole, sub, sub_int, sshift)
            if ln == current:
                union = np.uint32(union | mask)
            else:  # the previous episode is whole; this line's opens
                if count > 0:
                    full[count - 1] = union == FULL32
                    rmw_i[c] += union != FULL32
                    count_c[c] += accesses
                    covered_i[c] += covered
                c, _ = _place(ln, per_chunk, cshift, controllers, nshift)
                ep_line[count] = ln
                ep_ctrl[count] = c
                ep_rank[count] = placed[c]
                placed[c] += 1
                count += 1
                current, union, accesses, covered = ln, mask, 0, 0
            accesses += 1
            covered += hi - lo
            if ln == last:
                break
            ln, lo = ln + 1, 0
    if count > 0:
        full[count - 1] = union == FULL32
        rmw_i[c] += union != FULL32
        count_c[c] += accesses
        covered_i[c] += covered
    return (
        ep_line[:count],
        ep_ctrl[:count],
        ep_rank[:count],
        full[:count],
        placed.astype(np.float64),
        rmw_i.astype(np.float64),
        count_c,
        covered_i.astype(np.float64),  # whole numbers: exact
    )


@_kernel
def _contiguous_writes(  # pragma: no cover - compiled
    start, count, size, unit, per_chunk, controllers
):
    """line_writes of ``count`` requests of ``size`` bytes that tile [start, end) in
    order: every line of the range is one episode covering the range's bytes in it
    (whole lines but the two ends, whose sub-block masks are those of their bytes: the
    union of the touching intervals' masks), and its line accesses are the requests
    that meet it (their boundaries stepped over as the lines go: a division per line
    cost 4x the rest of the pass). One step per line and per request boundary, no
    buffer look-ups: RM1's log entries 0.2 against 0.75 ms."""
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    whole, sub, sub_int, sshift = _sub_blocks(unit)
    end = start + count * size
    first, last = _line_span(start, count * size, unit, ushift)
    lines = last - first + 1
    ep_line, ep_ctrl, ep_rank = _episode_arrays(lines)
    full = np.empty(lines, dtype=np.bool_)
    placed = np.zeros(controllers, dtype=np.int64)
    rmw_i = np.zeros(controllers, dtype=np.int64)
    count_c = np.zeros(controllers, dtype=np.int64)
    covered_i = np.zeros(controllers, dtype=np.int64)
    request, request_end = 0, start + size  # the request holding the line's first byte
    for k in range(lines):
        ln = first + k
        base = ln * unit
        lo = max(base, start)
        hi = min(base + unit, end)
        c, _ = _place(ln, per_chunk, cshift, controllers, nshift)
        ep_line[k] = ln
        ep_ctrl[k] = c
        ep_rank[k] = placed[c]
        placed[c] += 1
        full[k] = True  # a whole line: every line but the range's first and last
        first_request = request
        while request_end < hi:  # to the request holding the line's last byte
            request += 1
            request_end += size
        count_c[c] += request - first_request + 1
        if request_end == hi:  # the next line starts with the next request
            request += 1
            request_end += size
        covered_i[c] += hi - lo
    for end_line in range(min(lines, 2)):  # the range's first line, then its last
        k = end_line * (lines - 1)
        base = ep_line[k] * unit
        lo, hi = max(base, start) - base, min(base + unit, end) - base
        full[k] = _interval_mask(lo, hi, whole, sub, sub_int, sshift) == FULL32
        rmw_i[ep_ctrl[k]] += not full[k]
    return (
        ep_line,
        ep_ctrl,
        ep_rank,
        full,
        placed.astype(np.float64),
        rmw_i.astype(np.float64),
        count_c,
        covered_i.astype(np.float64),  # whole numbers: exact
    )


@_kernel
def _writes_any_order(  # pragma: no cover - compiled
    addr, size, unit, per_chunk, controllers, entries, total
):
    """line_writes of any stream of ``total`` line accesses: each looks its buffer
    slot up."""
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    eshift = _log2(entries)
    whole, sub, sub_int, sshift = _sub_blocks(unit)
    requests = addr.size
    slots = controllers * entries
    held = np.full(slots, -1, dtype=np.int64)
    current = np.zeros(slots, dtype=np.int64)  # the slot's open episode
    accesses_s = np.zeros(slots, dtype=np.int64)
    covered_s = np.zeros(slots, dtype=np.int64)
    placed = np.zeros(controllers, dtype=np.int64)
    ep_line, ep_ctrl, ep_rank = _episode_arrays(total)
    union = np.empty(total, dtype=np.uint32)  # SUB_BLOCKS bits: less memory to fault in
    count = 0
    for i in range(requests):
        start = addr[i]
        first, last = _line_span(start, size, unit, ushift)
        for ln in range(first, last + 1):
            c, local = _place(ln, per_chunk, cshift, controllers, nshift)
            lo, hi, mask = _sub_mask(start, size, ln * unit, unit, whole, sub, sub_int, sshift)
            s = c * entries + _mod(local, entries, eshift)
            if held[s] == ln:
                union[current[s]] |= mask
            else:
                held[s] = ln
                current[s] = count
                ep_line[count] = ln
                ep_ctrl[count] = c
                ep_rank[count] = placed[c]
                placed[c] += 1
                union[count] = mask
                count += 1
            accesses_s[s] += 1
            covered_s[s] += hi - lo
    full = np.empty(count, dtype=np.bool_)
    writes_i = np.zeros(controllers, dtype=np.int64)
    rmw_i = np.zeros(controllers, dtype=np.int64)
    for e in range(count):
        full[e] = union[e] == FULL32
        writes_i[ep_ctrl[e]] += 1
        rmw_i[ep_ctrl[e]] += not full[e]
    count_c = np.zeros(controllers, dtype=np.int64)
    covered_c = np.empty(controllers)
    for c in range(controllers):
        covered = 0
        for s in range(c * entries, (c + 1) * entries):
            count_c[c] += accesses_s[s]
            covered += covered_s[s]
        covered_c[c] = float(covered)
    return (
        ep_line[:count],
        ep_ctrl[:count],
        ep_rank[:count],
        full,
        writes_i.astype(np.float64),
        rmw_i.astype(np.float64),
        count_c,
        covered_c,
    )


@_kernel
def write_accesses(addr, size, unit, per_chunk, controllers, entries):  # pragma: no cover
    """Per line access of line_writes' stream its episode's rank and its controller
    (int32), per request the end of its accesses (none if every request is one line):
    the same buffer pass without the episodes' lines and coverage."""
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    eshift = _log2(entries)
    requests = addr.size
    total = _line_accesses(addr, size, unit, ushift)
    slots = controllers * entries
    held = np.full(slots, -1, dtype=np.int64)
    rank = np.zeros(slots, dtype=np.int32)  # the rank of the slot's open episode
    placed = np.zeros(controllers, dtype=np.int32)
    access_rank = np.empty(total, dtype=np.int32)
    access_ctrl = np.empty(total, dtype=np.int32)
    single = total == requests  # one line per request: request i ends at access i + 1
    request_end = np.empty(0 if single else requests, dtype=np.int64)
    k = 0
    for i in range(requests):
        first, last = _line_span(addr[i], size, unit, ushift)
        for ln in range(first, last + 1):
            c, local = _place(ln, per_chunk, cshift, controllers, nshift)
            s = c * entries + _mod(local, entries, eshift)
            if held[s] != ln:
                held[s] = ln
                rank[s] = placed[c]
                placed[c] += 1
            access_rank[k] = rank[s]
            access_ctrl[k] = c
            k += 1
        if not single:
            request_end[i] = k
    return access_rank, access_ctrl, request_end


@_kernel
def accept_progress(
    access_rank, access_ctrl, request_end, head_c, free_c
):  # pragma: no cover - compiled
    """Per request: the largest accepted fraction (streams.accepted_fraction) of its
    line accesses, then the running maximum over the requests whose first access is on
    the same controller (running_max_per_group's float operations)."""
    single = request_end.size == 0  # one access per request
    requests = access_rank.size if single else request_end.size
    best = np.full(head_c.size, -np.inf)
    out = np.empty(requests)
    start = 0
    for i in range(requests):
        end = i + 1 if single else request_end[i]
        value = -np.inf
        for k in range(start, end):
            c = access_ctrl[k]
            fraction = 0.0
            if head_c[c] > 0:
                fraction = (access_rank[k] + 1 - free_c[c]) / head_c[c]
                fraction = min(max(fraction, 0.0), 1.0)
            if fraction > value:
                value = fraction
        g = access_ctrl[start]
        shift = 2.0 * g
        shifted = value + shift
        if shifted > best[g]:
            best[g] = shifted
        out[i] = best[g] - shift
        start = end
    return out


@_kernel
def drain_keys(rank, ctrl, head_c, total_c, free_c):  # pragma: no cover - compiled
    """Per media write, its drain position: (rank + 1) / head within the visible flow,
    past its ``head`` writes 1 + the share of the drain (MemoryDevice._posted)."""
    key = np.empty(rank.size)
    for e in range(rank.size):
        c = ctrl[e]
        head = head_c[c]
        if rank[e] + 1 <= head:
            key[e] = (rank[e] + 1) / head if head > 0 else 1.0
        else:
            key[e] = 1.0 + (rank[e] + 1 - head) / max(min(total_c[c], free_c[c]), 1.0)
    return key


@_kernel
def held_max(waiting, keys, line, stalled):  # pragma: no cover - compiled
    """streams.held_by and the largest key of the held accesses in one pass: marks the
    accesses whose line ``waiting`` (sorted, distinct) holds in ``stalled``; returns
    whether any is and the largest of their keys. An index of where each of up to
    INDEX_BUCKETS value ranges starts in ``waiting`` leaves a few binary steps per
    access instead of ~20 (most of them cache misses)."""
    size = waiting.size
    found = False
    best = -np.inf
    if size == 0:
        return found, best
    first, last = waiting[0], waiting[size - 1]
    shift = 0
    while (last - first) >> shift >= INDEX_BUCKETS:
        shift += 1
    buckets = ((last - first) >> shift) + 1
    start = np.empty(buckets + 1, dtype=np.int64)
    b = 0
    for j in range(size):
        bucket = (waiting[j] - first) >> shift
        while b <= bucket:
            start[b] = j
            b += 1
    while b <= buckets:
        start[b] = size
        b += 1
    for i in range(line.size):
        target = line[i]
        if target < first or target > last:
            continue
        bucket = (target - first) >> shift
        lo, hi = start[bucket], start[bucket + 1]
        while lo < hi:  # np.searchsorted(side="left") within the bucket
            mid = (lo + hi) >> 1
            if waiting[mid] < target:
                lo = mid + 1
            else:
                hi = mid
        if lo < size and waiting[lo] == target:
            stalled[i] = True
            found = True
            if keys[lo] > best:
                best = keys[lo]
    return found, best


@_kernel
def bounds(addr):  # pragma: no cover - compiled
    """The smallest and largest of non-empty ``addr`` in one pass (numpy takes two)."""
    low = high = addr[0]
    for i in range(1, addr.size):
        low = min(low, addr[i])
        high = max(high, addr[i])
    return low, high


@_kernel
def sorted_in_lines(addr, size, unit):  # pragma: no cover - compiled
    """Whether the addresses never go down and every request stays within one line."""
    ushift = _log2(unit)
    previous = -1
    for i in range(addr.size):
        a = addr[i]
        first, last = _line_span(a, size, unit, ushift)
        if first != last or a < previous:
            return False
        previous = a
    return True


@_kernel
def held_max_sorted(  # pragma: no cover - compiled
    waiting, keys, addr, accesses, unit, per_chunk, controllers, held, stalls
):
    """held_max for requests at sorted addresses ``addr``, each within one line
    (sorted_in_lines): marks in ``held`` the requests whose line ``waiting`` (sorted,
    distinct) holds, and adds the accesses of those not marked before to their
    controllers' ``stalls`` (``accesses``: per request; empty: one each); returns
    whether any is held and the largest key of their lines. Few waiting lines are
    each searched for among the requests; else the two sorted arrays are merged once,
    stepping without branches on the data (half the lines match, at random)."""
    ushift, cshift, nshift = _log2(unit), _log2(per_chunk), _log2(controllers)
    weighted = accesses.size > 0
    n, m = addr.size, waiting.size
    best = -np.inf
    found = 0
    if m * 20 < n:
        for j in range(m):
            target = waiting[j]
            lo, hi = 0, n
            while lo < hi:  # the first request at or past the line
                mid = (lo + hi) >> 1
                if _div(addr[mid], unit, ushift) < target:
                    lo = mid + 1
                else:
                    hi = mid
            c, _ = _place(target, per_chunk, cshift, controllers, nshift)
            while lo < n and _div(addr[lo], unit, ushift) == target:
                if not held[lo]:
                    stalls[c] += accesses[lo] if weighted else 1
                    held[lo] = True
                found += 1
                best = max(best, keys[j])
                lo += 1
        return found > 0, best
    i, j = 0, 0
    while i < n and j < m:
        a, b = _div(addr[i], unit, ushift), waiting[j]
        same = a == b
        c, _ = _place(a, per_chunk, cshift, controllers, nshift)
        stalls[c] += (same & ~held[i]) * (accesses[i] if weighted else 1)
        held[i] |= same
        best = max(best, keys[j] if same else -np.inf)
        found += same
        i += 1 if a <= b else 0
        j += 1 if b < a else 0
    return found > 0, best


@_kernel
def row_activity(ctrl, local, position, controllers, per_row, banks, ranks):  # pragma: no cover
    """ddr4.row_activity's counts in one pass with per-bank open rows and per-controller
    last ranks (numpy groups the accesses by bank with a stable argsort; divisions by
    powers of two are shifts): per (controller, rank, bank) its row activations, per
    controller its rank switches (float). Accesses are issued in array order on each
    controller, or at ``position`` where it is not empty."""
    n = ctrl.size
    slots = banks * ranks
    rshift, sshift, bshift = _log2(per_row), _log2(slots), _log2(banks)
    order = np.arange(n)
    if position.size:  # into issue order by scattering
        start = np.zeros(controllers + 1, dtype=np.int64)
        for i in range(n):
            start[ctrl[i] + 1] += 1
        for c in range(controllers):
            start[c + 1] += start[c]
        for i in range(n):
            order[start[ctrl[i]] + position[i]] = i
    open_row = np.full(controllers * slots, -1, dtype=np.int64)
    opens = np.zeros(controllers * slots, dtype=np.int64)
    last_rank = np.full(controllers, -1, dtype=np.int64)
    switches = np.zeros(controllers)
    for k in range(n):
        i = order[k]
        c = ctrl[i]
        row_index = _div(local[i], per_row, rshift)
        bank = c * slots + _mod(row_index, slots, sshift)
        rank = _div(bank, banks, bshift)
        switches[c] += 1.0 if (last_rank[c] >= 0) & (last_rank[c] != rank) else 0.0
        last_rank[c] = rank
        row = _div(row_index, slots, sshift)  # arithmetic, not branches: random rows
        opens[bank] += open_row[bank] != row
        open_row[bank] = row
    return opens, switches
