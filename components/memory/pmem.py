"""Optane-class persistent memory behind the CXL-MEM's (or host's) memory controllers.

Defaults follow the paper's emulation: Table 2's ratios applied to the DDR4 model in
dram.py (read latency 3x, write latency 7x, read bandwidth 0.6x, write bandwidth 0.1x
per channel). ``Pmem.optane()`` gives the measured per-DIMM Optane figures instead.
Mechanisms: 256 B XPLine access unit (a 128 B random read moves 256 B), a 16 KiB
XPBuffer per module that serves re-read lines and combines writes (partial lines that
do not combine cost a read-modify-write), a write pending queue whose acceptance is
the ADR persistence point, and read-after-write stalls on lines still draining.

The measured device (``Pmem.optane()``) adds what real DIMMs do under concurrency, each
off in Table 2's emulation (which ran on delayed DRAM): reads the XPBuffer serves at the
sequential latency, bandwidth that falls as more requesters share a DIMM, reads that
queue behind others' load, and the read of a read-modify-write overlapped with the
media writes (xpoint.py; the flow network applies the load terms, components/sim/
loaded.py). Calibrated on the one-DIMM sweeps of NVSL/OptaneStudy; the six-DIMM, 4 KiB
and loaded-latency experiments are its validation (docs/validation.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from components.memory.base import MemoryDevice
from components.memory.xpoint import buffered_requests, mean_read_latency, stream_load
from components.sim.loaded import FlowLoad
from components.sim.params import (
    Bandwidth,
    Bool,
    ConfigError,
    Energy,
    Enum,
    Float,
    Int,
    Latency,
    MemorySize,
    Power,
    positive,
)
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_TABLE2 = "TrainingCXL Table 2 ratio x DRAM model (dram.py)"
_IZ = "Izraelevitz et al. 2019, Basic Performance Measurements of the Intel Optane DC PMM"
_YANG = "Yang et al. FAST'20 (An Empirical Guide to the Behavior and Use of Scalable PM)"
_GEM5_NVM = "gem5 NVM_2400_1x64"
_STUDY = "NVSL/OptaneStudy"
_NI = f"{_STUDY} graphs/04-bandwidth_thcount_optane_ni.csv (1 DIMM, 256 B), rows 1-16 threads"


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

    buffer_read_latency = Latency(
        "0ns",
        "idle latency of a read the XPBuffer serves (a re-read line, or the next line of a "
        "sequential run, which the DIMM fetches ahead); 0: read_latency, as Table 2's "
        "emulation on DRAM has no such buffer",
        f"{_IZ} (sequential 169 ns); {_STUDY} graphs/02-best_case_latency.csv Read Sequential",
    )
    thread_bytes = MemorySize(
        "768B",
        "bytes one requester keeps in flight (12 L1D fill buffers x 64 B): a stream's "
        "requesters are the bytes its window holds over this",
        "Skylake-SP: 12 fill buffers a core (host.py fill_buffers); 1-thread 256 B random "
        f"read {_STUDY} data/bandwidth.csv row 8311: 2.63 GB/s x 305 ns = 802 B",
        check=positive,
    )
    read_thrash_onset = Float(
        0.0,
        "requesters on a module before its read bandwidth falls",
        f"fit: {_NI}, Read column from 4 threads",
        low=0.0,
        unit="requesters",
    )
    read_thrash_slope = Float(
        0.0,
        "extra media time per read and requester past the onset (0: no thrashing)",
        f"fit: {_NI}, Read column from 4 threads",
        low=0.0,
        unit="1/requester",
    )
    write_thrash_onset = Float(
        0.0,
        "requesters on a module before its write bandwidth falls (write-combining thrash)",
        f"fit: {_NI}, Write(ntstore) column",
        low=0.0,
        unit="requesters",
    )
    write_thrash_slope = Float(
        0.0,
        "extra media time per write and requester past the onset (0: no thrashing)",
        f"fit: {_NI}, Write(ntstore) column",
        low=0.0,
        unit="1/requester",
    )
    block_write_thrash_cap = Float(
        0.0,
        "largest write-thrash slowdown of a request of several XPLines (a block's full "
        "lines combine among themselves); 0: no cap",
        f"fit: {_STUDY} data/bandwidth.csv, RandBW NTStore, 1 DIMM, 4096 B: 1.08 GB/s at 12 "
        "threads, 0.92 at 24 (2.3 / 0.92 = 2.5), where 256 B writes fall to 0.61",
        low=0.0,
        unit="ratio",
    )
    queueing = Bool(
        False,
        "reads wait behind other requesters' load: M/D/1 with one XPLine read as service",
        f"{_YANG} Fig. 6 (read latency rises with write load); Pollaczek-Khinchine",
    )
    rmw_overlap = Bool(
        False,
        "the read of a partial-line write overlaps the module's media writes",
        f"{_STUDY} data/bandwidth.csv row 8294: 64 B random ntstore 0.57 GB/s = the 256 B "
        "line write alone (2.3 GB/s / 4)",
    )

    # ----- measured-device mechanisms (off under Table 2's defaults) -----------------
    def _read_latency(self, addr: np.ndarray, size: int, hits: int) -> float:
        """Buffered reads at the buffer's latency; a request of several lines also waits
        for the media reads of the lines after its first (one module serves them)."""
        fast = self.buffer_read_latency
        if not fast:
            return self.read_latency
        unit = self.access_unit
        buffered = min(max(self._in_runs(addr, size), hits), int(addr.size))
        rest = (-(-size // unit) - 1) * unit * TICKS_PER_SECOND / self.ctrl_read_bandwidth
        return mean_read_latency(buffered, int(addr.size), self.read_latency, fast) + rest

    def _load(
        self, kind: str, addr: np.ndarray, size: int, window: float, latency: float
    ) -> FlowLoad | None:
        reading = kind == "read"
        slope = self.read_thrash_slope if reading else self.write_thrash_slope
        queues = self.queueing and reading
        if not slope and not queues:
            return None
        onset = self.read_thrash_onset if reading else self.write_thrash_onset
        line_read = self.access_unit * TICKS_PER_SECOND / self.ctrl_read_bandwidth
        scattered = 1.0 - self._in_runs(addr, size) / max(int(addr.size), 1)
        capped = not reading and size > self.access_unit and self.block_write_thrash_cap
        return stream_load(
            self.resource_names(),
            window,
            size,
            scattered,
            self.thread_bytes,
            (onset, slope, self.block_write_thrash_cap if capped else math.inf),
            latency,
            line_read if queues else 0.0,
        )

    def _in_runs(self, addr: np.ndarray, size: int) -> int:
        """buffered_requests without the digest's hits, for the stream read() or write()
        is taking: its latency and its load ask in turn (one pass over the addresses)."""
        held = self.__dict__.get("_runs_of")
        if held is None or held[0] is not addr or held[1] != size:
            held = (addr, size, buffered_requests(addr, size, self.access_unit, 0))
            object.__setattr__(self, "_runs_of", held)
        return held[2]

    def _write_media_seconds(self, writes_c: np.ndarray, rmw_c: np.ndarray) -> np.ndarray:
        if not self.rmw_overlap:
            return super()._write_media_seconds(writes_c, rmw_c)
        unit = self.access_unit
        return np.maximum(
            writes_c * unit / self.ctrl_write_bandwidth, rmw_c * unit / self.ctrl_read_bandwidth
        )

    @property
    def sequential_read_latency(self) -> int:
        """Idle latency of a read in a sequential run (the XPBuffer's, where modelled)."""
        return self.buffer_read_latency or self.read_latency

    @classmethod
    def optane(cls, **overrides: Any) -> Pmem:
        """The measured Intel Optane DC PMM (per DIMM) instead of Table 2's emulation:
        its idle latencies and peaks, and the mechanisms of concurrency and load (sources:
        docs/parameters.md, docs/validation/optane.yaml)."""
        return cls(**{**OPTANE, **overrides})


OPTANE: Mapping[str, Any] = {
    "read_latency": "305ns",
    "write_latency": "90ns",
    "ctrl_read_bandwidth": "6.6GB/s",
    "ctrl_write_bandwidth": "2.3GB/s",
    "buffer_read_latency": "169ns",
    "read_thrash_onset": 9.6,
    "read_thrash_slope": 0.059,
    "write_thrash_onset": 4.45,
    "write_thrash_slope": 0.14,
    "block_write_thrash_cap": 2.5,
    "queueing": True,
    "rmw_overlap": True,
}
"""The measured device's parameters (sources: docs/parameters.md)."""
PMEM_MODELS = ("table2", "optane")
"""--pmem: Table 2's emulation (every parameter's default) or the measured device."""


def pmem_modules(root: SimObject) -> list[Pmem]:
    """Every PMEM below ``root`` (none on the DRAM and SSD systems)."""
    return [obj for obj in root.descendants() if isinstance(obj, Pmem)]


def use_model(root: SimObject, name: str) -> None:
    """Every PMEM below ``root`` becomes the named model: the parameters the measured
    device sets take its values (optane) or their defaults (table2)."""
    if name not in PMEM_MODELS:
        raise ConfigError(f"unknown PMEM model {name!r}; one of {', '.join(PMEM_MODELS)}")
    modules = pmem_modules(root)
    if not modules:  # the model would change nothing: a run the user did not ask for
        raise ConfigError(f"no PMEM to make {name}: this board keeps its tables elsewhere")
    for obj in modules:
        for key, value in OPTANE.items():
            setattr(obj, key, value if name == "optane" else type(obj)._params[key].default)
