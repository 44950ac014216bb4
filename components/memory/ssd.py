"""NVMe SSD (Intel 750 class) holding the embedding tables, and the host-DRAM vector
cache the paper's SSD configuration puts in front of it."""

from __future__ import annotations

from typing import Any

import numpy as np

from components.memory.base import Access, MemoryDevice
from components.memory.dram import Dram
from components.sim.params import Bandwidth, Energy, Int, Latency, MemorySize, Power, positive
from components.sim.simobject import SimObject

_TABLE2 = "TrainingCXL Table 2 ratio x DRAM model (dram.py)"
_I750 = "Intel SSD 750 product specification (800 GB, NVMe PCIe 3.0 x4)"


class Ssd(MemoryDevice):
    """Page-granular flash: every request touches whole 4 KiB pages (a 128 B row costs
    a page) and a partial-page write is a read-modify-write of its page."""

    controllers = Int(
        1, "NVMe devices (one controller each)", "the paper's SSD config", low=1, high=1024
    )  # high: state per controller; 1024 is far past any array of NVMe drives
    interleave = MemorySize("4KiB", "interleave across devices", "one page", check=positive)
    access_unit = MemorySize("4KiB", "flash page (logical block)", _I750, check=positive, low="32B")
    buffer_lines = Int(0, "device page buffer (not modelled)", "model choice", low=0)
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
    recently used rows are kept. This ignores evictions caused within one op, which
    only matters when a single op touches more distinct rows than the cache holds.
    Writes go through to the SSD (the tables' home) and update/allocate the cached copy.
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
        self.dynamicEnergy = self.formula(
            "dynamicEnergy",
            "energy of the SSD and the cache DRAM",
            "Joule",
            lambda: self.ssd.dynamicEnergy.value + self.dram.dynamicEnergy.value,
        )
        self._rows = np.zeros(0, dtype=np.int64)  # resident row addresses, sorted
        self._stamp = np.zeros(0, dtype=np.int64)  # their last use (access counter)
        self._clock = 0

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
        self, addresses: np.ndarray, size: int, now: int, outstanding: int | None = None
    ) -> Access:
        """Hits read host DRAM, misses read the SSD, both at once."""
        addr = np.asarray(addresses, dtype=np.int64).ravel()
        hit = self._hits(addr)
        self._touch(addr, size)
        self.hits += int(hit.sum())
        self.misses += int((~hit).sum())
        return _merge(
            self.dram.read(addr[hit], size, now, outstanding),
            self.ssd.read(addr[~hit], size, now, outstanding),
        )

    def write(
        self, addresses: np.ndarray, size: int, now: int, outstanding: int | None = None
    ) -> Access:
        """Write through to the SSD; the cached copies are written in DRAM alongside."""
        addr = np.asarray(addresses, dtype=np.int64).ravel()
        self._touch(addr, size)
        return _merge(
            self.ssd.write(addr, size, now, outstanding),
            self.dram.write(addr, size, now, outstanding),
        )

    def _hits(self, addr: np.ndarray) -> np.ndarray:
        first = np.zeros(addr.size, dtype=bool)
        first[np.unique(addr, return_index=True)[1]] = True
        resident = np.zeros(addr.size, dtype=bool)
        if self._rows.size:
            idx = np.minimum(np.searchsorted(self._rows, addr), self._rows.size - 1)
            resident = self._rows[idx] == addr
        return resident | ~first

    def _touch(self, addr: np.ndarray, size: int) -> None:
        """Stamp the op's rows as most recent and keep the capacity's worth of newest."""
        stamps = self._clock + np.arange(addr.size, dtype=np.int64)
        self._clock += addr.size
        rows = np.concatenate([self._rows, addr])
        last = np.concatenate([self._stamp, stamps])
        order = np.lexsort((last, rows))
        rows, last = rows[order], last[order]
        newest = np.r_[rows[1:] != rows[:-1], True]
        rows, last = rows[newest], last[newest]
        capacity = max(self.cache_capacity // size, 1)
        if rows.size > capacity:
            keep = np.sort(np.argpartition(last, rows.size - capacity)[rows.size - capacity :])
            rows, last = rows[keep], last[keep]
        self._rows, self._stamp = rows, last


def _merge(a: Access, b: Access) -> Access:
    """Two accesses served concurrently (the op lasts as long as the slower one)."""
    return Access(
        max(a.ticks, b.ticks),
        max(a.raw_stall_ticks, b.raw_stall_ticks),
        a.media_bytes + b.media_bytes,
        a.requests + b.requests,
        a.energy_j + b.energy_j,
        np.maximum(a.persist_ticks, b.persist_ticks) if a.persist_ticks.size else b.persist_ticks,
    )
