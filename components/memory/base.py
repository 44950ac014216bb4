"""Memory devices: what a request stream needs of each controller, derived from the trace.

A device is N controllers behind an address interleave. Each request is split into the
device's internal access units ("lines": 64 B DRAM bursts, 256 B Optane XPLines, 4 KiB
SSD pages). Each controller has a buffer of ``buffer_lines`` line entries, direct-mapped
by the controller-local line number: a read of a line still in its entry is served from
the buffer, writes to a line in its entry combine, and only the rest reach the media
(without a buffer, writes to a line still in the WPQ merge there). A line written back
whose combined writes never covered it whole is first read (read-modify-write). Reads
and writes of every op share each controller's media time with their own costs
(``access_unit / ctrl_read_bandwidth`` per line read, ``access_unit /
ctrl_write_bandwidth`` per line written).

A stream is a ``MemStream``: media ticks per controller, the requester's bound (its
``outstanding`` window: Little's law), the latency of its last request. The flow network
(components/sim/flows.py) decides how fast it goes next to everything else. Writes are
posted: a write is done for the requester when the controller's write pending queue
(WPQ) accepts it, i.e. once all but the WPQ entries it found free have drained; those
drain afterwards in a flow of their own. The WPQ is shared: a stream that starts while
another is still being accepted finds it full, one after others' drains finds what
they still hold taken. Under ADR a write is durable at
acceptance, under eADR/GPF at issue; each request's persist tick comes from the
stream's actual progress. A read of a line that an earlier write has not drained yet
waits for that write's drain progress (read-after-write stall). All of it is numpy over
the stream; there is no per-request Python code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.memory.digest import (
    digest_reads,
    digest_writes,
    drain_keys,
    foresee_reads,
    foresee_writes,
    held_max,
    held_max_sorted,
    line_span,
    lines_of,
    sorted_in_lines,
)
from components.memory.memo import DigestMemo
from components.memory.stages import MemStream
from components.memory.streams import (
    Geometry,
    accepted_fraction,
    as_int64,
    distinct_lines,
    rank_in_group,
)
from components.memory.write_stream import WriteStream
from components.sim.loaded import FlowLoad
from components.sim.params import ConfigError, Enum, MemorySize
from components.sim.simobject import SimObject
from components.sim.stats import add_each
from components.sim.units import TICKS_PER_SECOND


@dataclass(frozen=True)
class IssuedStream:
    """A request stream as an op issued it (for replaying the same trace elsewhere)."""

    kind: str  # "read" or "write"
    addresses: np.ndarray
    size: int
    outstanding: float | None


class MemoryController(SimObject):
    """Stats of one controller (``pmem.ctrl0.bytesRead``); its timing is the network's."""

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.bytesRead = self.scalar("bytesRead", "bytes requested by reads", "Byte", served=True)
        self.bytesWritten = self.scalar(
            "bytesWritten", "bytes requested by writes", "Byte", served=True
        )
        self.mediaBytesRead = self.scalar(
            "mediaBytesRead",
            "bytes read from the media (incl. read-modify-write)",
            "Byte",
            served=True,
        )
        self.mediaBytesWritten = self.scalar(
            "mediaBytesWritten", "bytes written to media", "Byte", served=True
        )
        self.readReqs = self.scalar("readReqs", "line accesses by reads", "Count", served=True)
        self.writeReqs = self.scalar("writeReqs", "line accesses by writes", "Count", served=True)
        self.bufferHits = self.scalar(
            "bufferHits", "reads served by the line buffer", "Count", served=True
        )
        self.combinedWrites = self.scalar(
            "combinedWrites", "writes merged into a buffered line", "Count", served=True
        )
        self.rmwReads = self.scalar(
            "rmwReads", "partial-line writes needing a media read", "Count", served=True
        )
        self.rawStalls = self.scalar(
            "rawStalls", "reads of lines still draining", "Count", served=True
        )
        self.readAmplification = self.formula(
            "readAmplification",
            "media bytes read per requested byte",
            "Ratio",
            lambda: self.mediaBytesRead.value / self.bytesRead.value if self.bytesRead.value else 0,
        )


MAX_MODULES_PER_CONTROLLER = 8
"""Modules (DIMMs, drives) one controller may front: a DDR channel takes 2-3 DIMMs, an
NVMe controller one drive; 8 is generous, and a tinier module_capacity would model
thousands of modules (and their idle power) for tables of any size."""


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

    arbitration = Enum(
        "requests",
        "how a controller shares its media between concurrent streams: requests (each gets "
        "equal turns, so a stream of costly requests takes more of the time) or time (each "
        "gets an equal share of media time, processor sharing)",
        "gem5 MemCtrl/NVMInterface serve queued reads and writes in turn (FR-FCFS); NVMe "
        "round-robin arbitration of submission queues; time: the fluid max-min of "
        "flow-level simulators (docs/architecture.md, docs/gem5.md)",
        choices=("requests", "time"),
    )

    persist_domain = "adr"  # devices without a `domain` parameter persist at WPQ entry
    media_sequence = False  # whether _busy_ticks needs the media accesses' sequence

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.dynamicEnergy = self.scalar(
            "dynamicEnergy", "media access energy", "Joule", served=True
        )
        self.readOps = self.scalar("readOps", "read ops (request streams)", "Count")
        self.writeOps = self.scalar("writeOps", "write ops (request streams)", "Count")
        object.__setattr__(self, "active_writes", [])
        object.__setattr__(self, "write_listeners", [])
        object.__setattr__(self, "stream_listeners", [])
        object.__setattr__(self, "event_source", None)
        object.__setattr__(self, "_digests", DigestMemo())
        self._controllers()

    # ----- analytical figures ---------------------------------------------------
    def check_modules(self) -> None:
        """Refuse a module_capacity so small that holding ``capacity`` takes more than
        MAX_MODULES_PER_CONTROLLER modules a controller (no channel takes that many)."""
        needed = -(-self.capacity // self.module_capacity)
        most = MAX_MODULES_PER_CONTROLLER * self.controllers
        if needed > most:
            raise ConfigError(
                f"{self.path}.module_capacity: bad value {self._raw('module_capacity')!r}: "
                f"holding {self.capacity:,} B (its tables and logs) takes {needed:,} modules, "
                f"more than {MAX_MODULES_PER_CONTROLLER} per controller ({most}); "
                "raise module_capacity or controllers"
            )

    def _raw(self, name: str):
        return self._param_raw.get(name, getattr(type(self), name).default)

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

    def resource(self, ctrl: int) -> str:
        """Name of one controller's media in the flow network (and in stats)."""
        return f"{self.path}.ctrl{ctrl}"

    def bind(self, event_source: Callable[[], object]) -> None:
        """Give the device the engine's event factory (RAW gates on draining writes)."""
        object.__setattr__(self, "event_source", event_source)

    # ----- streams ------------------------------------------------------------------
    def read(
        self,
        addresses: np.ndarray,
        size: int,
        outstanding: float | None = None,
        *,
        distinct: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> MemStream:
        """The needs of a stream of reads of ``size`` bytes each, issued in order now.
        ``distinct``: the stream's distinct addresses, sorted, and how many of its
        requests go to each, where the caller has them (a gather of table rows): a read
        that meets draining writes then checks each of those once, in one merge."""
        addr, window, span = self._check(addresses, size, outstanding)
        ctrls = self._controllers()
        if addr.size == 0:
            return MemStream(self, {}, {}, 0.0, 0, 0)
        self._issued("read", addr, size, outstanding)
        draining = self._draining(span)
        view = self._sorted_view(addr, size, distinct) if draining else None
        digest = digest_reads(
            addr,
            size,
            self.geometry,
            self.buffer_lines,
            bool(draining) and view is None,
            self.media_sequence,
            self._digests,
        )
        unit = self.access_unit
        misses_c, hits, reqs = digest.misses, digest.hits, digest.accesses
        media_c = misses_c * unit
        need_c = self._media_ticks(
            media_c / self.ctrl_read_bandwidth,
            misses_c,
            self.read_latency,
            self.read_queue,
            digest.missed_ctrl,
            digest.missed_local,
        )
        gates, stalls = self._raw_gates(digest.line, view, draining)
        latency = self._read_latency(addr, size, int(hits.sum()))
        # a window under one request waits a media read per group of lines, not the
        # request's serial media time (its lines in flight overlap)
        bound = latency if window >= 1 else self.read_latency
        requested = digest.requested
        _add_per_controller(
            ctrls,
            bytesRead=[float(v) for v in requested.tolist()],
            mediaBytesRead=[float(v) for v in media_c.tolist()],
            readReqs=[int(v) for v in reqs.tolist()],
            bufferHits=[int(v) for v in hits.tolist()],
            rawStalls=[int(v) for v in stalls.tolist()],
        )
        energy = float(int(misses_c.sum()) * unit) * self.read_energy
        self.readOps += 1
        self.dynamicEnergy += energy
        # the idle latency includes one line's media time, which the flow already serves
        service = unit * TICKS_PER_SECOND / self.ctrl_read_bandwidth
        return MemStream(
            self,
            self.by_resource(need_c),
            self.by_resource(media_c),
            self._window_ticks(addr.size, bound, window),
            max(math.floor(self.read_latency - service), 0),
            int(addr.size),
            gates,
            turn=self._turn(need_c, reqs),
            load=self._load("read", addr, size, window, bound),
        )

    def write(
        self, addresses: np.ndarray, size: int, outstanding: float | None = None
    ) -> MemStream:
        """The needs of a stream of posted writes, and its acceptance/drain bookkeeping."""
        addr, window, span = self._check(addresses, size, outstanding)
        self._controllers()
        if addr.size == 0:
            return MemStream(self, {}, {}, 0.0, 0, 0)
        self._issued("write", addr, size, outstanding)
        plan = self._burst_plan(addr, size) or self._line_plan(addr, size)
        return self._posted(addr, size, window, span, plan)

    def _line_plan(self, addr: np.ndarray, size: int) -> _WritePlan:
        """Any stream: split into lines, combined in the buffer (merged in the WPQ
        without one), one media write per episode; a request is accepted when its last
        line's write may enter the WPQ."""
        d = digest_writes(
            addr, size, self.geometry, self.buffer_lines, self.write_queue, self._digests
        )
        return _WritePlan(
            d.line, d.ctrl, d.rank, d.writes_c, d.rmw_c, d.count_c, d.covered_c, d.accept
        )

    def _burst_plan(self, addr: np.ndarray, size: int) -> _WritePlan | None:
        """Whole-line bursts going up through memory, each within one interleave chunk
        (log appends): no line is written twice or partly, so everything follows per
        request, without splitting into lines first. None when the stream is not so."""
        if not self._bursts(addr, size):
            return None
        unit, chunk = self.access_unit, self.interleave
        n, per = self.controllers, size // unit
        ctrl = (addr // chunk) % n
        per_ctrl = np.bincount(ctrl, minlength=n)
        nth = rank_in_group(ctrl, n)  # the request's place on its controller
        offsets = np.arange(per, dtype=np.int64)
        lines = ((addr // unit)[:, None] + offsets).ravel()
        rank = (nth[:, None] * per + offsets).ravel()
        writes_c = per_ctrl * float(per)

        def accept(head_c: np.ndarray, free_c: np.ndarray) -> np.ndarray:
            return accepted_fraction(nth * per + per - 1, head_c[ctrl], free_c[ctrl])

        return _WritePlan(
            lines,
            np.repeat(ctrl, per),
            rank,
            writes_c,
            np.zeros(n),
            per_ctrl * per,
            per_ctrl * float(size),
            accept,
        )

    def _bursts(self, addr: np.ndarray, size: int) -> bool:
        """Whether a write stream is whole-line bursts, each within one interleave chunk,
        no line written twice (_burst_plan's streams)."""
        unit, chunk = self.access_unit, self.interleave
        return not (
            size > chunk
            or not distinct_lines(addr, size, unit)
            or np.any(addr % chunk + size > chunk)
        )

    def pending_keys(self, rows: np.ndarray, size: int) -> list[tuple[WriteStream, np.ndarray]]:
        """Per write stream still draining lines that ``size``-byte requests at ``rows``
        touch: the drain position (WriteStream.drained) each request waits for, 0 where
        it waits for none. For a requester that retires in order (an in-order gather
        pipeline), which must know where in its stream each wait falls, not only the
        last one (``read``'s gates)."""
        addr, _, span = self._check(rows, size, None)
        unit = self.access_unit
        first = lines_of(addr, unit)
        touched = int((lines_of(addr + (size - 1), unit) - first).max(initial=0)) + 1
        found = []
        for stream in self._draining(span):
            waiting, keys = stream.pending_lines()
            if not waiting.size:
                continue
            wait = np.zeros(addr.size)
            for step in range(touched):  # a request spans at most a few lines
                line = np.minimum(first + step, lines_of(addr + (size - 1), unit))
                slot = np.minimum(np.searchsorted(waiting, line), waiting.size - 1)
                wait = np.maximum(wait, np.where(waiting[slot] == line, keys[slot], 0.0))
            if wait.any():
                found.append((stream, wait))
        return found

    def foresee_read(self, addresses: np.ndarray, size: int) -> None:
        """Digest now a stream of reads of ``size`` bytes at read-only ``addresses`` that
        the engine will issue later (MemoryDevice.read then finds it made): the batch
        maker's thread calls it (simulate/run/prefetch.py). Only what depends on the
        addresses and the geometry is made; nothing of the device's state is read or
        changed."""
        if self._foreseeable(addresses, size):
            foresee_reads(addresses, size, self.geometry, self.buffer_lines, self._digests)

    def foresee_write(self, addresses: np.ndarray, size: int) -> None:
        """As foresee_read, for a stream of writes (MemoryDevice.write)."""
        if self._foreseeable(addresses, size) and not self._bursts(addresses, size):
            foresee_writes(addresses, size, self.geometry, self.buffer_lines, self._digests)

    def _foreseeable(self, addresses: np.ndarray, size: int) -> bool:
        """Whether read or write would digest these addresses as they are (int64, one
        dimension), and accept them (else they are refused when issued)."""
        if type(addresses) is not np.ndarray or addresses.dtype != np.int64:
            return False
        if addresses.ndim != 1 or not addresses.size or size <= 0:
            return False
        return self._span(addresses, size)[0] >= 0

    def _span(self, addr: np.ndarray, size: int) -> tuple[int, int]:
        """digest.line_span, kept for read-only arrays: a batch's rows are read twice and
        written once, and the batch maker's thread finds it ahead."""
        unit = self.access_unit
        return self._digests.get("span", addr, (size, unit), lambda: line_span(addr, size, unit))

    def _posted(
        self, addr: np.ndarray, size: int, window: float, span: tuple[int, int], plan: _WritePlan
    ) -> MemStream:
        """Media needs, WPQ acceptance, drain order and stats of a planned write stream
        whose lines lie in ``span``."""
        ctrls = self._controllers()
        n, unit, queue = self.controllers, self.access_unit, self.write_queue
        writes_c, rmw_c = plan.writes_c, plan.rmw_c
        media_ticks = self._write_media_seconds(writes_c, rmw_c)
        need_c = self._media_ticks(
            media_ticks,
            writes_c,
            self.write_latency,
            queue,
            plan.ctrl,
            self.geometry.local(plan.line) if self.media_sequence else None,
            plan.rank,
        )
        free_c = self._wpq_free()
        visible_c = np.maximum(writes_c - free_c, 0)
        idle_c = np.maximum(writes_c - queue, 0)  # what an empty WPQ would leave visible
        share = np.divide(visible_c, writes_c, out=np.zeros(n), where=writes_c > 0)
        # a media write completes at (rank + 1) of its controller's writes
        key = drain_keys(plan.rank, plan.ctrl, visible_c, writes_c, free_c)
        # accepted once the media has drained all but a WPQ-full before it, and not
        # before the requester's window lets it issue
        latency = self.write_latency
        stream = WriteStream(
            self,
            addr,
            size,
            lambda: plan.accept(visible_c, free_c),
            latency / window if math.isfinite(window) else 0.0,
            plan.line,
            key,
            self.by_resource(need_c * (1 - share)),
            writes_c,
            np.divide(need_c, writes_c, out=np.zeros(n), where=writes_c > 0),
            visible_c,
            span,
            window,
        )
        turn = self._turn(need_c, plan.count_c)
        stream.drain.weight = turn or 1.0  # the drain needs only the controllers
        load = self._load("write", addr, size, window, self.write_latency)
        stream.drain.load = load
        self.active_writes.append(stream)
        _add_per_controller(
            ctrls,
            bytesWritten=[float(v) for v in plan.covered_c.tolist()],
            writeReqs=[int(v) for v in plan.count_c.tolist()],
            mediaBytesWritten=[float(v) for v in (writes_c * unit).tolist()],
            mediaBytesRead=[float(v) for v in (rmw_c * unit).tolist()],
            rmwReads=[int(v) for v in rmw_c.tolist()],
            combinedWrites=[int(v) for v in (plan.count_c - writes_c).tolist()],
        )
        energy = unit * (writes_c.sum() * self.write_energy + rmw_c.sum() * self.read_energy)
        self.writeOps += 1
        self.dynamicEnergy += float(energy)
        return MemStream(
            self,
            self.by_resource(need_c * share),
            self.by_resource((writes_c + rmw_c) * unit),
            self._window_ticks(addr.size, self.write_latency, window),
            self.write_latency,
            int(addr.size),
            [],
            [stream],
            turn,
            None
            if np.array_equal(idle_c, visible_c)
            else self.by_resource(
                need_c * np.divide(idle_c, writes_c, out=np.zeros(n), where=writes_c > 0)
            ),
            load,
        )

    # ----- internals ------------------------------------------------------------
    def _read_latency(self, addr: np.ndarray, size: int, hits: int) -> float:
        """Mean idle latency of the stream's requests, its window bound's unit: every
        request at ``read_latency`` here; Pmem serves buffered lines faster."""
        return self.read_latency

    def _load(
        self, kind: str, addr: np.ndarray, size: int, window: float, latency: float
    ) -> FlowLoad | None:
        """What the flow network must know of a stream whose service depends on the load
        (components/sim/loaded.py); None: a fixed-speed device."""
        return None

    def _write_media_seconds(self, writes_c: np.ndarray, rmw_c: np.ndarray) -> np.ndarray:
        """Media seconds per controller of a write stream's line writes and the reads of
        its read-modify-writes, one after the other."""
        unit = self.access_unit
        return writes_c * unit / self.ctrl_write_bandwidth + rmw_c * unit / self.ctrl_read_bandwidth

    def _issued(self, kind: str, addr: np.ndarray, size: int, outstanding: float | None) -> None:
        for listener in self.stream_listeners:
            listener(IssuedStream(kind, addr, size, outstanding))

    def effective_domain(self) -> str:
        return getattr(self, "domain", self.persist_domain)

    def _controllers(self) -> list[MemoryController]:
        """Controller children ctrl0..ctrlN-1, created as ``controllers`` grows (the
        list is kept: every stream asks for it)."""
        held = self.__dict__.get("_controller_list")
        if held is not None and len(held) == self.controllers:
            return held
        for c in range(self.controllers):
            if f"ctrl{c}" not in self._children:
                setattr(self, f"ctrl{c}", MemoryController())
        held = [self._children[f"ctrl{c}"] for c in range(self.controllers)]
        object.__setattr__(self, "_controller_list", held)
        return held

    def _wpq_free(self) -> np.ndarray:
        """WPQ entries per controller that a write stream starting now finds free: none
        where another stream is still being accepted (its backlog keeps the queue full,
        so every write of the new one waits for a drained slot, as in gem5's MemCtrl),
        else the queue less what earlier streams still hold for their drain."""
        queue = self.write_queue
        held = np.zeros(self.controllers)
        for stream in self.active_writes:
            visible = stream.visible
            if visible is None or visible.start < 0:
                continue  # not started: a stream of the same stage
            if visible.end < 0:
                held = np.where(stream.backlogged, queue, held + stream.held)
            elif stream.drain.start >= 0:
                held += stream.held * (1.0 - stream.drain.network.progress(stream.drain))
        return np.clip(queue - held, 0, queue)

    def _turn(self, need_c: np.ndarray, requests_c: np.ndarray) -> float | None:
        """Under ``requests`` arbitration every stream gets equal turns, so its share of
        a contended controller's media time follows its media ticks per request (on its
        busiest controller, in units of one line read). None under ``time``: every
        stream gets an equal share."""
        if self.arbitration != "requests" or not need_c.any():
            return None
        busiest = int(np.argmax(need_c))
        line_read = self.access_unit * TICKS_PER_SECOND / self.ctrl_read_bandwidth
        return float(need_c[busiest] / max(requests_c[busiest], 1) / line_read)

    def by_resource(self, per_ctrl: np.ndarray) -> dict[str, float]:
        """Per-controller figures by resource name, the controllers without any left out
        (needs are never negative; an idle correction may be)."""
        names = self.resource_names()
        return {names[c]: float(v) for c, v in enumerate(per_ctrl.tolist()) if v != 0}

    def resource_names(self) -> list[str]:
        """resource(c) of every controller, kept while the path and count hold."""
        path, memo = self.path, self.__dict__.get("_names_memo")
        if memo is None or memo[0] != path or len(memo[1]) != self.controllers:
            memo = (path, [self.resource(c) for c in range(self.controllers)])
            object.__setattr__(self, "_names_memo", memo)
        return memo[1]

    def _media_ticks(
        self,
        seconds_c: np.ndarray,
        accesses_c: np.ndarray,
        latency: int,
        queue: int,
        ctrl: np.ndarray,
        local: np.ndarray,
        position: np.ndarray | None = None,
    ) -> np.ndarray:
        """Media ticks per controller, at least ``queue`` accesses per latency (Little's
        law over the controller's queue). ``ctrl``, ``local``: the media accesses'
        controllers and controller-local lines, issued in array order on each controller
        (or at ``position`` among its accesses), for devices whose media time depends on
        the sequence (DRAM rows and ranks)."""
        busy = self._busy_ticks(seconds_c, ctrl, local, position)
        return np.maximum(busy, accesses_c * latency / queue)

    def _busy_ticks(
        self,
        seconds_c: np.ndarray,
        ctrl: np.ndarray,
        local: np.ndarray,
        position: np.ndarray | None,
    ) -> np.ndarray:
        """Ticks each controller's media is busy with the accesses: their transfer time
        here; devices whose media time depends on the sequence override it."""
        return seconds_c * TICKS_PER_SECOND

    @staticmethod
    def _window_ticks(requests: int, latency: int, window: float) -> float:
        """The requester's bound: ``window`` requests in flight per latency. A window
        under one request (a thread whose fill buffers hold part of a large request)
        takes each request in ``1 / window`` groups of lines, one latency each."""
        if not math.isfinite(window):
            return 0.0
        if window < 1:
            return (requests / window - 1) * latency
        return (requests - 1) * latency / window

    def _check(
        self, addresses: np.ndarray, size: int, outstanding: float | None
    ) -> tuple[np.ndarray, float, tuple[int, int]]:
        """The stream's addresses as int64, the requester's window and the first and
        last line the stream touches; refuses what no device could serve."""
        addr = addresses
        if type(addr) is not np.ndarray or addr.dtype != np.int64 or addr.ndim != 1:
            # np.asarray makes a new array object of an int64 array whose dtype object
            # is not numpy's own (as numba's results have); ravel does of any
            addr = np.asarray(addresses, dtype=np.int64).ravel()
        if size <= 0:
            raise ValueError(f"{self.path}: request size must be positive, got {size}")
        span = self._span(addr, size)
        if span[0] < 0:
            raise ValueError(f"{self.path}: negative address")
        if self.interleave % self.access_unit:
            raise ConfigError(
                f"{self.path}.interleave: {self.interleave} B is not a multiple of "
                f"access_unit {self.access_unit} B"
            )
        if outstanding is not None and not outstanding > 0:
            raise ValueError(f"{self.path}: outstanding must be > 0, got {outstanding}")
        return addr, float(outstanding) if outstanding else math.inf, span

    @property
    def geometry(self) -> Geometry:
        """How lines lie over the controllers, from the parameters as they are now."""
        return Geometry(self.access_unit, self.interleave, self.controllers)

    def _draining(self, span: tuple[int, int]) -> list[WriteStream]:
        """The write streams still draining whose lines a read stream's ``span`` of
        lines meets."""
        low, high = span
        return [s for s in self.active_writes if s.span[1] >= low and s.span[0] <= high]

    def _sorted_view(
        self, addr: np.ndarray, size: int, distinct: tuple[np.ndarray, np.ndarray] | None
    ) -> tuple[np.ndarray, np.ndarray | None] | None:
        """A read stream as sorted addresses whose requests stay within one line, and
        the accesses at each (None: one each): the caller's ``distinct`` addresses, or
        ``addr`` itself where it does not go down (an update's sorted rows); None where
        neither is so (then each access's line is checked)."""
        if distinct is None:
            rows, counts = addr, None
        else:
            rows, counts = as_int64(distinct[0]), as_int64(distinct[1])
            if rows.size != counts.size or int(counts.sum()) != addr.size:
                raise ValueError(
                    f"{self.path}: the distinct rows given count {int(counts.sum())} "
                    f"requests in {rows.size} rows, the stream has {addr.size}"
                )
        return (rows, counts) if sorted_in_lines(rows, size, self.access_unit) else None

    def _raw_gates(
        self,
        line: np.ndarray | None,
        view: tuple[np.ndarray, np.ndarray | None] | None,
        draining: list[WriteStream],
    ) -> tuple[list, np.ndarray]:
        """Events a read must wait for, the drain of lines the ``draining`` writes still
        hold; and per controller, its accesses that wait. The read is each access's
        ``line``, or where it has one its ``view`` (_sorted_view: sorted addresses and
        the accesses at each), checked in one merge per write, not a search per access."""
        n = self.controllers
        stalls = np.zeros(n, dtype=np.int64)
        if not draining:
            return [], stalls
        stalled = np.zeros((line if view is None else view[0]).size, dtype=bool)
        gates = []
        for stream in draining:
            waiting, keys = stream.pending_lines()
            if not waiting.size:
                continue
            if view is None:
                key = held_max(waiting, keys, line, stalled)
            else:
                key = held_max_sorted(waiting, keys, *view, self.geometry, stalled, stalls)
            if key is not None:
                gates.append(stream.drained(key))
        if view is None:
            stalls = np.bincount(self.geometry.ctrl(line[stalled]), minlength=n)
        return gates, stalls


@dataclass(frozen=True)
class _WritePlan:
    """What a write stream does at the media: per media write its line, controller and
    rank among that controller's writes; per controller the media writes, RMW reads,
    line accesses and bytes covered; ``accept(head_c, free_c)``: per request, the
    progress of the visible flow at which the WPQ accepts it, given each controller's
    writes that wait for a drained slot and the WPQ entries the stream found free."""

    line: np.ndarray
    ctrl: np.ndarray
    rank: np.ndarray
    writes_c: np.ndarray
    rmw_c: np.ndarray
    count_c: np.ndarray
    covered_c: np.ndarray
    accept: Callable[[np.ndarray, np.ndarray], np.ndarray]


def _add_per_controller(ctrls: list[MemoryController], **amounts: list) -> None:
    """Each named counter of each controller += its amount (one list per counter)."""
    for name, values in amounts.items():
        add_each([getattr(ctrl, name) for ctrl in ctrls], values)
