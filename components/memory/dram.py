"""DDR4-2400 DRAM: the reference every Table 2 ratio of the paper is taken against."""

from __future__ import annotations

from components.memory.base import MemoryDevice
from components.sim.params import Bandwidth, Energy, Int, Latency, MemorySize, Power, positive

_DDR4 = "Micron DDR4 SDRAM datasheet (MT40A, DDR4-2400: 2400 MT/s x 8 B = 19.2 GB/s)"


class Dram(MemoryDevice):
    """Host (or device) DDR4 channels with 64 B bursts and no line buffer."""

    controllers = Int(
        2,
        "memory channels",
        "Intel ARK i5-9600K: 2 DDR4 channels (the paper's host)",
        low=1,
        high=1024,  # state per controller; 1024 is far past any device (12 channels a socket)
    )
    interleave = MemorySize(
        "64B", "channel interleave granularity", "gem5 configs/common/MemConfig.py: cache line"
    )
    access_unit = MemorySize("64B", "burst size (BL8 x 64 bit)", _DDR4, check=positive, low="32B")
    buffer_lines = Int(
        0, "line buffer entries (none: row hits not modelled)", "model choice", low=0
    )
    read_latency = Latency(
        "100ns",
        "idle load-to-use latency of a random read",
        "Intel MLC idle latency on client DDR4 platforms, ~80-100 ns; Izraelevitz 2019 "
        "measured 81 ns on a server socket; 100 ns keeps Table 2's 3x at Optane's 305 ns",
    )
    write_latency = Latency(
        "100ns", "idle latency of a write until accepted", "same path as a read (Table 2 base)"
    )
    ctrl_read_bandwidth = Bandwidth("19.2GB/s", "peak read bandwidth per channel", _DDR4)
    ctrl_write_bandwidth = Bandwidth("19.2GB/s", "peak write bandwidth per channel", _DDR4)
    read_queue = Int(32, "read queue entries per channel", "gem5 DDR4_2400 read_buffer_size", low=1)
    write_queue = Int(
        64, "write queue entries per channel", "gem5 DDR4_2400 write_buffer_size", low=1
    )
    read_energy = Energy(
        "130pJ",
        "dynamic energy per media byte read (~16 pJ/bit incl. I/O)",
        "estimate: ~2.5 W above background per DDR4 DIMM at 19.2 GB/s (Micron TN-40-07 "
        "power calculator); Li et al. MEMSYS'18 report I/O-dominated DDR4 energy",
    )
    write_energy = Energy("130pJ", "dynamic energy per media byte written", "as read_energy")
    module_capacity = MemorySize(
        "16GiB", "capacity of one DIMM", "the paper's host: 4 x 16 GB DDR4 DIMMs", check=positive
    )
    module_idle_power = Power(
        "1W",
        "background + refresh power of one DIMM",
        "estimate: ~1 W per 16 GB DDR4 DIMM (Micron TN-40-07 IDD2N/IDD5 at 1.2 V)",
    )
