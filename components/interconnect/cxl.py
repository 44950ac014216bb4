"""CXL links, switches, paths and the three sub-protocols as transaction streams.

Every function returns a Stage: what a whole stream of transactions needs of each link
direction it crosses (serialization of its flits, both ways: requests out, responses
back), of the agent that keeps its lines in flight (a DCOH's trackers, Little's law:
``max_outstanding`` lines per first-line round trip), and the first line's unloaded
latency. The flow network decides when the stream ends, next to everything else on the
same links. Message headers are packed bit-exact into flit payload, ignoring
slot-format granularity (a small, documented optimism).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from components.interconnect.link import DIRECTIONS, SerialLink
from components.sim.flows import Flow
from components.sim.params import ConfigError, Int, Latency, Power
from components.sim.schedule import Stage
from components.sim.simobject import SimObject

LINE_BYTES = 64  # CXL.cache / CXL.mem transfer granule (CXL 2.0 spec §3.2, §3.3)

# Message (header) sizes in bits, 68B-flit mode; CXL 2.0 spec §4.2 message-size table.
HEADER_BITS = {
    "D2H Req": 79,
    "D2H Rsp": 20,
    "D2H Data": 17,
    "H2D Req": 72,
    "H2D Rsp": 32,
    "H2D Data": 24,
    "M2S Req": 87,
    "M2S RwD": 87,
    "S2M NDR": 30,
    "S2M DRS": 40,
}
TLP_HEADER_BYTES = 16  # CXL.io memory write: PCIe 4DW TLP header (PCIe base spec §2.2)

# Flit layouts (bytes, non-payload bytes per flit).
# 68B: 2 B protocol ID + 64 B of slots + 2 B CRC (CXL 2.0 spec §4.2, §6.2).
# 256B standard: 2 B flit header + 240 B slots + 8 B CRC + 6 B FEC (CXL 3.0 spec §6.2.3).
# 256B latency-optimized: 2 B header + 236 B slots + 2x6 B CRC + 6 B FEC (CXL 3.0 §6.2.3.1).
FLIT_MODES: dict[str, dict[str, str]] = {
    "68B": {"flit_bytes": "68B", "flit_overhead_bytes": "4B"},
    "256B": {"flit_bytes": "256B", "flit_overhead_bytes": "16B"},
    "256B-LO": {"flit_bytes": "256B", "flit_overhead_bytes": "20B"},
}


class CxlLink(SerialLink):
    """A CXL x16 link on the PCIe 5.0 PHY (32 GT/s, 128b/130b), 68B flits by default."""

    propagation_latency = Latency(
        "40ns",
        "one-way latency through both CXL ports (PHY, link/ARB-MUX, transaction layer)",
        "Pond ASPLOS'23: 70-90 ns added load latency direct-attached; half of 80 ns round trip",
    )

    @classmethod
    def with_flit_mode(cls, mode: str, **overrides: Any) -> CxlLink:
        """A link with the flit layout of a CXL flit mode (68B, 256B, 256B-LO)."""
        if mode not in FLIT_MODES:
            raise ConfigError(f"CxlLink: unknown flit mode {mode!r}; one of {sorted(FLIT_MODES)}")
        return cls(**{**FLIT_MODES[mode], **overrides})


class CxlSwitch(SimObject):
    """A CXL switch: adds a port-to-port latency on every crossing."""

    port_latency = Latency(
        "100ns",
        "ingress-to-egress latency of one switch crossing",
        "The Next Platform on CXL switches (~100-120 ns per crossing); Pond ASPLOS'23 §2",
    )
    static_power = Power(
        "10W",
        "switch chip power while on",
        "assumption: PCIe/CXL switch chips of this lane count are specified at tens of W",
    )

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.bytesForwarded = self.scalar(
            "bytesForwarded", "payload bytes switched", "Byte", served=True
        )


class CxlPath:
    """The links (each with the direction of forward traffic) and switches a
    requester's messages cross to reach their target. Responses take it in reverse."""

    def __init__(
        self, hops: Sequence[tuple[SerialLink, str]], switches: Sequence[CxlSwitch] = ()
    ) -> None:
        if not hops:
            raise ValueError("a CXL path needs at least one link")
        for _, direction in hops:
            if direction not in DIRECTIONS:
                raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        self.hops = tuple(hops)
        self.switches = tuple(switches)

    def one_way_ticks(self, nbytes: int = LINE_BYTES) -> int:
        """Unloaded latency of one message of nbytes (store-and-forward per link)."""
        links = sum(link.transfer_ticks(nbytes, d) for link, d in self.hops)
        return links + sum(switch.port_latency for switch in self.switches)

    def round_trip_ticks(self, request_bytes: int, response_bytes: int) -> int:
        return self.one_way_ticks(request_bytes) + self.one_way_ticks(response_bytes)

    @property
    def bandwidth(self) -> float:
        """Payload bytes/s of the bottleneck link."""
        return min(link.effective_bandwidth for link, _ in self.hops)

    def needs(self, forward_bytes: int, backward_bytes: int = 0) -> dict[str, float]:
        """Serialization ticks a stream needs of each link direction: ``forward_bytes``
        of payload along the path, ``backward_bytes`` of responses against it. Every
        hop carries all of it (flits are forwarded as they arrive: the bottleneck link
        sets the pace)."""
        out: dict[str, float] = {}
        for link, direction in self.hops:
            for nbytes, way in ((forward_bytes, direction), (backward_bytes, _reverse(direction))):
                if nbytes > 0:
                    key = link.resource(way)
                    out[key] = out.get(key, 0.0) + link.serialization_ticks(nbytes)
        return out

    def record(self, nbytes: int, forward: bool = True) -> None:
        """Count nbytes of payload crossing every link and switch."""
        for link, direction in self.hops:
            link.record(nbytes, direction if forward else _reverse(direction))
        for switch in self.switches:
            switch.bytesForwarded += nbytes


def _reverse(direction: str) -> str:
    return "up" if direction == "down" else "down"


def _header_bytes(message: str) -> int:
    return math.ceil(HEADER_BITS[message] / 8)


def line_stream(
    path: CxlPath,
    lines: int,
    forward_bytes: int,
    backward_bytes: int,
    first_line_ticks: int,
    window: tuple[str, int] | int,
) -> Stage:
    """``lines`` pipelined line transactions over ``path``: the flits both ways, and a
    window of outstanding lines per first-line round trip: a shared tracker
    (``(resource, entries)``, e.g. a DCOH's) or the requester's own (``entries``)."""
    if lines <= 0:
        return Stage()
    needs = path.needs(forward_bytes, backward_bytes)
    latency, min_ticks = first_line_ticks, 0.0
    if isinstance(window, tuple):  # each line holds a tracker for a round trip
        resource, entries = window
        needs[resource] = lines * first_line_ticks / entries
        latency -= first_line_ticks / entries  # the last line's own share is in the need
    else:
        if window < 1:
            raise ValueError("max_outstanding must be at least 1")
        min_ticks = (lines - 1) * first_line_ticks / window
    return Stage([Flow(needs, min_ticks=min_ticks)], math.ceil(latency))


def lines_for(nbytes: int) -> int:
    return math.ceil(nbytes / LINE_BYTES) if nbytes > 0 else 0


# ----- CXL.io ----------------------------------------------------------------------------
def mmio_write(path: CxlPath, nbytes: int) -> Stage:
    """A posted CXL.io memory write (e.g. the host's per-batch index write): no
    completion, so it lasts its flits' serialization plus the path's latency."""
    tlp = TLP_HEADER_BYTES + nbytes
    path.record(tlp)
    return Stage([Flow(path.needs(tlp))], path.one_way_ticks(0))


# ----- CXL.mem ---------------------------------------------------------------------------
def mem_read(path: CxlPath, nbytes: int, *, max_outstanding: int) -> Stage:
    """Host (or peer) reads of device memory: M2S Req out, S2M DRS (header + 64 B) back.
    Device media time is not included; boards add the memory device's own stream."""
    lines = lines_for(nbytes)
    req, drs = _header_bytes("M2S Req"), _header_bytes("S2M DRS") + LINE_BYTES
    if lines:
        path.record(lines * req)
        path.record(lines * drs, forward=False)
    first = path.round_trip_ticks(req, drs)
    return line_stream(path, lines, lines * req, lines * drs, first, max_outstanding)


def mem_write(path: CxlPath, nbytes: int, *, max_outstanding: int) -> Stage:
    """Writes to device memory: M2S RwD (header + 64 B) out, S2M NDR completion back."""
    lines = lines_for(nbytes)
    rwd, ndr = _header_bytes("M2S RwD") + LINE_BYTES, _header_bytes("S2M NDR")
    if lines:
        path.record(lines * rwd)
        path.record(lines * ndr, forward=False)
    first = path.round_trip_ticks(rwd, ndr)
    return line_stream(path, lines, lines * rwd, lines * ndr, first, max_outstanding)


# ----- CXL.cache -------------------------------------------------------------------------
class Dcoh(SimObject):
    """A device coherency agent: reads peer/host lines and flushes dirty ones over CXL.cache."""

    max_outstanding = Int(
        512,
        "CXL.cache line requests the DCOH keeps in flight",
        "assumption: implementation-defined (CXL 2.0 spec §3.2); sized to cover the "
        "bandwidth-delay product of a switched x16 path (~59 GB/s x ~0.55 us = ~500 lines)",
        low=1,
    )

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.linesRead = self.scalar(
            "linesRead", "64 B lines read over CXL.cache", "Count", served=True
        )
        self.linesFlushed = self.scalar(
            "linesFlushed", "dirty 64 B lines flushed", "Count", served=True
        )

    def read(self, path: CxlPath, nbytes: int) -> Stage:
        """Read nbytes of lines: D2H Req (RdShared) out, H2D Data (header + 64 B) back."""
        lines = lines_for(nbytes)
        req, data = _header_bytes("D2H Req"), _header_bytes("H2D Data") + LINE_BYTES
        if lines:
            path.record(lines * req)
            path.record(lines * data, forward=False)
            self.linesRead += lines
        first = path.round_trip_ticks(req, data)
        return line_stream(path, lines, lines * req, lines * data, first, self.window)

    def flush(self, path: CxlPath, nbytes: int) -> Stage:
        """Flush nbytes of dirty lines towards the path's target: D2H Req (DirtyEvict),
        H2D Rsp (GO_WritePull) back, then D2H Data (header + 64 B)."""
        lines = lines_for(nbytes)
        req, rsp = _header_bytes("D2H Req"), _header_bytes("H2D Rsp")
        data = _header_bytes("D2H Data") + LINE_BYTES
        if lines:
            path.record(lines * (req + data))
            path.record(lines * rsp, forward=False)
            self.linesFlushed += lines
        first = path.round_trip_ticks(req, rsp) + path.one_way_ticks(data)
        return line_stream(path, lines, lines * (req + data), lines * rsp, first, self.window)

    @property
    def window(self) -> tuple[str, int]:
        """The DCOH's line trackers, shared by every stream it runs at once."""
        return (self.path, self.max_outstanding)


class Type2Device(SimObject):
    """A CXL Type-2 device: a DCOH, its link to the switch, and its device memory (a child
    named memory_name, so stats read e.g. ``board.cxl_mem.pmem``)."""

    def __init__(
        self, memory: SimObject | None = None, memory_name: str = "memory", **overrides: Any
    ) -> None:
        super().__init__(**overrides)
        self.dcoh = Dcoh()
        self.link = CxlLink()
        object.__setattr__(self, "_memory_name", memory_name)
        if memory is not None:
            setattr(self, memory_name, memory)

    @property
    def memory(self) -> SimObject | None:
        return self._children.get(self._memory_name)
