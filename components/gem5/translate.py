"""Our component parameters as gem5 v24 SimObject parameters: pure functions, no m5.

Everything here returns plain dicts and dataclasses with gem5's string units ("150ns",
"0.927GHz") or integers, so the derivations are unit-tested without a gem5 build and
``system.py`` only copies values onto SimObjects. Each derivation says which gem5
mechanism it calibrates (see docs/gem5.md for the mechanisms themselves).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from components.sim.units import TICKS_PER_SECOND

PACKET_BYTES = 64  # PyTrafficGen block size limit (the system's cache line size)
FRONTEND_NS = 10.0  # MemCtrl static_frontend_latency default (src/mem/MemCtrl.py)
BACKEND_NS = 10.0  # MemCtrl static_backend_latency default
NVM_TSEND_NS = 14.16  # NVM_2400_1x64 tSEND
DDR4_TRCD_NS = 14.16  # DDR4_2400_16x4 tRCD (= tCL)
DDR4_TCL_NS = 14.16
XBAR_CLOCK_HZ = 4e9  # switch clock: 64 B per 0.5 ns layer slot keeps it off the critical path


def ns(ticks: float) -> str:
    """Ticks (ps) as a gem5 latency string."""
    return f"{ticks / 1000:.6g}ns"


def pow2_at_least(value: float) -> int:
    return 1 << max(math.ceil(math.log2(max(value, 1))), 0)


# ----- memories ------------------------------------------------------------------------
def nvm_interface(pmem) -> dict[str, object]:
    """Per-controller ``NVMInterface`` parameters for a Pmem (one module per controller).

    gem5's NVM model keeps a bank busy for tREAD per read and tWRITE per write, and
    moves each 64 B burst over the data bus in tBURST; an idle read costs
    frontend + tREAD + tSEND + tBURST + backend. Hence:
    - tBURST = 64 B / per-controller read bandwidth (the data bus is the read ceiling);
    - tREAD = our idle read latency minus what gem5 adds around it;
    - banks = enough that banks x 64 B / tREAD covers the read bandwidth (power of 2);
    - tWRITE = banks x 64 B / per-controller write bandwidth (all banks writing);
    - queues and pending limits = our read/write queue entries.
    Our write latency has no counterpart: MemCtrl acknowledges a write when it is queued.
    """
    burst_ns = PACKET_BYTES / pmem.ctrl_read_bandwidth * 1e9
    read_ns = pmem.read_latency / 1000 - FRONTEND_NS - BACKEND_NS - NVM_TSEND_NS - burst_ns
    if read_ns <= 0:
        raise ValueError(
            f"{pmem.path}.read_latency: {pmem.read_latency / 1000:g} ns is below the "
            f"{FRONTEND_NS + BACKEND_NS + NVM_TSEND_NS + burst_ns:.3g} ns gem5 adds around tREAD"
        )
    banks = pow2_at_least(pmem.ctrl_read_bandwidth * read_ns * 1e-9 / PACKET_BYTES)
    write_ns = banks * PACKET_BYTES / pmem.ctrl_write_bandwidth * 1e9
    return {
        "tCK": "0.833ns",
        "burst_length": 8,
        "device_bus_width": 64,
        "devices_per_rank": 1,
        "ranks_per_channel": 1,
        "banks_per_rank": banks,
        "device_rowbuffer_size": f"{pmem.access_unit}B",
        "tBURST": f"{burst_ns:.6g}ns",
        "tREAD": f"{read_ns:.6g}ns",
        "tWRITE": f"{write_ns:.6g}ns",
        "tSEND": f"{NVM_TSEND_NS}ns",
        "read_buffer_size": pmem.read_queue,
        "write_buffer_size": pmem.write_queue,
        "max_pending_reads": pmem.read_queue,
        "max_pending_writes": pmem.write_queue,
        "two_cycle_rdwr": True,
        "null": True,
    }


def dram_interface(dram) -> dict[str, object]:
    """Per-channel overrides of ``DDR4_2400_8x8`` for a Dram.

    tBURST = 64 B / channel bandwidth (3.333 ns at 19.2 GB/s, DDR4-2400's own), queue
    sizes from ours, and the static backend latency stretched so that a closed-row read
    (frontend + tRCD + tCL + tBURST + backend) costs our idle read latency.
    """
    burst_ns = PACKET_BYTES / dram.ctrl_read_bandwidth * 1e9
    core = FRONTEND_NS + DDR4_TRCD_NS + DDR4_TCL_NS + burst_ns
    backend_ns = max(dram.read_latency / 1000 - core, 0.0)
    return {
        "interface": {
            "tBURST": f"{burst_ns:.6g}ns",
            "read_buffer_size": dram.read_queue,
            "write_buffer_size": dram.write_queue,
            "null": True,
        },
        "controller": {"static_backend_latency": f"{backend_ns:.6g}ns"},
    }


# ----- address interleaving ------------------------------------------------------------
@dataclass(frozen=True)
class AddrRangeSpec:
    """Keyword arguments of ``m5.params.AddrRange`` for one controller's share."""

    start: int
    size: int
    intlvHighBit: int = 0
    intlvBits: int = 0
    intlvMatch: int = 0
    xorHighBit: int = 0

    def kwargs(self) -> dict[str, int]:
        args = {"start": self.start, "size": self.size}
        if self.intlvBits:
            args.update(
                intlvHighBit=self.intlvHighBit,
                intlvBits=self.intlvBits,
                intlvMatch=self.intlvMatch,
                xorHighBit=self.xorHighBit,
            )
        return args

    def contains(self, addr: int) -> bool:
        """Bit i of intlvMatch selects addr's interleave bit (XOR-ed with its hash bit)."""
        if not self.start <= addr < self.start + self.size:
            return False
        for i in range(self.intlvBits):
            bit = (addr >> (self.intlvHighBit - self.intlvBits + 1 + i)) & 1
            if self.xorHighBit:
                bit ^= (addr >> (self.xorHighBit - self.intlvBits + 1 + i)) & 1
            if bit != (self.intlvMatch >> i) & 1:
                return False
        return True


def interleaved_ranges(
    start: int, size: int, controllers: int, granularity: int, xor_high_bit: int = 0
) -> list[AddrRangeSpec]:
    """One range per controller, ``granularity`` bytes at a time, like our devices'
    ``(addr // interleave) % controllers``. gem5 interleaves on address bits, so the
    controller count and granularity must be powers of two."""
    if controllers == 1:
        return [AddrRangeSpec(start, size)]
    for name, value in (("controllers", controllers), ("interleave", granularity)):
        if value & (value - 1):
            raise ValueError(f"gem5 interleaving needs a power-of-two {name}, got {value}")
    bits = int(math.log2(controllers))
    high = int(math.log2(granularity)) + bits - 1
    return [
        AddrRangeSpec(start, size, high, bits, match, xor_high_bit) for match in range(controllers)
    ]


def memory_span(need: int, controllers: int, interleave: int, banks: int, row_buffer: int) -> int:
    """A range size gem5 accepts for ``need`` bytes: a power of two that every
    controller's share divides into whole rows of every bank."""
    return pow2_at_least(max(need, controllers * max(interleave, banks * row_buffer)))


# ----- links and the switch ------------------------------------------------------------
def serial_link(link, window: int = 16) -> dict[str, object]:
    """``SerialLink`` parameters and its clock for one direction of our link.

    gem5 serializes a packet in ceil(bits / (num_lanes x link_speed)) link-clock cycles
    (bits per cycle, integer link_speed). With 64 B packets a 1 GHz clock could only give
    64/k GB/s, so the clock is set to one 64 B packet per cycle at our effective
    bandwidth and link_speed (Gb per lane per cycle) to carry 512 bits in that cycle.
    ``delay`` is our one-way propagation latency; req/resp buffers hold ``window``
    packets (the requester's outstanding window; gem5's default of 16 would throttle).
    """
    bandwidth = link.effective_bandwidth
    period_ps = max(round(PACKET_BYTES * TICKS_PER_SECOND / bandwidth), 1)
    lanes = link.lanes
    return {
        "num_lanes": lanes,
        "link_speed": math.ceil(PACKET_BYTES * 8 / lanes),
        "delay": ns(link.propagation_latency),
        "req_size": max(window, 16),
        "resp_size": max(window, 16),
        "clock": f"{period_ps}ps",
    }


def serial_link_bandwidth(params: dict[str, object]) -> float:
    """Bytes/s a SerialLink with these parameters sustains for 64 B packets."""
    period_ps = int(str(params["clock"]).removesuffix("ps"))
    bits = int(params["num_lanes"]) * int(params["link_speed"])
    cycles = math.ceil(PACKET_BYTES * 8 / bits)
    return PACKET_BYTES * TICKS_PER_SECOND / (cycles * period_ps)


def xbar(switch) -> dict[str, object]:
    """``NoncoherentXBar`` for a CXL switch: a request pays frontend + forward latency,
    a response the response latency, each our port latency (in switch cycles)."""
    cycles = round(switch.port_latency * XBAR_CLOCK_HZ / TICKS_PER_SECOND)
    return {
        "frontend_latency": cycles // 2,
        "forward_latency": cycles - cycles // 2,
        "response_latency": cycles,
        "width": PACKET_BYTES,
        "clock": f"{XBAR_CLOCK_HZ / 1e9:g}GHz",
    }


# ----- traffic ---------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamSpec:
    """One PyTrafficGen state: ``createLinear``/``createRandom``, or ``createNvm`` with
    ``seq_packets`` consecutive 64 B packets per random row ("rows")."""

    kind: str  # "linear", "random" or "rows"
    start: int
    end: int
    count: int  # packets
    read_percent: int
    period_ticks: int = 0
    block: int = PACKET_BYTES
    seq_packets: int = 1

    @property
    def data_limit(self) -> int:
        return self.count * self.block

    def __post_init__(self) -> None:
        if self.kind not in ("linear", "random", "rows"):
            raise ValueError(f"unknown stream kind {self.kind!r}")
        if not 0 < self.block <= PACKET_BYTES:
            raise ValueError(f"PyTrafficGen block size must be 1..64 B, got {self.block}")
        if self.end - self.start < self.block * self.seq_packets:
            raise ValueError(f"stream range [{self.start}, {self.end}) smaller than one row")


def packets(nbytes: int) -> int:
    """64 B requests for nbytes (a 128 B row is two requests)."""
    return -(-nbytes // PACKET_BYTES) if nbytes > 0 else 0


def period_for(issue_bandwidth: float | None) -> int:
    """Ticks between packets for an issue rate in B/s (0: back to back)."""
    if not issue_bandwidth:
        return 0
    return max(round(PACKET_BYTES * TICKS_PER_SECOND / issue_bandwidth), 1)


def row_stream(
    start: int, end: int, rows: int, row_bytes: int, read: bool, issue_bandwidth=None
) -> StreamSpec:
    """``rows`` random rows of a region, each as consecutive 64 B packets."""
    seq = packets(row_bytes)
    return StreamSpec(
        "rows", start, end, rows * seq, 100 if read else 0, period_for(issue_bandwidth), 64, seq
    )


def linear_stream(
    start: int, nbytes: int, read: bool, issue_bandwidth: float | None = None
) -> StreamSpec:
    """A sequential sweep of nbytes from start (logs, transfers)."""
    count = packets(nbytes)
    end = start + max(count, 1) * PACKET_BYTES
    return StreamSpec("linear", start, end, count, 100 if read else 0, period_for(issue_bandwidth))
