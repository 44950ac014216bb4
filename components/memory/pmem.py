"""Optane-class persistent memory behind the CXL-MEM's (or host's) memory controllers.

Defaults follow the paper's emulation: Table 2's ratios applied to the DDR4 model in
dram.py (read latency 3x, write latency 7x, read bandwidth 0.6x, write bandwidth 0.1x
per channel). ``Pmem.optane()`` gives the measured per-DIMM Optane figures instead.
Mechanisms: 256 B XPLine access unit (a 128 B random read moves 256 B), a 16 KiB
XPBuffer per module that serves re-read lines and combines writes (partial lines that
do not combine cost a read-modify-write), a write pending queue whose acceptance is
the ADR persistence point, and read-after-write stalls on lines still draining.
"""

from __future__ import annotations

from typing import Any

from components.memory.base import MemoryDevice
from components.sim.params import Bandwidth, Energy, Enum, Int, Latency, MemorySize, Power, positive

_TABLE2 = "TrainingCXL Table 2 ratio x DRAM model (dram.py)"
_IZ = "Izraelevitz et al. 2019, Basic Performance Measurements of the Intel Optane DC PMM"
_YANG = "Yang et al. FAST'20 (An Empirical Guide to the Behavior and Use of Scalable PM)"
_GEM5_NVM = "gem5 NVM_2400_1x64"


class Pmem(MemoryDevice):
    """PMEM modules, one per controller, interleaved; see the module docstring."""

    controllers = Int(
        4, "memory controllers / PMEM modules", "TrainingCXL CXL-MEM prototype", low=1, high=1024
    )  # high: state per controller; 1024 is far past any device (12 channels a socket)
    interleave = MemorySize(
        "4KiB", "interleave granularity across modules", f"{_IZ} (4 KB across DIMMs)", low="32B"
    )  # low: below the smallest media access (32 B) one access spans modules
    access_unit = MemorySize(
        "256B", "XPLine: internal media access unit", _YANG, check=positive, low="32B"
    )
    buffer_lines = Int(
        64, "XPBuffer lines per module (16 KiB / 256 B)", f"{_YANG}; VANS MICRO'20", low=0
    )
    read_latency = Latency(
        "300ns", "idle random read latency (3x DRAM)", f"{_TABLE2}; Optane measured 305 ns ({_IZ})"
    )
    write_latency = Latency(
        "700ns",
        "idle latency of a write until the WPQ accepts it (7x DRAM)",
        f"{_TABLE2}; gem5 NVM tWRITE 500 ns; Optane ADR write ~90 ns ({_IZ})",
    )
    ctrl_read_bandwidth = Bandwidth(
        "11.52GB/s", "media read bandwidth per module (0.6x DRAM channel)", _TABLE2, check=positive
    )
    ctrl_write_bandwidth = Bandwidth(
        "1.92GB/s", "media write bandwidth per module (0.1x DRAM channel)", _TABLE2, check=positive
    )
    read_queue = Int(
        64, "read buffer entries per controller", f"{_GEM5_NVM} read_buffer_size", low=1
    )
    write_queue = Int(
        128, "write pending queue entries per controller", f"{_GEM5_NVM} write_buffer_size", low=1
    )
    domain = Enum(
        "adr",
        "persistence domain: adr (WPQ), eadr (+CPU caches), gpf (CXL 2.0 GPF: +device caches)",
        f"{_IZ} (ADR, eADR); CXL 2.0 spec §9.8 Global Persistent Flush",
        choices=("adr", "eadr", "gpf"),
    )
    read_energy = Energy(
        "1.67nJ",
        "dynamic energy per media byte read",
        "estimate: (15 W module power - 4 W idle) / 6.6 GB/s; Intel Optane PMem 100 brief "
        "(12-18 W per module)",
    )
    write_energy = Energy(
        "4.8nJ", "dynamic energy per media byte written", "estimate: (15 W - 4 W) / 2.3 GB/s"
    )
    module_capacity = MemorySize(
        "128GiB",
        "capacity of one PMEM module",
        "Intel Optane PMem 100: 128/256/512 GB modules",
        check=positive,
    )
    module_idle_power = Power(
        "4W", "idle power of one module", "estimate: ~4 W idle per Optane module (PMem 100 brief)"
    )

    @classmethod
    def optane(cls, **overrides: Any) -> Pmem:
        """Measured Intel Optane DC PMM per-DIMM figures instead of Table 2's ratios."""
        measured = {
            "read_latency": "305ns",
            "write_latency": "94ns",
            "ctrl_read_bandwidth": "6.6GB/s",
            "ctrl_write_bandwidth": "2.3GB/s",
        }
        return cls(**{**measured, **overrides})
