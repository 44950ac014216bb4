"""The host CPU running embedding ops in software (the paper's SSD/PMEM/DRAM configs).

An embedding gather streams rows through the cores' L1 fill buffers, so the memory
side is bounded by memory-level parallelism: cores x fill buffers cache lines in
flight. The reduce/add runs on AVX2 units at a per-core FLOP rate; the op takes the
slower of the two plus a framework launch overhead. Persisting updated rows costs a
clwb per line and an sfence per group of rows that waits until the flushed lines are
in the persistence domain (ADR: accepted by the device's write pending queue).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from components.memory.base import Access, MemoryDevice, OpResult
from components.sim.params import ComputeRate, Frequency, Int, Latency, Power
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_ARK = "Intel ARK Core i5-9600K (6 cores, 3.7 GHz base, 95 W TDP)"
_OPT = "Intel 64 and IA-32 Architectures Optimization Reference Manual (Skylake core)"
CACHE_LINE = 64


COPY_CHUNK = 4096  # bytes per store stream of a large memcpy (one page)


class HostCpu(SimObject):
    """i5-9600K defaults (the paper's host)."""

    frequency = Frequency("3.7GHz", "core clock", _ARK)
    cores = Int(6, "cores running embedding ops", _ARK, low=1)
    fill_buffers = Int(12, "L1D fill buffers per core (outstanding misses)", _OPT, low=1)
    core_flops = ComputeRate(
        "59.2GFLOPS",
        "FP32 add throughput per core (2 AVX2 ports x 8 lanes x 3.7 GHz)",
        _OPT,
    )
    rows_per_fence = Int(
        1,
        "updated rows persisted per sfence",
        "PMDK pmem_persist per updated vector (one flush+fence per object)",
        low=1,
    )
    sfence_latency = Latency(
        "30ns", "sfence cost beyond waiting for flushes", "estimate: ~100 cycles store drain"
    )
    op_overhead = Latency(
        "10us", "framework op launch per embedding op", "estimate: PyTorch eager CPU op dispatch"
    )
    static_power = Power("10W", "package idle power", "estimate: desktop package idle")
    core_active_power = Power(
        "14W", "power per busy core above idle", f"(95 W TDP - 10 W idle) / 6 cores ({_ARK})"
    )

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.busyTicks = self.scalar("busyTicks", "ticks running embedding ops", "Tick")
        self.flops = self.scalar("flops", "floating-point operations", "Count")
        self.persistFences = self.scalar("persistFences", "sfences for persistence", "Count")
        self.dynamicEnergy = self.scalar("dynamicEnergy", "busy-core energy", "Joule")

    def outstanding(self, row_bytes: int) -> int:
        """Rows in flight: all fill buffers over the lines each row needs."""
        return max(self.cores * self.fill_buffers // math.ceil(row_bytes / CACHE_LINE), 1)

    def gather_reduce(
        self, device: MemoryDevice, addresses: np.ndarray, row_bytes: int, now: int
    ) -> OpResult:
        """Read every looked-up row and sum each bag (one add per element)."""
        read = device.read(addresses, row_bytes, now, self.outstanding(row_bytes))
        flops = float(len(addresses) * row_bytes // 4)
        ticks = max(read.ticks, self._compute_ticks(flops)) + self.op_overhead
        return self._done(ticks, (read,), flops)

    def update(
        self,
        device: MemoryDevice,
        addresses: np.ndarray,
        row_bytes: int,
        now: int,
        persist: bool = False,
    ) -> OpResult:
        """Read-modify-write of each updated row (w -= lr * g: 2 flops/element), then
        optionally persist the rows (clwb + sfence)."""
        window = self.outstanding(row_bytes)
        read = device.read(addresses, row_bytes, now, window)
        flops = float(2 * len(addresses) * row_bytes // 4)
        first = max(read.ticks, self._compute_ticks(flops))
        write = device.write(addresses, row_bytes, now + first, window)
        ticks = first + write.ticks + self.op_overhead
        if persist:
            ticks += self._persist_ticks(device, write, len(addresses))
        return self._done(ticks, (read, write), flops)

    def persist_rows(
        self, device: MemoryDevice, addresses: np.ndarray, row_bytes: int, now: int
    ) -> OpResult:
        """Copy rows to a persistent log and flush them (the redo checkpoint's rows)."""
        write = device.write(addresses, row_bytes, now, self.outstanding(row_bytes))
        ticks = write.ticks + self._persist_ticks(device, write, len(addresses))
        return self._done(ticks + self.op_overhead, (write,), 0.0)

    def persist_region(self, device: MemoryDevice, base: int, nbytes: int, now: int) -> OpResult:
        """Copy one contiguous buffer (the MLP parameters) to persistent memory and
        persist it as PMDK's pmem_persist does for a range: clwb every line, one sfence."""
        unit = COPY_CHUNK
        lines = base + np.arange(-(-nbytes // unit), dtype=np.int64) * unit
        write = device.write(lines, unit, now, self.outstanding(unit))
        ticks = write.ticks + self._persist_ticks(device, write, self.rows_per_fence)
        return self._done(ticks + self.op_overhead, (write,), 0.0)

    def _persist_ticks(self, device: MemoryDevice, write: Access, rows: int) -> int:
        """Each core's fences serialize: under ADR a fence waits one write latency for
        its flushes to reach the WPQ; under eADR/GPF no flush is needed, only ordering."""
        fences = math.ceil(rows / self.rows_per_fence)
        self.persistFences += fences
        wait = device.idle_write_latency if getattr(device, "domain", "adr") == "adr" else 0
        return math.ceil(fences * (wait + self.sfence_latency) / self.cores)

    def _compute_ticks(self, flops: float) -> int:
        return math.ceil(flops * TICKS_PER_SECOND / (self.cores * self.core_flops))

    def _done(self, ticks: int, accesses: tuple[Access, ...], flops: float) -> OpResult:
        energy = self.cores * self.core_active_power * ticks / TICKS_PER_SECOND
        self.busyTicks += ticks
        self.flops += flops
        self.dynamicEnergy += energy
        return OpResult(int(ticks), accesses, flops, energy)
