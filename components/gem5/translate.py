"""Our component parameters as gem5 v24 SimObject parameters: pure functions, no m5.

Everything here returns plain dicts with gem5's string units ("150ns", "1298ps") or
integers, so the derivations are unit-tested without a gem5 build and ``system.py``
only copies values onto SimObjects. Each derivation maps one of our mechanisms onto the
gem5 mechanism that plays its part (docs/gem5.md):

- PMEM media: an XPLine is gem5's NVM burst and row buffer; a bank is busy tREAD per
  line it reads and tWRITE per line it writes, so banks x line / tREAD is the media
  read bandwidth and banks x line / tWRITE the write bandwidth. A write of part of a
  line costs a whole line's tWRITE; writes to a line still in the write queue merge
  (gem5 has no read-modify-write: the read half of an RMW is missing).
- Write acknowledgement: gem5's MemCtrl acknowledges a write once it is queued (our
  WPQ acceptance); our write latency is the round trip to that point, played by a
  crossbar whose response latency delays the acknowledgement, not the media.
- Links: a SerialLink per request direction and message class, clocked so that one
  64 B packet takes what one line of that class takes on our wire (headers and flits
  included).
"""

from __future__ import annotations

import math

from components.interconnect.cxl import HEADER_BITS, LINE_BYTES, TLP_HEADER_BYTES
from components.memory.ddr4 import ACTIVATIONS_PER_WINDOW
from components.sim.units import TICKS_PER_SECOND

FRONTEND_NS = 10.0  # MemCtrl static_frontend_latency default (src/mem/MemCtrl.py)
BACKEND_NS = 10.0  # MemCtrl static_backend_latency default
NVM_TSEND_NS = 14.16  # NVM_2400_1x64 tSEND
DDR_T_BUS = 19.2e9  # B/s: the DDR4-2400 channel an Optane DIMM sits on (Table 2's base)
DDR4_TRCD_NS = 14.16  # DDR4_2400_8x8 tRCD (= tCL)
DDR4_TCL_NS = 14.16
DDR4_TRP_NS = 14.16  # DDR4_2400_8x8 tRP: our row_cycle is its tRAS + tRP
DDR4_DEVICES_PER_RANK = 8  # DDR4_2400_8x8: 8 x8 devices make a rank (our row_buffer / 8 each)
DDR4_BANK_GROUPS = 4  # DDR4_2400_8x8 bank_groups_per_rank
XBAR_CLOCK_HZ = 4e9  # internal crossbars: a 256 B line per 1 ns keeps them off the path
XBAR_HOP_TICKS = 500  # one crossbar crossing: frontend + forward latency, 1 cycle each
XBAR_RESPONSE_TICKS = 250  # a response's crossing: 1 cycle
MEDIA_WRITES = 2  # writes an NVMInterface holds at the media (gem5's histograms need >= 2)
MAX_XBAR_CYCLES = 3900  # gem5 panics on a crossbar header delay above 1 us (src/mem/xbar.cc)


def ns(ticks: float) -> str:
    """Ticks (ps) as a gem5 latency string."""
    return f"{ticks / 1000:.6g}ns"


def pow2_at_least(value: float) -> int:
    return 1 << max(math.ceil(math.log2(max(value, 1))), 0)


# ----- memories ------------------------------------------------------------------------
def nvm_interface(pmem) -> dict[str, object]:
    """Per-controller ``NVMInterface`` and MemCtrl parameters for a Pmem.

    Our controller's media is one server that reads a line in ``access_unit /
    ctrl_read_bandwidth`` and writes one in ``access_unit / ctrl_write_bandwidth``,
    shared by every stream. In gem5 terms:
    - burst = row buffer = the XPLine: a packet stays within one line; a read of a line
      the bank does not hold costs tREAD, every write of (part of) a line tWRITE, and
      writes to a line still in the write queue merge;
    - one bank, tREAD = line / read bandwidth, tWRITE = line / write bandwidth (the
      bank's open line adds a line of buffer to the XPBuffer, ``xpbuffer``);
    - tBURST = one 64 B transfer on the DDR-T bus (DDR4-2400): the bus moves what a
      request asks for, the media whole lines;
    - the rest of our idle read latency (frontend + tREAD + tSEND + tBURST + backend)
      is a pipeline, not an occupancy: the controller's static frontend latency (an
      XPBuffer hit pays the same pipeline in the buffer, ``xpbuffer``);
    - the WPQ is the write queue plus the writes at the media: gem5 keeps at least
      two at the media (one written, one waiting), the write queue holds the rest of
      ``write_queue``; its low watermark is 0, so it drains whenever no read waits
      (our last WPQ-full drains after the stream);
    - read queue and reads at the media = ``read_queue``.
    """
    unit = pmem.access_unit
    burst_ns = LINE_BYTES / DDR_T_BUS * 1e9
    t_read = unit / pmem.ctrl_read_bandwidth * 1e9
    t_write = unit / pmem.ctrl_write_bandwidth * 1e9
    frontend = pmem.read_latency / 1000 - t_read - NVM_TSEND_NS - burst_ns - BACKEND_NS
    if frontend < 0:
        raise ValueError(
            f"{pmem.path}.read_latency: {pmem.read_latency / 1000:g} ns is below the "
            f"{t_read + NVM_TSEND_NS + burst_ns + BACKEND_NS:.3g} ns of one {unit} B media "
            "read and the transfer gem5 adds to it"
        )
    return {
        "interface": {
            "burst_length": unit * 8 // 64,
            "device_bus_width": 64,
            "devices_per_rank": 1,
            "ranks_per_channel": 1,
            "banks_per_rank": 1,
            "device_rowbuffer_size": f"{unit}B",
            "tBURST": f"{burst_ns:.6g}ns",
            "tREAD": f"{t_read:.6g}ns",
            "tWRITE": f"{t_write:.6g}ns",
            "tSEND": f"{NVM_TSEND_NS}ns",
            "read_buffer_size": pmem.read_queue,
            "write_buffer_size": pmem.write_queue - MEDIA_WRITES,
            "max_pending_reads": pmem.read_queue,
            "max_pending_writes": MEDIA_WRITES,
            "two_cycle_rdwr": True,
            "null": True,
        },
        "controller": {
            "static_frontend_latency": f"{frontend:.6g}ns",
            "static_backend_latency": f"{BACKEND_NS:g}ns",
            "write_low_thresh_perc": 0,
        },
    }


def xpbuffer(pmem) -> dict[str, object] | None:
    """A classic ``Cache`` in front of each controller playing its XPBuffer for reads.

    Direct-mapped with ``controllers x buffer_lines`` lines of ``access_unit``, of which
    a controller's lines use ``buffer_lines`` sets: the cache indexes by the whole
    address, and with the interleave a multiple of the line, two lines of one controller
    share a set exactly when their controller-local line numbers are equal modulo
    ``buffer_lines`` (our buffer's slot), provided ``buffer_lines`` is a multiple of the
    lines per interleave chunk (64 and 16 by default). A hit costs our idle read
    latency less the media read (the DIMM's pipeline, which a miss pays at the
    controller). Writes do not go through it: they are acknowledged at the WPQ, where
    gem5 merges writes to a line still queued (our write combining); a write of part of
    a line costs a whole line there, without the read of our read-modify-write.
    Reads see the lines earlier reads left, not those writes left (our buffer holds
    both). None without a buffer (``buffer_lines`` 0) or for DRAM."""
    if type(pmem).__name__ != "Pmem" or pmem.buffer_lines == 0:
        return None
    return {
        "size": f"{pmem.controllers * pmem.buffer_lines * pmem.access_unit}B",
        "assoc": 1,
        "tag_latency": 1,
        "data_latency": buffer_hit_cycles(pmem),
        "response_latency": 1,
        "mshrs": pmem.read_queue,
        "tgts_per_mshr": 16,
        "write_buffers": 16,
    }


def dram_interface(dram) -> dict[str, object]:
    """Per-channel overrides of ``DDR4_2400_8x8`` for a Dram: tBURST = 64 B / channel
    bandwidth (DDR4-2400's own at 19.2 GB/s), our queues, the static backend latency
    stretched so that a closed-row read (frontend + tRCD + tCL + tBURST + backend)
    costs our idle read latency, and a write queue that drains whenever no read waits.
    The array is ours: ranks, banks, row (over the preset's 8 devices), rank switch
    (tCS), four-activate window (tXAW, 4 activations), row cycle (tRAS + tRP) and
    refresh (tRFC, tREFI)."""
    if dram.banks % DDR4_BANK_GROUPS:
        raise ValueError(
            f"{dram.path}.banks: {dram.banks} is not a multiple of DDR4's "
            f"{DDR4_BANK_GROUPS} bank groups"
        )
    t_ras = dram.row_cycle / 1000 - DDR4_TRP_NS
    if t_ras < DDR4_TRCD_NS:
        raise ValueError(
            f"{dram.path}.row_cycle: {dram.row_cycle / 1000:g} ns is below DDR4's "
            f"tRCD + tRP ({DDR4_TRCD_NS + DDR4_TRP_NS:.4g} ns)"
        )
    burst_ns = LINE_BYTES / dram.ctrl_read_bandwidth * 1e9
    core = FRONTEND_NS + DDR4_TRCD_NS + DDR4_TCL_NS + burst_ns
    backend_ns = dram.read_latency / 1000 - core
    if backend_ns < 0:
        raise ValueError(
            f"{dram.path}.read_latency: {dram.read_latency / 1000:g} ns is below DDR4's "
            f"{core:.3g} ns closed-row read"
        )
    return {
        "interface": {
            "tBURST": f"{burst_ns:.6g}ns",
            "read_buffer_size": dram.read_queue,
            "write_buffer_size": dram.write_queue,
            "ranks_per_channel": dram.ranks,
            "banks_per_rank": dram.banks,
            "device_rowbuffer_size": f"{dram.row_buffer // DDR4_DEVICES_PER_RANK}B",
            "tCS": ns(dram.rank_switch),
            "tXAW": ns(dram.activation_window),
            "activation_limit": ACTIVATIONS_PER_WINDOW,
            "tRAS": f"{t_ras:.6g}ns",
            "tRP": f"{DDR4_TRP_NS}ns",
            "tRFC": ns(dram.refresh_cycle),
            "tREFI": ns(dram.refresh_interval),
            "null": True,
        },
        "controller": {
            "static_frontend_latency": f"{FRONTEND_NS:g}ns",
            "static_backend_latency": f"{backend_ns:.6g}ns",
            "write_low_thresh_perc": 0,
        },
    }


def buffer_hit_cycles(pmem) -> int:
    """An XPBuffer hit: our idle read latency less one line's media read (cycles)."""
    hit = pmem.read_latency - pmem.access_unit * TICKS_PER_SECOND / pmem.ctrl_read_bandwidth
    return max(round(hit * XBAR_CLOCK_HZ / TICKS_PER_SECOND), 1)


def controller_ack_ticks(controller: dict[str, object]) -> int:
    """Ticks a write takes to be acknowledged without the extra delay: two crossings
    to the controller (its requester's crossbar, the controllers' crossbar), the
    controller's frontend latency (MemCtrl acknowledges a write once it is queued)
    and the response's crossing back."""
    accept = float(str(controller["static_frontend_latency"]).removesuffix("ns")) * 1000
    return round(2 * XBAR_HOP_TICKS + accept + XBAR_RESPONSE_TICKS)


def write_ack_cycles(device, controller: dict[str, object]) -> list[int]:
    """Response latencies (cycles) of the crossbars a write's acknowledgement crosses
    on its way back to the requester, so that an idle write is acknowledged our
    ``write_latency`` after it was issued (WPQ acceptance and back). gem5 refuses a
    crossbar delay above 1 us, so a longer one is split over a chain of crossbars."""
    extra = device.write_latency - controller_ack_ticks(controller)
    cycles = round(extra * XBAR_CLOCK_HZ / TICKS_PER_SECOND)
    if cycles < 1:
        raise ValueError(
            f"{device.path}.write_latency: {device.write_latency / 1000:g} ns is below the "
            f"{controller_ack_ticks(controller) / 1000:.3g} ns a gem5 write takes to be "
            "acknowledged"
        )
    per_xbar = MAX_XBAR_CYCLES
    return [per_xbar] * (cycles // per_xbar) + ([cycles % per_xbar] if cycles % per_xbar else [])


# ----- address interleaving ------------------------------------------------------------
def interleaved_ranges(
    start: int, size: int, controllers: int, granularity: int
) -> list[dict[str, int]]:
    """``AddrRange`` keyword arguments per controller, ``granularity`` bytes at a time,
    like our devices' ``(addr // interleave) % controllers``: bit i of intlvMatch is
    address bit log2(granularity) + i. gem5 interleaves on address bits, so both must
    be powers of two, and ``size`` a multiple of controllers x granularity."""
    if controllers == 1:
        return [{"start": start, "size": size}]
    for name, value in (("controllers", controllers), ("interleave", granularity)):
        if value & (value - 1):
            raise ValueError(f"gem5 interleaving needs a power-of-two {name}, got {value}")
    bits = int(math.log2(controllers))
    low = int(math.log2(granularity))
    return [
        {
            "start": start,
            "size": size,
            "intlvHighBit": low + bits - 1,
            "intlvBits": bits,
            "intlvMatch": match,
        }
        for match in range(controllers)
    ]


def memory_span(need: int, controllers: int, interleave: int) -> int:
    """A range size gem5 accepts for ``need`` bytes: a power of two of at least one
    interleave chunk per controller."""
    return pow2_at_least(max(need, controllers * interleave))


# ----- links and the switch ------------------------------------------------------------
LINE_HEADERS = {
    "flush": ("D2H Req", "D2H Data"),
    "read": ("H2D Data",),
    "mmio": (),
    "copy": (),
    "memwr": ("M2S RwD",),
}


def line_bytes_on_wire(kind: str) -> int:
    """Payload-equivalent bytes one 64 B line costs on a link, by message class: a CXL
    flush (D2H Req + D2H Data header + 64 B), a CXL.cache read's data (H2D Data header
    + 64 B), a peer-to-peer CXL.mem write (M2S RwD header + 64 B), a CXL.io write or a
    PCIe copy (64 B: their TLP headers are per TLP)."""
    if kind not in LINE_HEADERS:
        raise ValueError(f"unknown message class {kind!r}; one of {sorted(LINE_HEADERS)}")
    return LINE_BYTES + sum(math.ceil(HEADER_BITS[m] / 8) for m in LINE_HEADERS[kind])


def serial_link(link, line_wire_bytes: float, buffers: int) -> dict[str, object]:
    """``SerialLink`` parameters and clock for one request direction of one message class.

    gem5 serializes a packet in ceil(bits / (num_lanes x link_speed)) cycles of the
    link's clock. Each cycle carries one 64 B packet (lanes x speed >= 512 bits), and a
    cycle lasts what ``line_wire_bytes`` of payload take on our link over a long stream
    (flit or TLP overhead included). ``delay`` is our one-way propagation latency;
    request/response buffers hold ``buffers`` packets so that the link never throttles
    a requester's window."""
    period_ps = max(round(link.serialization_ticks(round(line_wire_bytes * 4096)) / 4096), 1)
    return {
        "num_lanes": link.lanes,
        "link_speed": math.ceil(LINE_BYTES * 8 / link.lanes),
        "delay": ns(link.propagation_latency),
        "req_size": buffers,
        "resp_size": buffers,
        "clock": f"{period_ps}ps",
    }


def xbar(switch) -> dict[str, object]:
    """``NoncoherentXBar`` for a CXL switch: a request pays frontend + forward latency,
    a response the response latency, each our port latency (in switch cycles)."""
    cycles = round(switch.port_latency * XBAR_CLOCK_HZ / TICKS_PER_SECOND)
    return {
        "frontend_latency": cycles // 2,
        "forward_latency": cycles - cycles // 2,
        "response_latency": cycles,
        "width": LINE_BYTES,
        "clock": f"{XBAR_CLOCK_HZ / 1e9:g}GHz",
    }


def mmio_bytes(payload: int) -> int:
    """Bytes of a CXL.io memory write of ``payload``: one TLP header and the payload."""
    return TLP_HEADER_BYTES + payload


def period_for(rate: float | None, packet: int = LINE_BYTES) -> int:
    """Ticks between packets for an issue rate in B/s (0: back to back)."""
    if not rate:
        return 0
    return max(round(packet * TICKS_PER_SECOND / rate), 1)
