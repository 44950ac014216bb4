"""Vectorized analysis of address streams: lines, buffer hits, WPQ merging, episodes.

The per-request detail of a memory op (which lines a request touches, which accesses
hit a line buffer or merge in the WPQ, which writes combine into one media write and
whether they cover the line, each write's place on its controller) is derived here and
nowhere else. Every function takes numpy arrays and plain numbers and returns numpy
arrays: no device, no engine, no state. So a compiled kernel can replace any one of them
under the same contract without touching the device (components/memory/base.py), which
turns the results into needs, stats and persist ticks. Outputs must stay bit-identical
to these definitions (tests/test_memory_pmem.py replays them line by line).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.memory import kernels

SUB_BLOCKS = 32  # coverage of a line is tracked in 1/32 sub-blocks (8 B of a 256 B XPLine)
FULL = np.uint64((1 << SUB_BLOCKS) - 1)


@dataclass(frozen=True)
class Geometry:
    """How a device lays its lines over controllers: ``unit``-byte lines, interleaved
    over ``controllers`` in chunks of ``interleave`` bytes."""

    unit: int
    interleave: int
    controllers: int

    def ctrl(self, line: np.ndarray) -> np.ndarray:
        """The controller serving each line."""
        return (line // (self.interleave // self.unit)) % self.controllers

    def local(self, line: np.ndarray) -> np.ndarray:
        """A line's number among its controller's lines (the interleave taken out)."""
        per_chunk = self.interleave // self.unit
        if per_chunk == 1:  # line-interleaved (DRAM channels)
            return line // self.controllers
        chunk = line // per_chunk
        return (chunk // self.controllers) * per_chunk + line % per_chunk


@dataclass(frozen=True)
class Lines:
    """A request stream split into line accesses (one row per line touched)."""

    request: np.ndarray  # index of the request each line access belongs to
    line: np.ndarray  # line number (address // unit)
    lo: np.ndarray | None  # first byte of the line the request touches (offset in line)
    hi: np.ndarray | None  # one past its last byte (both None: whole-request reads)
    ctrl: np.ndarray  # controller serving the line
    local: np.ndarray  # the line's number among its controller's lines
    hit: np.ndarray  # the line was in its buffer entry (read hit / combined write)
    episode: np.ndarray | None  # buffer episode: a miss and the hits that follow it
    order: np.ndarray | None  # accesses along the buffer entries' streams (writes only)


@dataclass(frozen=True)
class Episodes:
    """One media write per buffer episode: its line, controller, rank in the
    controller's writes (issue order of the episode's first access), full coverage."""

    line: np.ndarray
    ctrl: np.ndarray
    rank: np.ndarray
    full: np.ndarray


def split_lines(
    addr: np.ndarray,
    size: int,
    geometry: Geometry,
    buffer_lines: int,
    write_queue: int,
    writes: bool,
) -> Lines:
    """Line accesses of a stream of ``size``-byte requests at ``addr``, with their buffer
    hits (a direct-mapped buffer of ``buffer_lines`` entries per controller) or, for
    writes without a buffer, their WPQ merges (``write_queue`` entries). Reads skip what
    only writes need (byte ranges within lines, episodes) when every request fits in one
    line."""
    unit = geometry.unit
    if kernels.COMPILED:
        return _split_compiled(addr, size, geometry, buffer_lines, write_queue, writes)
    first = addr // unit
    count = (addr + size - 1) // unit - first + 1
    single = int(count.max()) == 1
    if single:
        request, line, start = None, first, addr
    else:
        request = np.repeat(np.arange(addr.size), count)
        offset = np.arange(request.size) - np.repeat(np.cumsum(count) - count, count)
        line, start = first[request] + offset, addr[request]
    lo = hi = None
    if writes or not single:
        base = line * unit
        lo = np.maximum(start, base) - base
        hi = np.minimum(start + size, base + unit) - base
    ctrl = geometry.ctrl(line)
    local = geometry.local(line)
    if writes and buffer_lines == 0:
        hit, episode, order = queue_merges(line, ctrl, write_queue)
    else:
        hit, episode, order = buffer_hits(line, ctrl, local, buffer_lines, writes)
    if request is None:
        request = np.arange(addr.size)
    return Lines(request, line, lo, hi, ctrl, local, hit, episode, order)


def _split_compiled(
    addr: np.ndarray,
    size: int,
    geometry: Geometry,
    buffer_lines: int,
    write_queue: int,
    writes: bool,
) -> Lines:
    """split_lines with the split, controllers and local lines in one compiled pass."""
    unit = geometry.unit
    request, line, lo, hi, ctrl, local = kernels.split(
        as_int64(addr), size, unit, geometry.interleave // unit, geometry.controllers, writes
    )
    if not writes:  # reads need byte ranges only where a request spans lines
        if line.size == addr.size:
            lo = hi = None
        else:
            base, start = line * unit, addr[request]
            lo = np.maximum(start, base) - base
            hi = np.minimum(start + size, base + unit) - base
    if writes and buffer_lines == 0:
        hit, episode, order = queue_merges(line, ctrl, write_queue)
    else:
        hit, episode, order = buffer_hits(line, ctrl, local, buffer_lines, writes)
    return Lines(request, line, lo, hi, ctrl, local, hit, episode, order)


def buffer_hits(
    line: np.ndarray, ctrl: np.ndarray, local: np.ndarray, entries: int, episodes: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A direct-mapped buffer of ``entries`` lines per controller: an access hits when
    the previous access to its entry (same controller, same local line modulo entries)
    was to the same line. Returns the hit mask and, when ``episodes`` is asked for, each
    access's episode (its miss and the hits that follow it, numbered along the entries'
    streams) and that stream order."""
    size = line.size
    if entries == 0:
        every = np.arange(size) if episodes else None
        return np.zeros(size, dtype=bool), every, every
    slot = ctrl.astype(np.int64) * entries + local % entries
    order = np.argsort(small_keys(slot), kind="stable")
    sorted_slot, sorted_line = slot[order], line[order]
    hit_sorted = np.zeros(size, dtype=bool)
    hit_sorted[1:] = (sorted_slot[1:] == sorted_slot[:-1]) & (sorted_line[1:] == sorted_line[:-1])
    return _in_access_order(hit_sorted, order, episodes)


def queue_merges(
    line: np.ndarray, ctrl: np.ndarray, queue: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Without a buffer, the WPQ still merges a write into a queued write to the same
    line (DRAM controllers and gem5's MemCtrl do): an access merges when at most
    ``queue`` lines entered its controller's stream since the previous access to its
    line (a line enters where the stream changes to it), as in a queue the stream keeps
    full. With a buffer, its combining covers this for the streams the boards issue
    (addresses in increasing order). A line belongs to one controller, so a change of
    controller in the sorted stream is a change of line too. Returns the merge mask,
    each access's episode and an order in which episodes are contiguous."""
    order = np.argsort(line, kind="stable")  # a line's accesses together, in issue order
    if kernels.COMPILED and line.size:
        return (*kernels.queue_merges(as_int64(line), as_int64(ctrl), order, queue), order)
    size = line.size
    by_ctrl = np.argsort(small_keys(ctrl), kind="stable")  # issue order on each controller
    ctrl_line = line[by_ctrl]
    new = np.ones(size, dtype=np.int64)
    new[1:] = ctrl_line[1:] != ctrl_line[:-1]
    entered = np.empty(size, dtype=np.int64)  # lines entered on the controller so far
    entered[by_ctrl] = np.cumsum(new)
    sorted_line, sorted_entered = line[order], entered[order]
    merged = np.zeros(size, dtype=bool)
    merged[1:] = (sorted_line[1:] == sorted_line[:-1]) & (
        sorted_entered[1:] - sorted_entered[:-1] <= queue
    )
    return _in_access_order(merged, order, True)


def _in_access_order(
    hit_sorted: np.ndarray, order: np.ndarray, episodes: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The hit mask of accesses sorted by ``order``, back in access order; with
    ``episodes``, also each access's episode (a miss and the hits after it along
    ``order``, numbered from 0) and the order."""
    hit = np.empty(hit_sorted.size, dtype=bool)
    hit[order] = hit_sorted
    if not episodes:
        return hit, None, None
    episode = np.empty(hit_sorted.size, dtype=np.int64)
    episode[order] = np.cumsum(~hit_sorted) - 1
    return hit, episode, order


def write_episodes(lines: Lines, unit: int) -> Episodes:
    """One media write per episode, with the union of the byte ranges its writes cover
    (sub-block bit masks) and its rank among its controller's media writes."""
    if kernels.COMPILED:
        return Episodes(
            *kernels.write_episodes(
                as_int64(lines.lo),
                as_int64(lines.hi),
                lines.episode,
                as_int64(lines.line),
                as_int64(lines.ctrl),
                unit,
            )
        )
    return _write_episodes(lines, unit)


def _write_episodes(lines: Lines, unit: int) -> Episodes:
    """write_episodes in numpy (the definition the kernel must match)."""
    sub = unit / SUB_BLOCKS
    lo_blk = np.floor(lines.lo / sub).astype(np.uint64)
    hi_blk = np.ceil(lines.hi / sub).astype(np.uint64)
    width = hi_blk - lo_blk
    mask = np.where(
        width >= SUB_BLOCKS, FULL, ((np.uint64(1) << width) - np.uint64(1)) << lo_blk
    ).astype(np.uint64)
    order = lines.order
    starts = np.flatnonzero(np.r_[True, lines.episode[order][1:] != lines.episode[order][:-1]])
    union = np.bitwise_or.reduceat(mask[order], starts)
    first = order[starts]  # episodes are numbered in this order; stable: first access first
    line, ctrl = lines.line[first], lines.ctrl[first]
    by_issue = np.argsort(first, kind="stable")
    rank = np.empty(first.size, dtype=np.int64)
    rank[by_issue] = rank_in_group(ctrl[by_issue], int(ctrl.max()) + 1)
    return Episodes(line, ctrl, rank, union == FULL)


def rank_in_group(group: np.ndarray, groups: int) -> np.ndarray:
    """Each element's place among the elements of its group (0..groups-1) before it."""
    if kernels.COMPILED:
        return kernels.rank_in_group(as_int64(group))
    return _rank_in_group(group, groups)


def _rank_in_group(group: np.ndarray, groups: int) -> np.ndarray:
    """rank_in_group in numpy (the definition the kernel must match)."""
    order = np.argsort(small_keys(group), kind="stable")
    per_group = np.bincount(group, minlength=groups)
    rank = np.empty(group.size, dtype=np.int64)
    rank[order] = np.arange(group.size) - np.repeat(np.cumsum(per_group) - per_group, per_group)
    return rank


def distinct_lines(addr: np.ndarray, size: int, unit: int) -> bool:
    """Whether no line is accessed twice: whole, line-aligned requests going up through
    memory (log bursts), which the buffer can neither hit nor combine."""
    if size % unit or addr.size < 2 or np.any(addr % unit):
        return False
    return bool(np.all(np.diff(addr) >= size))


def accepted_fraction(rank: np.ndarray, head: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Progress of the visible flow (``head`` writes per controller) by which the media
    has drained all but the WPQ entries the stream found free before the write of rank
    ``rank``."""
    return np.divide(rank + 1 - free, head, out=np.zeros(rank.size), where=head > 0).clip(0, 1)


def running_max_per_group(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running maximum of values in [0, 1] within each group, in order."""
    order = np.argsort(small_keys(group), kind="stable")
    shifted = values[order] + 2.0 * group[order]
    out = np.empty_like(values)
    out[order] = np.maximum.accumulate(shifted) - 2.0 * group[order]
    return out


def last_write_keys(lines: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lines that pending writes hold, sorted, each with the drain key of its last
    write (a line's last write drains last). Lines already distinct and increasing (a
    log's appends, an update of sorted rows) are that as they are: the sort by two keys
    took ~5 ms of a 98k-line RM1 update."""
    if not np.any(lines[1:] <= lines[:-1]):
        return lines, keys
    order = np.lexsort((keys, lines))
    waiting, ordered = lines[order], keys[order]
    last = np.r_[waiting[1:] != waiting[:-1], True]
    return waiting[last], ordered[last]


def held_by(waiting: np.ndarray, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each access of ``lines``: whether ``waiting`` (sorted) holds its line, and
    the index there (meaningful where it does)."""
    idx = np.minimum(np.searchsorted(waiting, lines), waiting.size - 1)
    return waiting[idx] == lines, idx


def small_keys(keys: np.ndarray) -> np.ndarray:
    """Small non-negative keys as int16 when they fit: numpy's stable argsort of 16-bit
    integers is a radix sort."""
    return keys.astype(np.int16) if keys.size and int(keys.max()) < 2**15 else keys


def as_int64(values: np.ndarray) -> np.ndarray:
    """A contiguous int64 array for the kernels (one compiled signature each)."""
    return np.ascontiguousarray(values, dtype=np.int64)


def read_counts(
    ctrl: np.ndarray, hit: np.ndarray, controllers: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per controller: a read stream's line misses and hits (floats) and its line
    accesses."""
    return (
        np.bincount(ctrl, weights=~hit, minlength=controllers),
        np.bincount(ctrl, weights=hit, minlength=controllers),
        np.bincount(ctrl, minlength=controllers),
    )
