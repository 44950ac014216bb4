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
from collections.abc import Iterator
from typing import Any

import numpy as np

from components.memory.base import MemoryDevice
from components.memory.stages import concurrent, stage, write_range
from components.persistence.image import RECORD_HEADER
from components.sim.params import ComputeRate, Frequency, Int, Latency, Power
from components.sim.schedule import Stage
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_ARK = "Intel ARK Core i5-9600K (6 cores, 3.7 GHz base, 95 W TDP)"
_OPT = "Intel 64 and IA-32 Architectures Optimization Reference Manual (Skylake core)"
CACHE_LINE = 64


COPY_CHUNK = 4096  # bytes per store stream of a large memcpy (one page)


class HostCpu(SimObject):
    """i5-9600K defaults (the paper's host)."""

    UNIT = "host.cpu"  # the framework thread that runs the host's ops, one at a time

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
        self,
        device: MemoryDevice,
        addresses: np.ndarray,
        row_bytes: int,
        distinct: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Stage:
        """Read every looked-up row and sum each bag (one add per element); ``distinct``:
        the rows' distinct addresses and lookups of each, where known (MemoryDevice.read)."""
        read = device.read(addresses, row_bytes, self.outstanding(row_bytes), distinct=distinct)
        compute = self._compute(len(addresses) * row_bytes // 4)
        return stage(read, compute=compute, latency=self.op_overhead)

    def update(
        self, device: MemoryDevice, addresses: np.ndarray, row_bytes: int, persist: bool = False
    ) -> Iterator[Stage]:
        """Read-modify-write of each updated row (w -= lr * g: 2 flops/element): the
        framework reads and computes the new rows, then writes them back, persisting
        each (clwb + sfence) when the rows live in persistent memory."""
        window = self.outstanding(row_bytes)
        read = device.read(addresses, row_bytes, window)
        yield stage(read, compute=self._compute(2 * len(addresses) * row_bytes // 4))
        write = device.write(addresses, row_bytes, window)
        if persist:
            yield self._persisted(device, write, len(addresses))
        else:
            yield stage(write, latency=self.op_overhead)

    def persist_rows(
        self,
        device: MemoryDevice,
        addresses: np.ndarray,
        row_bytes: int,
        header: int | None = None,
    ) -> Stage:
        """Write rows to a persistent log and persist each (the redo checkpoint's rows),
        with the record's header at ``header``."""
        write = device.write(addresses, row_bytes, self.outstanding(row_bytes))
        return self._persisted(device, self._with_header(device, write, header), len(addresses))

    def persist_region(
        self, device: MemoryDevice, base: int, nbytes: int, header: int | None = None
    ) -> Stage:
        """Copy one contiguous buffer (the MLP parameters) to persistent memory and
        persist it as PMDK's pmem_persist does for a range: clwb every line, one sfence."""
        write = write_range(device, base, nbytes, COPY_CHUNK, self.outstanding(COPY_CHUNK))
        return self._persisted(device, self._with_header(device, write, header), 1)

    @staticmethod
    def _with_header(device: MemoryDevice, write, header: int | None):
        if header is None:
            return write
        return concurrent(write, device.write(np.array([header], dtype=np.int64), RECORD_HEADER))

    def _persisted(self, device: MemoryDevice, write, persists: int) -> Stage:
        """A write stream that must be durable before the op ends. Byte-addressable
        memory: a clwb per line and an sfence per ``rows_per_fence`` rows; each core's
        fences serialize (under ADR a fence waits for its flushes' acceptance by the WPQ:
        one write latency idle, longer while other streams share the device, which the
        engine works out from the shares; under eADR/GPF only ordering), overlapping the
        stream. A block
        device: one flush command (fsync) after the stream."""
        if not getattr(device, "byte_addressable", True):
            self.persistFences += 1
            return stage(write, latency=device.idle_write_latency + self.op_overhead)
        fences = math.ceil(persists / self.rows_per_fence)
        self.persistFences += fences
        adr = getattr(device, "domain", "adr") == "adr"
        wait = device.idle_write_latency if adr else 0
        chain = fences * (wait + self.sfence_latency) / self.cores
        persisted = stage(write, latency=self.op_overhead)
        flow = persisted.flows[0]
        flow.min_ticks = max(flow.min_ticks, chain)
        if adr:  # each fence waits for its write's acceptance, slower under load
            flow.fence_ticks, flow.fence_chains = chain, min(self.cores, fences)
        return persisted

    def _compute(self, flops: float) -> dict[str, float]:
        """The cores' AVX work for ``flops`` (busy-core energy follows the op's time)."""
        self.flops += flops
        return {self.path: flops * TICKS_PER_SECOND / (self.cores * self.core_flops)}

    def absorb_use(self, use, units) -> None:
        """Cores are busy while the host's ops run (they spin on misses and fences)."""
        unit = units.get(self.UNIT)
        self.busyTicks.set(unit.busy_ticks if unit is not None else 0)
        self.dynamicEnergy.set(
            self.cores * self.core_active_power * self.busyTicks.value / TICKS_PER_SECOND
        )
