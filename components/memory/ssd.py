"""NVMe SSD (Intel 750 class) holding the embedding tables, and the host-DRAM vector
cache the paper's SSD configuration puts in front of it."""

from __future__ import annotations

from typing import Any

import numpy as np

from components.memory.base import MemoryDevice
from components.memory.dram import Dram
from components.memory.lru import LruRows
from components.memory.stages import MemStream, concurrent
from components.sim.params import Bandwidth, Energy, Int, Latency, MemorySize, Power, positive
from components.sim.simobject import SimObject

_TABLE2 = "TrainingCXL Table 2 ratio x DRAM model (dram.py)"
_I750 = "Intel SSD 750 product specification (800 GB, NVMe PCIe 3.0 x4)"


class Ssd(MemoryDevice):
    """Page-granular flash: every request touches whole 4 KiB pages (a 128 B row costs
    a page). The controller's DRAM buffers pages: sequential small writes (log appends)
    combine into whole pages; a page written back partially is read-modify-written.
    Not byte-addressable: software persists with one flush command per write batch."""

    byte_addressable = False

    controllers = Int(
        1, "NVMe devices (one controller each)", "the paper's SSD config", low=1, high=1024
    )  # high: state per controller; 1024 is far past any array of NVMe drives
    interleave = MemorySize("4KiB", "interleave across devices", "one page", check=positive)
    access_unit = MemorySize("4KiB", "flash page (logical block)", _I750, check=positive, low="32B")
    buffer_lines = Int(
        1024,
        "pages of the controller's DRAM write/read buffer (4 MiB, direct-mapped)",
        f"{_I750}: DRAM cache with enhanced power-loss data protection (durable once "
        "accepted); 4 MiB is an assumption, far below its DRAM size",
        low=0,
    )
    read_latency = Latency(
        "16.5us", "idle page read latency (165x DRAM)", f"{_TABLE2}; {_I750}: ~20 us"
    )
    write_latency = Latency("16.5us", "idle page write latency (165x DRAM)", _TABLE2)
    ctrl_read_bandwidth = Bandwidth(
        "0.384GB/s",
        "read bandwidth (0.02x a DRAM channel)",
        f"{_TABLE2}; {_I750}: 2.2 GB/s sequential, ~440K 4K IOPS",
        check=positive,
    )
    ctrl_write_bandwidth = Bandwidth(
        "0.384GB/s", "write bandwidth (0.02x)", f"{_TABLE2}; {_I750}: 0.9 GB/s", check=positive
    )
    read_queue = Int(32, "internal parallelism: reads in flight", "NVMe queue depth 32", low=1)
    write_queue = Int(32, "internal parallelism: writes in flight", "NVMe queue depth 32", low=1)
    read_energy = Energy(
        "8nJ", "dynamic energy per page byte read", f"estimate: (22 W - 4 W) / 2.2 GB/s ({_I750})"
    )
    write_energy = Energy(
        "20nJ", "dynamic energy per page byte written", "estimate: (22 W - 4 W) / 0.9 GB/s"
    )
    module_capacity = MemorySize("800GB", "capacity of one SSD", _I750, check=positive)
    module_idle_power = Power("4W", "idle power of one SSD", f"{_I750}: ~4 W idle")


class SsdWithCache(SimObject):
    """SSD behind a host-DRAM cache of embedding vectors (the paper's SSD config).

    Residency is LRU at op granularity, exact and vectorized: a row hits if it was
    resident when the op began (among the ``cache_capacity / size`` most recently used
    rows) or was already touched earlier in the same op; after the op, the most
    recently used rows are kept (``LruRows``: a cost per op that follows the op, not the
    cache). This ignores evictions caused within one op, which only matters when a
    single op touches more distinct rows than the cache holds. Writes go through to the
    SSD (the tables' home) and update/allocate the cached copy. Only the tables are
    cached: logs and flags (outside ``cached``, set by the board to the data region) go
    to the SSD alone.
    """

    cache_capacity = MemorySize(
        "16GiB",
        "host DRAM set aside for cached vectors",
        "estimate: a quarter of the paper's 4x16 GB host DRAM",
        check=positive,
    )
    static_power = Power("0W", "no power of its own (see ssd and dram)", "bookkeeping only")

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.ssd = Ssd()
        self.dram = Dram()
        self.hits = self.scalar("hits", "row accesses served by the DRAM cache", "Count")
        self.misses = self.scalar("misses", "row accesses sent to the SSD", "Count")
        self.hitRate = self.formula(
            "hitRate",
            "cache hits per access",
            "Ratio",
            lambda: self.hits.value / max(self.hits.value + self.misses.value, 1),
        )
        self.hold(0, None)  # byte range the cache holds (the board bounds it)

    byte_addressable = False

    @property
    def write_listeners(self) -> list:
        """Observers of persisted writes: the SSD's (the cache is volatile)."""
        return self.ssd.write_listeners

    @property
    def stream_listeners(self) -> list:
        """Observers of issued streams: the SSD's (the misses and write-throughs)."""
        return self.ssd.stream_listeners

    @property
    def idle_read_latency(self) -> int:
        return self.ssd.idle_read_latency

    @property
    def idle_write_latency(self) -> int:
        return self.ssd.idle_write_latency

    @property
    def read_bandwidth(self) -> float:
        return self.ssd.read_bandwidth

    @property
    def write_bandwidth(self) -> float:
        return self.ssd.write_bandwidth

    def read(
        self,
        addresses: np.ndarray,
        size: int,
        outstanding: int | None = None,
        *,
        distinct: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> MemStream:
        """Hits read host DRAM, misses read the SSD, both at once (``distinct`` is not
        used: the split into hits and misses is a stream of its own each)."""
        addr = np.asarray(addresses, dtype=np.int64).ravel()
        rows, cached = self._rows_of(addr, size)
        hit = np.zeros(addr.size, dtype=bool)
        hit[cached] = self.residency.access(rows, self._capacity(size))
        self.hits += int(hit.sum())
        self.misses += int((~hit).sum())
        return concurrent(
            self.dram.read(addr[hit], size, outstanding),
            self.ssd.read(addr[~hit], size, outstanding),
        )

    def write(self, addresses: np.ndarray, size: int, outstanding: int | None = None) -> MemStream:
        """Write through to the SSD; cached rows are written in DRAM alongside."""
        addr = np.asarray(addresses, dtype=np.int64).ravel()
        rows, cached = self._rows_of(addr, size)
        self.residency.touch(rows, self._capacity(size))
        return concurrent(
            self.ssd.write(addr, size, outstanding),
            self.dram.write(addr[cached], size, outstanding),
        )

    def warm(self, addresses: np.ndarray, size: int) -> None:
        """Residency as an access of these rows leaves it, with no timing or counts."""
        rows, _ = self._rows_of(np.asarray(addresses, dtype=np.int64).ravel(), size)
        self.residency.touch(rows, self._capacity(size))

    def hold(self, start: int, end: int | None) -> None:
        """Cache the rows of bytes ``start..end`` only (the board's tables)."""
        object.__setattr__(self, "cached", (start, end))
        object.__setattr__(self, "residency", LruRows())

    def resident_addresses(self) -> np.ndarray:
        """The cached rows' addresses, ascending."""
        return self.cached[0] + self.residency.resident_rows() * (self.residency.unit or 1)

    def _rows_of(self, addr: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """The cached range's rows among ``addr`` (dense row indices) and where they are."""
        low, high = self.cached
        cached = np.flatnonzero((addr >= low) & (addr < (high or 2**63 - 1)))
        residency = self.residency
        if cached.size and residency.unit is None:
            residency.unit, residency.bound = size, high and (high - low) // size
        if cached.size and (size != residency.unit or ((addr[cached] - low) % size).any()):
            raise ValueError(f"vector cache: rows of {size} B off its {residency.unit} B grid")
        return (addr[cached] - low) // size, cached

    def _capacity(self, size: int) -> int:
        return max(self.cache_capacity // size, 1)
