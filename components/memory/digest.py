"""What a device needs of a read or write stream, from the fused kernels or numpy.

The device (components/memory/base.py) turns a stream into needs, stats and persist
ticks from a few per-controller figures and, for writes, per media write and per
request arrays. With numba, components/memory/fused.py derives them from the request
addresses in one pass; without it they are composed from streams.py's numpy
definitions, which are the contract: both give the same numbers bit for bit
(tests/test_memory_kernels.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from components.memory import fused, kernels
from components.memory.memo import DigestMemo
from components.memory.streams import (
    Geometry,
    accepted_fraction,
    held_by,
    read_counts,
    running_max_per_group,
    split_lines,
    write_episodes,
)


@dataclass(frozen=True)
class ReadDigest:
    """Per controller: line misses and hits (floats), line accesses, bytes requested
    (float); per access its line, and per miss in access order its controller and
    local line, where asked for (else None)."""

    misses: np.ndarray
    hits: np.ndarray
    accesses: np.ndarray
    requested: np.ndarray
    line: np.ndarray | None
    missed_ctrl: np.ndarray | None
    missed_local: np.ndarray | None


def kernel_args(size: int, geometry: Geometry, buffer_lines: int) -> tuple[int, ...]:
    """The fused kernels' arguments after the addresses: request size, line size, lines
    per interleave chunk, controllers, buffer entries per controller."""
    unit = geometry.unit
    return size, unit, geometry.interleave // unit, geometry.controllers, buffer_lines


def digest_reads(
    addr: np.ndarray,
    size: int,
    geometry: Geometry,
    buffer_lines: int,
    lines: bool,
    missed: bool,
    memo: DigestMemo | None = None,
) -> ReadDigest:
    """A read stream of ``size``-byte requests at ``addr`` (int64) through the buffers;
    ``lines``/``missed``: whether to return the per-access lines and the misses;
    ``memo``: the device's digests (compiled path)."""
    n = geometry.controllers
    if kernels.COMPILED:
        args = kernel_args(size, geometry, buffer_lines)
        memo = memo or DigestMemo()
        counts = memo.get("read", addr, args, lambda: fused.read_summary(addr, *args))
        line = None
        if lines and int(counts[2].sum()) == addr.size:  # one line per request
            line = lines_of(addr, geometry.unit)
        elif lines:
            line = fused.read_lines(addr, size, geometry.unit)
        missed_lines = fused.read_misses(addr, *args) if missed else (None, None)
        return ReadDigest(*counts, line, *missed_lines)
    split = split_lines(addr, size, geometry, buffer_lines, 0, False)
    misses, hits, accesses = read_counts(split.ctrl, split.hit, n)
    if split.lo is None:  # one line per request: each moves ``size`` bytes
        requested = (accesses * size).astype(float)
    else:
        requested = np.bincount(split.ctrl, weights=split.hi - split.lo, minlength=n)
    miss = ~split.hit
    return ReadDigest(
        misses,
        hits,
        accesses,
        requested,
        split.line if lines else None,
        split.ctrl[miss] if missed else None,
        split.local[miss] if missed else None,
    )


def foresee_reads(
    addr: np.ndarray, size: int, geometry: Geometry, buffer_lines: int, memo: DigestMemo
) -> None:
    """Digest a read stream into ``memo`` ahead of its issue, where digest_reads takes
    it from (the compiled path; the numpy one keeps no digests)."""
    if kernels.COMPILED:
        args = kernel_args(size, geometry, buffer_lines)
        memo.foresee("read", addr, args, lambda: fused.read_summary(addr, *args))


def lines_of(addr: np.ndarray, unit: int) -> np.ndarray:
    """The line of each address (a shift where the line size is a power of two)."""
    if unit & (unit - 1):
        return addr // unit
    return np.right_shift(addr, unit.bit_length() - 1)


@dataclass(frozen=True)
class WriteDigest:
    """A write stream: per media write (episode; buffered: in the order of their first
    accesses) its line, controller, rank among its controller's writes and full
    coverage; per controller media writes and
    RMW reads (floats), line accesses and bytes covered (float). ``accept``: per
    request, the progress at which the WPQ accepts it."""

    line: np.ndarray
    ctrl: np.ndarray
    rank: np.ndarray
    full: np.ndarray
    writes_c: np.ndarray
    rmw_c: np.ndarray
    count_c: np.ndarray
    covered_c: np.ndarray
    # per line access its episode's rank and controller (int32), per request the end
    # of its accesses (empty: one access each); found when first asked for
    _accesses: Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]

    def accept(self, head_c: np.ndarray, free_c: np.ndarray) -> np.ndarray:
        """Per request, the progress of the visible flow (``head_c`` writes per
        controller, ``free_c`` WPQ entries found free) by which the WPQ has room for
        its last line; each controller's WPQ accepts in issue order."""
        rank, ctrl, ends = self._accesses()
        if kernels.COMPILED:
            return fused.accept_progress(rank, ctrl, ends, head_c, free_c)
        fraction = accepted_fraction(rank, head_c[ctrl], free_c[ctrl])
        firsts = np.r_[0, ends[:-1]] if ends.size else np.arange(ctrl.size)
        return running_max_per_group(np.maximum.reduceat(fraction, firsts), ctrl[firsts])


def digest_writes(
    addr: np.ndarray,
    size: int,
    geometry: Geometry,
    buffer_lines: int,
    write_queue: int,
    memo: DigestMemo | None = None,
) -> WriteDigest:
    """A write stream of ``size``-byte requests at ``addr`` (int64) combined in buffers
    of ``buffer_lines`` entries per controller (none: merged in a WPQ of
    ``write_queue`` entries, streams.queue_merges, which has no fused kernel);
    ``memo``: where a digest made ahead (foresee_writes) is taken from."""
    n, unit = geometry.controllers, geometry.unit
    if kernels.COMPILED and buffer_lines > 0:
        args = kernel_args(size, geometry, buffer_lines)
        episodes = (
            fused.line_writes(addr, *args)
            if memo is None
            else memo.get("write", addr, args, lambda: fused.line_writes(addr, *args), keep=False)
        )
        return WriteDigest(*episodes, lambda: fused.write_accesses(addr, *args))
    lines = split_lines(addr, size, geometry, buffer_lines, write_queue, True)
    episodes = write_episodes(lines, unit)
    ends = np.r_[np.flatnonzero(lines.request[1:] != lines.request[:-1]) + 1, lines.line.size]
    by_first = slice(None)  # WPQ merges have no fused kernel to match
    if buffer_lines:  # the fused kernel's episode order (no use depends on it)
        by_first = np.argsort(np.unique(lines.episode, return_index=True)[1])
    ctrl, full = episodes.ctrl[by_first], episodes.full[by_first]
    accesses = (episodes.rank[lines.episode].astype(np.int32), lines.ctrl.astype(np.int32), ends)
    return WriteDigest(
        episodes.line[by_first],
        ctrl,
        episodes.rank[by_first],
        full,
        np.bincount(ctrl, minlength=n).astype(float),
        np.bincount(ctrl, weights=~full, minlength=n),
        np.bincount(lines.ctrl, minlength=n),
        np.bincount(lines.ctrl, weights=lines.hi - lines.lo, minlength=n),
        lambda: accesses,
    )


def foresee_writes(
    addr: np.ndarray, size: int, geometry: Geometry, buffer_lines: int, memo: DigestMemo
) -> None:
    """Digest a write stream into ``memo`` ahead of its issue, where digest_writes
    takes it from."""
    if kernels.COMPILED and buffer_lines > 0:
        args = kernel_args(size, geometry, buffer_lines)
        memo.foresee("write", addr, args, lambda: fused.line_writes(addr, *args))


def drain_keys(
    rank: np.ndarray, ctrl: np.ndarray, head_c: np.ndarray, total_c: np.ndarray, free_c: np.ndarray
) -> np.ndarray:
    """Per media write (rank ``rank`` on controller ``ctrl``), its drain position: in
    (0, 1] among the ``head_c`` writes the visible flow drains, else in (1, 2] within
    the drain of the rest (``total_c`` writes, ``free_c`` WPQ entries found free)."""
    if kernels.COMPILED:
        return fused.drain_keys(rank, ctrl, head_c, total_c, free_c)
    head = head_c[ctrl]
    return np.where(
        rank + 1 <= head,
        np.divide(rank + 1, head, out=np.ones(rank.size), where=head > 0),
        1.0 + (rank + 1 - head) / np.maximum(np.minimum(total_c[ctrl], free_c[ctrl]), 1),
    )


def line_span(addr: np.ndarray, size: int, unit: int) -> tuple[int, int]:
    """The first and last line a stream of ``size``-byte requests at ``addr`` touches
    ((0, -1) if none), and so also whether any address is negative (the first is)."""
    if not addr.size:
        return 0, -1
    low, high = fused.bounds(addr) if kernels.COMPILED else (addr.min(), addr.max())
    return int(low) // unit, (int(high) + size - 1) // unit


def sorted_in_lines(addr: np.ndarray, size: int, unit: int) -> bool:
    """Whether a stream's addresses never go down and each of its ``size``-byte
    requests stays within one line (then its lines are sorted as well)."""
    if kernels.COMPILED:
        return bool(fused.sorted_in_lines(addr, size, unit))
    return not (
        np.any(addr[1:] < addr[:-1])
        or np.any(lines_of(addr, unit) != lines_of(addr + (size - 1), unit))
    )


def held_max_sorted(
    waiting: np.ndarray,
    keys: np.ndarray,
    addr: np.ndarray,
    accesses: np.ndarray | None,
    geometry: Geometry,
    held: np.ndarray,
    stalls: np.ndarray,
) -> float | None:
    """held_max for requests at sorted addresses ``addr`` within one line each
    (sorted_in_lines), without a search per request: marks in ``held`` the requests
    whose line ``waiting`` (sorted) holds and adds the accesses of those not marked
    before (``accesses``: per request; None: one each) to their controllers'
    ``stalls`` (int64); the largest key of those lines, None if none."""
    if kernels.COMPILED:
        weights = np.empty(0, dtype=np.int64) if accesses is None else accesses
        shape = (geometry.unit, geometry.interleave // geometry.unit, geometry.controllers)
        found, best = fused.held_max_sorted(waiting, keys, addr, weights, *shape, held, stalls)
        return float(best) if found else None
    before = held.copy()
    key = held_max(waiting, keys, lines_of(addr, geometry.unit), held)
    new = held & ~before
    ctrl = geometry.ctrl(lines_of(addr[new], geometry.unit))
    weights = None if accesses is None else accesses[new]
    stalls += np.bincount(ctrl, weights=weights, minlength=stalls.size).astype(np.int64)
    return key


def held_max(
    waiting: np.ndarray, keys: np.ndarray, line: np.ndarray, stalled: np.ndarray
) -> float | None:
    """Marks in ``stalled`` the accesses whose line ``waiting`` (sorted) holds; the
    largest key of those lines, None if there are none."""
    if kernels.COMPILED:
        found, best = fused.held_max(waiting, keys, line, stalled)
        return float(best) if found else None
    match, idx = held_by(waiting, line)
    if not match.any():
        return None
    stalled |= match
    return float(keys[idx[match]].max())
