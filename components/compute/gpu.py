"""A GPU as a roofline: each kernel takes max(compute, memory) time plus launch overhead.

Kernels are duck-typed (anything with ``flops`` and ``bytes``) so that this layer does
not import workloads/opgraph.py. Achievable efficiencies scale the peaks because real
cuBLAS/elementwise kernels do not reach datasheet numbers. Energy follows the contract:
``active_power`` while kernels run (``busy_ticks``), ``static_power`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from components.sim.flows import Flow
from components.sim.params import (
    Bandwidth,
    ComputeRate,
    ConfigError,
    Float,
    Latency,
    MemorySize,
    Power,
    positive,
)
from components.sim.schedule import Stage
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND


class KernelLike(Protocol):
    """What the GPU needs of a kernel (workloads.opgraph.Kernel fits)."""

    flops: float
    bytes: float


@dataclass(frozen=True)
class DeviceCopy:
    """A device-to-device memory copy kernel: reads and writes every byte once."""

    name: str
    flops: float
    bytes: float


class Gpu(SimObject):
    """NVIDIA RTX 3090 (GA102) defaults: the GPU the paper replays kernel times from."""

    peak_flops = ComputeRate(
        "35.6TFLOPS",
        "FP32 peak at boost clock",
        "NVIDIA RTX 3090 spec / GA102 whitepaper (10496 cores x 2 x 1.695 GHz)",
        check=positive,
    )
    memory_bandwidth = Bandwidth(
        "936GB/s",
        "GDDR6X peak bandwidth",
        "NVIDIA RTX 3090 spec (19.5 Gbps x 384 bit)",
        check=positive,
    )
    memory_capacity = MemorySize("24GiB", "device memory capacity", "NVIDIA RTX 3090 spec")
    gemm_efficiency = Float(
        0.65,
        "fraction of FP32 peak that large cuBLAS SGEMMs sustain",
        "assumption: GA102's second FP32 path is shared with INT32 (GA102 whitepaper), so "
        "SGEMM typically reaches ~60-70% of the dual-issue peak",
        low=0.01,
        high=1.0,
    )
    memory_efficiency = Float(
        0.85,
        "fraction of peak DRAM bandwidth that streaming kernels sustain",
        "assumption: STREAM-like kernels on GDDR6 GPUs commonly reach 80-90% of peak",
        low=0.01,
        high=1.0,
    )
    launch_overhead = Latency(
        "5us",
        "host-side launch cost per kernel not hidden by the queue",
        "assumption within the 3-7 us launch/submission latency measured on recent CUDA "
        "stacks (e.g. Wu et al. 2026, DualPath: 5-7 us per submission)",
    )
    active_power = Power("350W", "board power while kernels run", "NVIDIA RTX 3090 TGP 350 W")
    static_power = Power(
        "25W",
        "board power while idle",
        "reviews measure 16-26 W idle (Hardwareluxx RTX 3090 review 2020); upper end since a "
        "live CUDA context keeps clocks up (assumption)",
    )

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        self.busyTicks = self.scalar("busyTicks", "ticks running kernels", "Tick")
        self.launchTicks = self.scalar("launchTicks", "ticks spent in launch overhead", "Tick")
        self.kernels = self.scalar("kernels", "kernels executed", "Count")
        self.flopsExecuted = self.scalar("flopsExecuted", "floating-point operations", "Count")
        self.bytesAccessed = self.scalar("bytesAccessed", "device-memory bytes moved", "Byte")
        self.achievedFlops = self.formula(
            "achievedFlops",
            "FLOP/s while busy (flopsExecuted / busy time)",
            "Count/Second",
            self._achieved_flops,
        )

    def _achieved_flops(self) -> float:
        busy = self.busyTicks.value
        return self.flopsExecuted.value * TICKS_PER_SECOND / busy if busy else 0.0

    # ----- timing queries (no side effects) -----------------------------------------
    def compute_ticks(self, kernel: KernelLike) -> int:
        """Roofline time of one kernel, without launch overhead."""
        flops_rate = self.peak_flops * self.gemm_efficiency
        byte_rate = self.memory_bandwidth * self.memory_efficiency
        seconds = max(kernel.flops / flops_rate, kernel.bytes / byte_rate)
        return math.ceil(seconds * TICKS_PER_SECOND)

    def kernel_ticks(self, kernel: KernelLike) -> int:
        """Roofline time plus launch overhead."""
        return self.compute_ticks(kernel) + self.launch_overhead

    def op_ticks(self, kernels: Iterable[KernelLike]) -> int:
        """Kernels of one op run back to back on one stream."""
        return sum(self.kernel_ticks(k) for k in kernels)

    def copy_kernel(self, nbytes: int) -> DeviceCopy:
        """cudaMemcpy device-to-device of ``nbytes`` (bandwidth-bound)."""
        return DeviceCopy("device_copy", 0.0, 2.0 * nbytes)

    def is_compute_bound(self, kernel: KernelLike) -> bool:
        flops_rate = self.peak_flops * self.gemm_efficiency
        byte_rate = self.memory_bandwidth * self.memory_efficiency
        return kernel.flops / flops_rate >= kernel.bytes / byte_rate

    # ----- execution with accounting --------------------------------------------------
    def run(self, kernels: Iterable[KernelLike]) -> Stage:
        """The kernels of one op back to back on one stream: their roofline time is work
        on the GPU's SMs (a flow), the launch gaps a fixed latency. Counts FLOPs, bytes
        and kernels; busy time comes from the flow network (``absorb_use``)."""
        kernels, compute = list(kernels), 0
        for kernel in kernels:
            compute += self.compute_ticks(kernel)
            self.launchTicks += self.launch_overhead
            self.kernels += 1
            self.flopsExecuted += kernel.flops
            self.bytesAccessed += kernel.bytes
        return Stage([Flow({self.path: compute})], self.launch_overhead * len(kernels))

    def absorb_use(self, use, units) -> None:
        """Busy time of the SMs as the flow network served it."""
        self.busyTicks.set(use[self.path].busy if self.path in use else 0)

    def busy_ticks(self) -> int:
        """Energy hook: ticks at active_power (see components/energy.py)."""
        return int(self.busyTicks.value)

    def check_fits(self, nbytes: int, what: str) -> None:
        """Raise ConfigError when nbytes of `what` exceed device memory."""
        if nbytes > self.memory_capacity:
            raise ConfigError(
                f"{self.path}.memory_capacity: {what} needs {nbytes} B, "
                f"more than {self.memory_capacity} B of GPU memory"
            )
