"""Memory devices with vectorized, analytical timing over a whole op's request stream.

A device is N controllers behind an address interleave. Each request is split into the
device's internal access units ("lines": 64 B DRAM bursts, 256 B Optane XPLines, 4 KiB
SSD pages); a small per-controller buffer of ``buffer_lines`` lines serves repeated
lines (read buffer hits, write combining), so only the rest reach the media. Per
controller, after the first access's latency, accesses complete at the slower of the
media bandwidth and ``queue entries / latency`` (Little's law); the requester's own
``outstanding`` window bounds the stream the same way. Writes are posted: a write
completes when the controller's write pending queue (WPQ) accepts it, and the device
remembers when each written line finishes draining to the media so that a later read
of that line waits (read-after-write stall). Everything is numpy over the stream; there
is no per-request Python code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from components.sim.params import ConfigError, MemorySize
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND


@dataclass(frozen=True)
class Access:
    """What one read or write op cost. ``persist_ticks``: per write request, the offset
    from ``now`` at which it enters the persistence domain (empty for reads)."""

    ticks: int
    raw_stall_ticks: int
    media_bytes: int
    requests: int
    energy_j: float
    persist_ticks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True)
class OpResult:
    """A compute engine's op over memory: its duration from ``now``, the device accesses
    it made, and the arithmetic it did (for energy and stats)."""

    ticks: int
    accesses: tuple[Access, ...]
    flops: float = 0.0
    energy_j: float = 0.0


class MemoryController(SimObject):
    """Stats of one controller (``pmem.ctrl0.bytesRead``); its timing is the device's."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.bytesRead = self.scalar("bytesRead", "bytes requested by reads", "Byte")
        self.bytesWritten = self.scalar("bytesWritten", "bytes requested by writes", "Byte")
        self.mediaBytesRead = self.scalar(
            "mediaBytesRead", "bytes read from the media (incl. read-modify-write)", "Byte"
        )
        self.mediaBytesWritten = self.scalar("mediaBytesWritten", "bytes written to media", "Byte")
        self.readReqs = self.scalar("readReqs", "line accesses by reads", "Count")
        self.writeReqs = self.scalar("writeReqs", "line accesses by writes", "Count")
        self.bufferHits = self.scalar("bufferHits", "reads served by the line buffer", "Count")
        self.combinedWrites = self.scalar(
            "combinedWrites", "writes merged into a buffered line", "Count"
        )
        self.rmwReads = self.scalar("rmwReads", "partial-line writes needing a media read", "Count")
        self.rawStalls = self.scalar("rawStalls", "reads of lines still draining", "Count")
        self.busyTicks = self.scalar("busyTicks", "ticks the controller was busy", "Tick")
        self.readAmplification = self.formula(
            "readAmplification",
            "media bytes read per requested byte",
            "Ratio",
            lambda: self.mediaBytesRead.value / self.bytesRead.value if self.bytesRead.value else 0,
        )


@dataclass(frozen=True)
class _Lines:
    """A request stream split into line accesses (one row per line touched)."""

    request: np.ndarray  # index of the request each line access belongs to
    line: np.ndarray  # line number (address // access_unit)
    cover: np.ndarray  # bytes of the line the request touches
    ctrl: np.ndarray  # controller serving the line
    pos: np.ndarray  # position of the access in its controller's stream
    hit: np.ndarray  # served by / merged into the line buffer
    episode: np.ndarray  # buffer episode: first access of a line and the hits merged into it
    order: np.ndarray | None  # accesses sorted by line (stable), when already computed


class MemoryDevice(SimObject):
    """Base of Pmem, Dram and Ssd. Subclasses declare the parameters used here:
    ``controllers, interleave, access_unit, buffer_lines, read_latency, write_latency,
    ctrl_read_bandwidth, ctrl_write_bandwidth, read_queue, write_queue,
    read_energy, write_energy, module_capacity, module_idle_power`` (energies per media
    byte). Static power follows the number of modules the stored data needs, so a
    system that keeps the tables in DRAM pays for more DIMMs than one using PMEM."""

    capacity = MemorySize(
        "0B",
        "bytes the device must hold (0: one module per controller)",
        "set by the board from the tables and logs it places here",
    )

    persist_domain = "adr"  # devices without a `domain` parameter persist at WPQ entry

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.dynamicEnergy = self.scalar("dynamicEnergy", "media access energy", "Joule")
        self.rawStallTicks = self.scalar(
            "rawStallTicks", "op time added by read-after-write stalls", "Tick"
        )
        self.readOps = self.scalar("readOps", "read ops (request streams)", "Count")
        self.writeOps = self.scalar("writeOps", "write ops (request streams)", "Count")
        self._pending_lines = np.zeros(0, dtype=np.int64)  # sorted lines still draining
        self._pending_done = np.zeros(0, dtype=np.int64)  # absolute tick each finishes
        self._drain_end = np.zeros(0, dtype=np.int64)  # per controller, absolute tick
        self._read_end = np.zeros(0, dtype=np.int64)  # per controller, last read served
        self._controllers()

    # ----- analytical figures ---------------------------------------------------
    @property
    def modules(self) -> int:
        """Modules installed: enough for the capacity, at least one per controller."""
        return max(self.controllers, -(-self.capacity // self.module_capacity))

    @property
    def static_power(self) -> float:
        return self.modules * self.module_idle_power

    @property
    def idle_read_latency(self) -> int:
        return self.read_latency

    @property
    def idle_write_latency(self) -> int:
        return self.write_latency

    @property
    def read_bandwidth(self) -> float:
        return self.ctrl_read_bandwidth * self.controllers

    @property
    def write_bandwidth(self) -> float:
        return self.ctrl_write_bandwidth * self.controllers

    # ----- ops ----------------------------------------------------------------
    def read(
        self, addresses: np.ndarray, size: int, now: int, outstanding: int | None = None
    ) -> Access:
        """Time a stream of reads of ``size`` bytes each, issued in order at ``now``."""
        addr, window = self._check(addresses, size, outstanding)
        ctrls = self._controllers()
        if addr.size == 0:
            return Access(0, 0, 0, 0, 0.0)
        lines = self._split(addr, size)
        n = self.controllers
        unit, lat = self.access_unit, self.read_latency
        media = np.where(lines.hit, 0, unit)
        m_c = np.bincount(lines.ctrl, weights=~lines.hit, minlength=n)
        bytes_c = np.bincount(lines.ctrl, weights=media, minlength=n)
        span_c = _stream_span(bytes_c, m_c, lat, self.ctrl_read_bandwidth, self.read_queue)
        # reads of concurrent ops share each controller's read bandwidth in issue order
        busy_c = np.where(m_c > 0, self._reads_backlog(now, n) + span_c, 0.0)
        base = max(float(busy_c.max()), _window_span(addr.size, lat, window))
        self._read_end[:n] = np.where(m_c > 0, now + np.ceil(busy_c), self._read_end[:n])
        ticks = base
        stalled, done = self._draining(lines, now)
        if stalled.any():
            ticks = max(ticks, float(done[stalled].max() - now + lat))
        ticks_i, stall = int(math.ceil(ticks)), int(math.ceil(ticks) - math.ceil(base))
        energy = float(media.sum()) * self.read_energy
        self._account_reads(ctrls, lines, media, span_c, stalled)
        self.readOps += 1
        self.rawStallTicks += stall
        self.dynamicEnergy += energy
        return Access(ticks_i, stall, int(media.sum()), int(addr.size), energy)

    def write(
        self, addresses: np.ndarray, size: int, now: int, outstanding: int | None = None
    ) -> Access:
        """Time a stream of posted writes; remember when each line finishes draining."""
        addr, window = self._check(addresses, size, outstanding)
        ctrls = self._controllers()
        if addr.size == 0:
            return Access(0, 0, 0, 0, 0.0)
        lines = self._split(addr, size)
        n, unit, lat = self.controllers, self.access_unit, self.write_latency
        # One media write per buffer episode; an episode that never covered its whole
        # line must first read it (read-modify-write).
        episode_cover = np.bincount(lines.episode, weights=lines.cover)
        episode_ctrl = np.zeros(episode_cover.size, dtype=np.int64)
        episode_ctrl[lines.episode] = lines.ctrl
        writes_c = np.bincount(episode_ctrl, minlength=n).astype(float)
        rmw_c = np.bincount(episode_ctrl, weights=episode_cover < unit, minlength=n)
        count_c = np.bincount(lines.ctrl, minlength=n)
        media_s = (
            writes_c * unit / self.ctrl_write_bandwidth + rmw_c * unit / self.ctrl_read_bandwidth
        )
        span_c = np.maximum(media_s * TICKS_PER_SECOND, (writes_c - 1) * lat / self.write_queue)
        step_c = np.divide(span_c, count_c, out=np.zeros(n), where=count_c > 0)
        start_c = self._backlog(now, n)
        k, step, start = lines.pos, step_c[lines.ctrl], start_c[lines.ctrl]
        # accepted once the requester may issue it and a WPQ entry has drained
        issue = lines.request * (lat / window)
        accept = lat + np.maximum(issue, start + (k - self.write_queue + 1) * step)
        drain = np.maximum(lat + start + (k + 1) * step, accept + step)
        firsts = np.flatnonzero(np.r_[True, lines.request[1:] != lines.request[:-1]])
        accept_req = np.maximum.reduceat(accept, firsts)
        ticks = int(math.ceil(accept_req.max()))
        # ADR: durable in the WPQ; eADR / GPF: durable as soon as it is issued
        persist = accept_req if self._domain() == "adr" else accept_req - lat
        self._remember(lines.line, now + np.ceil(drain).astype(np.int64), lines.ctrl, now)
        media_bytes = int((writes_c.sum() + rmw_c.sum()) * unit)
        energy = unit * (writes_c.sum() * self.write_energy + rmw_c.sum() * self.read_energy)
        for c in range(n):
            ctrl = ctrls[c]
            ctrl.bytesWritten += float(np.sum(lines.cover[lines.ctrl == c]))
            ctrl.writeReqs += int(count_c[c])
            ctrl.mediaBytesWritten += float(writes_c[c] * unit)
            ctrl.mediaBytesRead += float(rmw_c[c] * unit)
            ctrl.rmwReads += int(rmw_c[c])
            ctrl.combinedWrites += int(count_c[c] - writes_c[c])
            ctrl.busyTicks += float(span_c[c] + lat) if count_c[c] else 0.0
        self.writeOps += 1
        self.dynamicEnergy += float(energy)
        persist_ticks = np.ceil(np.maximum(persist, 0.0)).astype(np.int64)
        return Access(ticks, 0, media_bytes, int(addr.size), float(energy), persist_ticks)

    # ----- internals ------------------------------------------------------------
    def _domain(self) -> str:
        return getattr(self, "domain", self.persist_domain)

    def _controllers(self) -> list[MemoryController]:
        """Controller children ctrl0..ctrlN-1, created as ``controllers`` grows."""
        for c in range(self.controllers):
            if f"ctrl{c}" not in self._children:
                setattr(self, f"ctrl{c}", MemoryController())
        if self._drain_end.size < self.controllers:
            self._drain_end = _grown(self._drain_end, self.controllers)
            self._read_end = _grown(self._read_end, self.controllers)
        return [self._children[f"ctrl{c}"] for c in range(self.controllers)]

    def _check(
        self, addresses: np.ndarray, size: int, outstanding: int | None
    ) -> tuple[np.ndarray, float]:
        addr = np.asarray(addresses, dtype=np.int64).ravel()
        if size <= 0:
            raise ValueError(f"{self.path}: request size must be positive, got {size}")
        if addr.size and addr.min() < 0:
            raise ValueError(f"{self.path}: negative address")
        if self.interleave % self.access_unit:
            raise ConfigError(
                f"{self.path}.interleave: {self.interleave} B is not a multiple of "
                f"access_unit {self.access_unit} B"
            )
        if outstanding is not None and outstanding < 1:
            raise ValueError(f"{self.path}: outstanding must be >= 1, got {outstanding}")
        return addr, float(outstanding) if outstanding else math.inf

    def _split(self, addr: np.ndarray, size: int) -> _Lines:
        unit, n = self.access_unit, self.controllers
        first = addr // unit
        count = (addr + size - 1) // unit - first + 1
        if int(count.max()) == 1:
            request, line, start = np.arange(addr.size), first, addr
        else:
            request = np.repeat(np.arange(addr.size), count)
            offset = np.arange(request.size) - np.repeat(np.cumsum(count) - count, count)
            line, start = first[request] + offset, addr[request]
        lo = np.maximum(start, line * unit)
        hi = np.minimum(start + size, (line + 1) * unit)
        ctrl = (line * unit // self.interleave) % n
        # small keys make numpy's stable argsort a radix sort
        by_ctrl = np.argsort(ctrl.astype(np.int16) if n < 2**15 else ctrl, kind="stable")
        per_ctrl = np.bincount(ctrl, minlength=n)
        pos = np.empty(line.size, dtype=np.int64)
        pos[by_ctrl] = np.arange(line.size) - np.repeat(np.cumsum(per_ctrl) - per_ctrl, per_ctrl)
        hit, episode, order = _buffer_hits(line, pos, self.buffer_lines)
        return _Lines(request, line, hi - lo, ctrl, pos, hit, episode, order)

    def _account_reads(self, ctrls, lines: _Lines, media, span_c, stalled) -> None:
        n = len(span_c)
        requested = np.bincount(lines.ctrl, weights=lines.cover, minlength=n)
        media_c = np.bincount(lines.ctrl, weights=media, minlength=n)
        reqs = np.bincount(lines.ctrl, minlength=n)
        hits = np.bincount(lines.ctrl, weights=lines.hit, minlength=n)
        stalls = np.bincount(lines.ctrl, weights=stalled, minlength=n)
        for c in range(n):
            ctrl = ctrls[c]
            ctrl.bytesRead += float(requested[c])
            ctrl.mediaBytesRead += float(media_c[c])
            ctrl.readReqs += int(reqs[c])
            ctrl.bufferHits += int(hits[c])
            ctrl.rawStalls += int(stalls[c])
            ctrl.busyTicks += float(span_c[c])

    def _draining(self, lines: _Lines, now: int) -> tuple[np.ndarray, np.ndarray]:
        """Which line accesses hit a line whose drain completes after ``now``, and when
        each such line is drained (needles go in sorted, which keeps searchsorted fast)."""
        size = lines.line.size
        if self._pending_lines.size == 0:
            return np.zeros(size, dtype=bool), np.zeros(size, dtype=np.int64)
        order = lines.order if lines.order is not None else np.argsort(lines.line, kind="stable")
        idx = np.empty(size, dtype=np.int64)
        idx[order] = np.searchsorted(self._pending_lines, lines.line[order])
        idx = np.minimum(idx, self._pending_lines.size - 1)
        done = self._pending_done[idx]
        return (self._pending_lines[idx] == lines.line) & (done > now), done

    def _reads_backlog(self, now: int, n: int) -> np.ndarray:
        """Per controller, ticks of earlier ops' reads still being served at ``now``."""
        return np.maximum(self._read_end[:n] - now, 0).astype(float)

    def _backlog(self, now: int, n: int) -> np.ndarray:
        """Per controller, ticks of earlier writes still draining at ``now``."""
        return np.maximum(self._drain_end[:n] - now, 0).astype(float)

    def _remember(self, line: np.ndarray, done: np.ndarray, ctrl: np.ndarray, now: int) -> None:
        """Add written lines (absolute drain ticks) to the draining set; forget drained ones."""
        keep = self._pending_done > now
        lines = np.concatenate([self._pending_lines[keep], line])
        dones = np.concatenate([self._pending_done[keep], done])
        order = np.lexsort((dones, lines))
        lines, dones = lines[order], dones[order]
        last = np.r_[lines[1:] != lines[:-1], True]
        self._pending_lines, self._pending_done = lines[last], dones[last]
        ends = np.zeros(self.controllers, dtype=np.int64)
        np.maximum.at(ends, ctrl, done)
        n = self.controllers  # fewer than at construction after a --set (arrays only grow)
        self._drain_end[:n] = np.maximum(self._drain_end[:n], ends)


def _grown(values: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros(size, dtype=np.int64)
    grown[: values.size] = values
    return grown


def _stream_span(
    bytes_c: np.ndarray, ops_c: np.ndarray, latency: int, bandwidth: float, queue: int
) -> np.ndarray:
    """Per controller: first access's latency, then the rest at the slower of the media
    bandwidth and ``queue`` accesses per latency (Little's law)."""
    rest = np.divide(ops_c - 1, ops_c, out=np.zeros_like(bytes_c), where=ops_c > 0)
    transfer = bytes_c * rest * TICKS_PER_SECOND / bandwidth
    window = np.maximum(ops_c - 1, 0) * latency / queue
    return np.where(ops_c > 0, latency + np.maximum(transfer, window), 0.0)


def _window_span(requests: int, latency: int, outstanding: float) -> float:
    """The requester's bound: ``outstanding`` requests in flight per latency."""
    return latency + (requests - 1) * latency / outstanding


def _buffer_hits(
    line: np.ndarray, pos: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A line access hits the controller's line buffer when the same line was accessed
    at most ``window`` accesses earlier in that controller's stream (a line maps to one
    controller, so a stable sort by line keeps each line's accesses in issue order).
    Returns the hit mask, per access its episode (first miss + following hits), and
    the sort order by line (None when no buffer means no sort was needed)."""
    size = line.size
    if window == 0:
        return np.zeros(size, dtype=bool), np.arange(size), None
    order = np.argsort(line, kind="stable")
    sorted_line, sorted_pos = line[order], pos[order]
    hit_sorted = np.zeros(size, dtype=bool)
    hit_sorted[1:] = (sorted_line[1:] == sorted_line[:-1]) & (
        sorted_pos[1:] - sorted_pos[:-1] <= window
    )
    hit = np.empty(size, dtype=bool)
    hit[order] = hit_sorted
    episode = np.empty(size, dtype=np.int64)
    episode[order] = np.cumsum(~hit_sorted) - 1
    return hit, episode, order
