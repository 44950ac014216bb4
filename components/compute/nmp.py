"""CXL-MEM's near-memory logic: the computing logic (gather + sum-reduce lookup,
scatter update) and the checkpointing logic (a DMA engine and the MLP size counters).

Rows stream from PMEM through a scratchpad that holds the rows in flight, so the
outstanding PMEM requests are bounded by both the request tags and the scratchpad.
Reading, adding and writing are pipelined: an op lasts as long as its slowest stage,
writes starting once the first row has arrived. Functions return durations; the board
schedules them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from components.memory.base import Access, MemoryDevice, OpResult
from components.sim.params import Energy, Frequency, Int, MemorySize, Power, positive
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_PG213 = "Xilinx PG213 UltraScale+ PCIe Gen3 x16 integrated block: 250 MHz, 512-bit AXI user clock"


class NearMemoryEngine(SimObject):
    """FPGA-class defaults (the paper's CXL-MEM prototype is an FPGA)."""

    clock = Frequency("250MHz", "logic clock", _PG213)
    lanes = Int(
        64,
        "FP32 adder/multiplier lanes: a 512-bit (16-lane) pipeline per memory controller",
        f"{_PG213}; 4 controllers in the paper's CXL-MEM",
        low=1,
    )
    outstanding = Int(
        256,
        "PMEM requests in flight (64 tags per memory controller)",
        "estimate: matches the 4 controllers' 64-entry read queues (gem5 NVM_2400_1x64)",
        low=1,
    )
    scratchpad = MemorySize(
        "256KiB", "scratchpad for rows in flight", "estimate: FPGA on-chip BRAM", check=positive
    )
    log_burst = MemorySize(
        "4KiB", "DMA write burst to the MLP log", "AXI 4 KiB burst boundary", low="64B", high="1MiB"
    )  # a cache line at least (one array entry per burst); 1 MiB at most (lines per burst)
    flop_energy = Energy("10pJ", "energy per FP32 operation", "estimate: FPGA DSP-based FP32 add")
    static_power = Power("5W", "logic power while on", "estimate: mid-range FPGA fabric")

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.busyTicks = self.scalar("busyTicks", "ticks running lookups/updates/DMA", "Tick")
        self.flops = self.scalar("flops", "floating-point operations", "Count")
        self.rowsCopied = self.scalar("rowsCopied", "rows copied to the embedding log", "Count")
        self.mlpBytesExpected = self.scalar(
            "mlpBytesExpected", "MLP size counter: bytes the MLP log needs", "Byte"
        )
        self.mlpBytesReceived = self.scalar(
            "mlpBytesReceived", "MLP size counter: bytes written to the MLP log", "Byte"
        )
        self.dynamicEnergy = self.scalar("dynamicEnergy", "arithmetic energy", "Joule")

    def window(self, row_bytes: int) -> int:
        """Rows in flight: request tags, and rows the scratchpad can hold."""
        return max(min(self.outstanding, self.scratchpad // row_bytes), 1)

    def lookup(
        self, pmem: MemoryDevice, addresses: np.ndarray, row_bytes: int, now: int
    ) -> OpResult:
        """Gather rows and sum-reduce them into bags (one add per element)."""
        read = pmem.read(addresses, row_bytes, now, self.window(row_bytes))
        flops = float(len(addresses) * row_bytes // 4)
        return self._done(max(read.ticks, self._compute_ticks(flops)), (read,), flops)

    def update(
        self, pmem: MemoryDevice, addresses: np.ndarray, row_bytes: int, now: int
    ) -> OpResult:
        """Scatter update in place: read, w -= lr * g (2 flops/element), write back."""
        window = self.window(row_bytes)
        read = pmem.read(addresses, row_bytes, now, window)
        flops = float(2 * len(addresses) * row_bytes // 4)
        start = pmem.idle_read_latency
        write = pmem.write(addresses, row_bytes, now + start, window)
        ticks = max(read.ticks, self._compute_ticks(flops), start + write.ticks)
        return self._done(ticks, (read, write), flops)

    def copy_rows(
        self, pmem: MemoryDevice, src_addresses: np.ndarray, dst_base: int, row_bytes: int, now: int
    ) -> OpResult:
        """DMA the rows a batch will update from the data region into the embedding log."""
        window = self.window(row_bytes)
        read = pmem.read(src_addresses, row_bytes, now, window)
        dst = dst_base + np.arange(len(src_addresses), dtype=np.int64) * row_bytes
        start = pmem.idle_read_latency
        write = pmem.write(dst, row_bytes, now + start, window)
        self.rowsCopied += len(src_addresses)
        return self._done(max(read.ticks, start + write.ticks), (read, write), 0.0)

    def start_mlp_log(self, nbytes: int) -> None:
        """Arm the MLP size counter with the MMIO-programmed parameter size."""
        self.mlpBytesExpected.set(nbytes)
        self.mlpBytesReceived.set(0)

    @property
    def mlp_log_complete(self) -> bool:
        return self.mlpBytesReceived.value >= self.mlpBytesExpected.value

    def write_log(self, pmem: MemoryDevice, nbytes: int, dst_base: int, now: int) -> OpResult:
        """Write pulled MLP bytes to the log in DMA bursts and count them received."""
        if nbytes <= 0:
            return OpResult(0, ())
        burst = self.log_burst
        offset = int(self.mlpBytesReceived.value)
        dst = dst_base + offset + np.arange(math.ceil(nbytes / burst), dtype=np.int64) * burst
        write = pmem.write(dst, burst, now, self.window(burst))
        self.mlpBytesReceived += nbytes
        return self._done(write.ticks, (write,), 0.0)

    def _compute_ticks(self, flops: float) -> int:
        return math.ceil(flops * TICKS_PER_SECOND / (self.lanes * self.clock))

    def _done(self, ticks: int, accesses: tuple[Access, ...], flops: float) -> OpResult:
        energy = flops * self.flop_energy
        self.busyTicks += ticks
        self.flops += flops
        self.dynamicEnergy += energy
        return OpResult(int(ticks), accesses, flops, energy)
