"""DDR4-2400 DRAM: the reference every Table 2 ratio of the paper is taken against.

A channel moves a 64 B burst in ``access_unit / ctrl_read_bandwidth``; on top of that
its media time follows the DDR4 array (components/memory/ddr4.py): every switch of
the data bus to the other rank costs ``rank_switch``, a rank activates at most four rows
per ``activation_window`` (tFAW), a bank at most one per ``row_cycle`` (tRC), and
refresh takes each rank away for ``refresh_cycle`` every ``refresh_interval``. A random
64 B gather opens a row for most lines and alternates ranks every other line; a
sequential stream stays in one open row for ``row_buffer`` bytes and runs at the
channel's bandwidth less refresh.
"""

from __future__ import annotations

import numpy as np

from components.memory.base import MemoryDevice
from components.memory.ddr4 import ACTIVATIONS_PER_WINDOW, row_activity
from components.sim.params import (
    Bandwidth,
    ConfigError,
    Energy,
    Int,
    Latency,
    MemorySize,
    Power,
    positive,
)
from components.sim.units import TICKS_PER_SECOND

_DDR4 = "Micron DDR4 SDRAM datasheet (MT40A, DDR4-2400: 2400 MT/s x 8 B = 19.2 GB/s)"
_MT40A = "Micron MT40A1G8 (8 Gb x8) DDR4-2400 datasheet"
_GEM5 = "gem5 DDR4_2400_8x8"


class Dram(MemoryDevice):
    """Host (or device) DDR4 channels with 64 B bursts, rows, ranks and refresh."""

    controllers = Int(
        2,
        "memory channels",
        "Intel ARK i5-9600K: 2 DDR4 channels (the paper's host)",
        low=1,
        high=1024,  # state per controller; 1024 is far past any device (12 channels a socket)
    )
    interleave = MemorySize(
        "64B",
        "channel interleave granularity",
        "gem5 configs/common/MemConfig.py: cache line",
        low="32B",
    )  # low: below the smallest media access (32 B) one access spans channels
    access_unit = MemorySize("64B", "burst size (BL8 x 64 bit)", _DDR4, check=positive, low="32B")
    buffer_lines = Int(
        0,
        "line buffer entries (none: the open rows are the array's, see row_buffer)",
        "model choice",
        low=0,
    )
    ranks = Int(
        2,
        "ranks per channel",
        f"{_GEM5} ranks_per_channel; a 16 GB DIMM of 8 Gb x8 chips is dual-rank ({_MT40A})",
        low=1,
        high=8,
    )
    banks = Int(16, "banks per rank (4 bank groups x 4)", f"JEDEC JESD79-4 (x8); {_GEM5}", low=1)
    row_buffer = MemorySize(
        "8KiB",
        "row (page) of a rank: 8 x8 devices x 1 KiB",
        f"{_MT40A}: 1 KB page; {_GEM5} device_rowbuffer_size x devices_per_rank",
        check=positive,
    )
    rank_switch = Latency(
        "1.666ns",
        "data-bus gap when consecutive bursts go to different ranks (tCS, 2 tCK)",
        f"{_GEM5} tCS; JEDEC leaves the rank-to-rank turnaround to the controller",
    )
    activation_window = Latency(
        "21ns",
        "four-activate window per rank (tFAW, 1 KB page)",
        f"{_MT40A}: tFAW 21 ns at DDR4-2400, 1 KB page; {_GEM5} tXAW",
    )
    row_cycle = Latency(
        "46.16ns",
        "activate to activate in one bank (tRC = tRAS + tRP)",
        f"{_GEM5}: tRAS 32 ns + tRP 14.16 ns; {_MT40A}: 45.32 ns at CL16",
    )
    refresh_cycle = Latency(
        "350ns", "a rank's refresh (tRFC1, 8 Gb)", f"{_MT40A}: tRFC1 350 ns; {_GEM5} tRFC"
    )
    refresh_interval = Latency(
        "7.8us", "refresh command interval (tREFI, 0-85 C)", f"JEDEC JESD79-4; {_GEM5} tREFI"
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

    media_sequence = True  # row hits and rank switches follow the access sequence

    def _busy_ticks(
        self,
        seconds_c: np.ndarray,
        ctrl: np.ndarray,
        local: np.ndarray,
        position: np.ndarray | None,
    ) -> np.ndarray:
        """The bus (bursts and rank switches), each rank's four-activate window and
        each bank's row cycle are servers of their own: the busiest bounds the stream,
        and refresh takes its share of every one of them."""
        if self.refresh_cycle >= self.refresh_interval:
            raise ConfigError(
                f"{self.path}.refresh_cycle: {self.refresh_cycle / 1000:g} ns is not below "
                f"refresh_interval {self.refresh_interval / 1000:g} ns"
            )
        if self.row_buffer % self.access_unit:
            raise ConfigError(
                f"{self.path}.row_buffer: {self.row_buffer} B is not a multiple of "
                f"access_unit {self.access_unit} B"
            )
        activity = row_activity(
            ctrl,
            local,
            position,
            self.controllers,
            self.row_buffer // self.access_unit,
            self.banks,
            self.ranks,
        )
        bus = seconds_c * TICKS_PER_SECOND + activity.rank_switches * self.rank_switch
        # the first activation is in the idle latency; each later one waits its turn
        opened = np.maximum(activity.activations.max(axis=1) - 1, 0)
        window = opened * self.activation_window / ACTIVATIONS_PER_WINDOW
        bank = np.maximum(activity.busiest_bank - 1, 0) * self.row_cycle
        available = 1.0 - self.refresh_cycle / self.refresh_interval
        return np.maximum(np.maximum(bus, window), bank) / available
