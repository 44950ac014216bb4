"""A GPU's kernel times: GEMMs by tiles over SMs, other kernels by bandwidth, each at least
a minimum duration, and (eager execution) at least the host's launch cost.

Kernels are duck-typed (``flops``, ``bytes``, optionally ``name``, ``kind`` and ``gemm``
= (batch, m, n, k)) so that this layer does not import workloads/opgraph.py. A GEMM is
timed as cuBLAS runs it: output tiles of one of CUTLASS's SIMT threadblock shapes,
optionally split along k, spread over the SMs in waves (the busiest SM sets the time);
a thin GEMM that cannot fill the SMs runs on the few it has, or is bound by its bytes.
Measured kernel times (``use_measured``, from a --gpu-profile file) replace the model.
Energy follows the contract: ``active_power`` while kernels run (``busy_ticks``),
``static_power`` otherwise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from components.compute.gpu_presets import DEFAULT_GPU, PRESETS, apply_preset
from components.sim.flows import Flow
from components.sim.params import (
    Bandwidth,
    Bool,
    ComputeRate,
    ConfigError,
    Float,
    Int,
    Latency,
    MemorySize,
    Power,
    positive,
)
from components.sim.schedule import Stage
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

FLOAT_BYTES = 4


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


TILES = ((128, 128), (128, 64), (64, 128), (64, 64), (64, 32), (32, 64), (32, 32))
"""Threadblock tiles (m x n outputs) of CUTLASS's SIMT SGEMM configurations and of the
cuBLAS kernels named after them (ampere_sgemm_128x128, _128x64, _64x64, _32x32 ...),
largest first."""
SPLITS = (1, 2, 4, 8, 16, 32)
"""Split-K factors tried: k cut into slices whose partial tiles a reduction kernel sums
(cuBLAS's splitKreduce_kernel; CUTLASS's parallel split-K)."""
WARP_OUTPUTS = 32 * 32
"""Outputs one warp of a SIMT GEMM computes (CUTLASS's 32x32 warp tile of 8x4 threads
x 4x8 each), so a tile of m x n outputs keeps m n / 1024 warps."""
WARPS_TO_FILL_SM = 4
"""Warps one SM needs to issue at its full rate: one per scheduler (four per SM since
Volta; NVIDIA Ampere and Hopper architecture whitepapers)."""


def reuse(tile: tuple[int, int]) -> float:
    """A tile's rate relative to 128 x 128's: a threadblock of m x n outputs loads
    m + n operand elements per k step for m n FMAs, so its loads per FLOP grow as
    (m + n) / (m n); taking the 128 x 128 tile's loads as just keeping up with its FMAs
    (the reason cuBLAS prefers it for large GEMMs), a smaller tile runs at the ratio of
    the two intensities (assumption; the RTX 4060 Ti SGEMM sweep in
    docs/validation/gpu.yaml holds it from 512^3 up)."""
    tm, tn = tile
    return min(1.0, (tm * tn / (tm + tn)) / 64.0)


class Gpu(SimObject):
    """NVIDIA RTX 3090 (GA102) defaults: the GPU the paper replays kernel times from.
    ``Gpu.preset(name)`` gives the other parts (components/compute/gpu_presets.py)."""

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
    sm_count = Int(
        82, "streaming multiprocessors", "NVIDIA GA102 whitepaper (RTX 3090: 82 SMs)", low=1
    )
    gemm_efficiency = Float(
        0.65,
        "fraction of an SM's FP32 peak a SIMT SGEMM tile sustains once the SM is full",
        "GA102's 128 FP32 lanes per SM take one warp FMA per scheduler per clock, so the "
        "SGEMM loop's loads and address arithmetic take FMA issue slots (GA102 whitepaper); "
        "calibrated on GA102's measured cuBLAS SGEMM (RTX A6000, 4096^3: 23.25 TFLOPS of "
        "38.7, Boehm 2022, siboehm.com/articles/22/CUDA-MMM; docs/validation/gpu.yaml)",
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
    split_k_min_depth = Int(
        128,
        "least k a split-K slice keeps (below it the partial tiles cost more than they save)",
        "assumption: 16 main-loop iterations of CUTLASS's SIMT k-step of 8",
        low=1,
    )
    min_kernel_time = Latency(
        "2.5us",
        "least time a kernel occupies the GPU, however little it computes (launch, block "
        "dispatch, drain), back to back on one stream",
        "assumption: 'a few microseconds' (NVIDIA blog, Gray 2019, Getting Started with "
        "CUDA Graphs: short kernels in a graph take ~3 us each); the same on every preset",
    )
    launch_overhead = Latency(
        "5us",
        "host cost of launching one kernel in eager mode (a kernel shorter than it "
        "leaves the GPU waiting for the next launch)",
        "assumption within the 3-7 us launch/submission latency measured on recent CUDA "
        "stacks (e.g. Wu et al. 2026, DualPath: 5-7 us per submission)",
    )
    eager = Bool(
        False,
        "eager execution: every kernel lasts at least launch_overhead (false: a CUDA "
        "graph or a host far ahead of the GPU, as kernel times measured with CUDA graphs)",
        "PyTorch runs eagerly unless the step is captured (torch.cuda.graphs)",
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
        self.measured: dict[str, int] | None = None
        self.preset_name = DEFAULT_GPU
        self.busyTicks = self.scalar("busyTicks", "ticks running kernels", "Tick")
        self.launchTicks = self.scalar(
            "launchTicks", "ticks the GPU waited for eager launches", "Tick"
        )
        self.kernels = self.scalar("kernels", "kernels executed", "Count")
        self.flopsExecuted = self.scalar("flopsExecuted", "floating-point operations", "Count")
        self.bytesAccessed = self.scalar("bytesAccessed", "device-memory bytes moved", "Byte")
        self.achievedFlops = self.formula(
            "achievedFlops",
            "FLOP/s while busy (flopsExecuted / busy time)",
            "Count/Second",
            self._achieved_flops,
        )

    @classmethod
    def preset(cls, name: str) -> Gpu:
        """The GPU called ``name`` (components/compute/gpu_presets.py)."""
        gpu = cls()
        apply_preset(gpu, name)
        return gpu

    def config(self) -> dict[str, Any]:
        """config.json: the preset's name, and its own source for each value it set
        that no --set has changed since."""
        out = super().config()
        preset = PRESETS[self.preset_name]
        out["preset"] = self.preset_name
        for key, (value, source) in preset.values.items():
            if self._param_raw[key] == value:
                out["params"][key]["source"] = source
        return out

    def use_measured(self, ticks_by_kernel: dict[str, int] | None) -> None:
        """Replace the model by measured device ticks per kernel name (None: the model).
        Not a parameter: a profile is data for one model and batch size."""
        self.measured = None if ticks_by_kernel is None else dict(ticks_by_kernel)

    def _achieved_flops(self) -> float:
        busy = self.busyTicks.value
        return self.flopsExecuted.value * TICKS_PER_SECOND / busy if busy else 0.0

    # ----- timing queries (no side effects) -----------------------------------------
    def device_ticks(self, kernel: KernelLike) -> int:
        """Time the kernel occupies the GPU: measured where the profile has it (the
        step's kernels), else modelled (a snapshot copy, a partial-sum combine)."""
        measured = self.measured.get(getattr(kernel, "name", "")) if self.measured else None
        return self.model_ticks(kernel) if measured is None else measured

    def model_ticks(self, kernel: KernelLike) -> int:
        """The model's time of one kernel, at least ``min_kernel_time``."""
        shape = getattr(kernel, "gemm", None)
        if shape is not None:
            return self.gemm_ticks(shape, kernel.bytes)
        flops_rate = self.peak_flops * self.gemm_efficiency
        seconds = max(kernel.flops / flops_rate, kernel.bytes / self._byte_rate)
        return max(math.ceil(seconds * TICKS_PER_SECOND), self.min_kernel_time)

    def gemm_ticks(self, shape: tuple[int, int, int, int], nbytes: float) -> int:
        """The fastest of cuBLAS's choices for C = A B of ``shape`` = (batch, m, n, k):
        every tile, each with the split-K factors k allows (remembered per parameter
        values and shape: a step asks for the same GEMMs every batch)."""
        return fastest_gemm(self.gemm_rates(), tuple(shape), nbytes)

    def gemm_rates(self) -> GemmRates:
        return GemmRates(
            self.peak_flops * self.gemm_efficiency / self.sm_count,
            self.sm_count,
            self._byte_rate,
            self.split_k_min_depth,
            self.min_kernel_time,
        )

    @property
    def _byte_rate(self) -> float:
        return self.memory_bandwidth * self.memory_efficiency

    def kernel_ticks(self, kernel: KernelLike) -> int:
        """Device time, stretched to the host's launch cost when running eagerly."""
        device = self.device_ticks(kernel)
        return max(device, self.launch_overhead) if self.eager else device

    def op_ticks(self, kernels: Iterable[KernelLike]) -> int:
        """Kernels of one op run back to back on one stream."""
        return sum(self.kernel_ticks(k) for k in kernels)

    def copy_kernel(self, nbytes: int) -> DeviceCopy:
        """cudaMemcpy device-to-device of ``nbytes`` (bandwidth-bound)."""
        return DeviceCopy("device_copy", 0.0, 2.0 * nbytes)

    # ----- execution with accounting --------------------------------------------------
    def run(self, kernels: Iterable[KernelLike]) -> Stage:
        """The kernels of one op back to back on one stream: their device time is work
        on the GPU's SMs (a flow); eager launches the GPU waits for are a fixed latency.
        Counts FLOPs, bytes and kernels; busy time comes from the flow network
        (``absorb_use``)."""
        kernels, compute, waiting = list(kernels), 0, 0
        for kernel in kernels:
            device = self.device_ticks(kernel)
            compute += device
            if self.eager:
                waiting += max(self.launch_overhead - device, 0)
            self.kernels += 1
            self.flopsExecuted += kernel.flops
            self.bytesAccessed += kernel.bytes
        self.launchTicks += waiting
        return Stage([Flow({self.path: compute})], waiting)

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


@dataclass(frozen=True)
class GemmRates:
    """What a GEMM's time depends on, from a GPU's parameters."""

    sm_rate: float  # FLOP/s of one SM on 128 x 128 tiles
    sm_count: int
    byte_rate: float  # B/s the GEMM's operands stream at
    split_k_min_depth: int
    min_kernel_time: int  # ticks


@functools.lru_cache(maxsize=1 << 16)
def fastest_gemm(rates: GemmRates, shape: tuple[int, int, int, int], nbytes: float) -> int:
    """Ticks of the fastest (tile, split) for ``shape`` = (batch, m, n, k)."""
    k = shape[3]
    return min(
        split_ticks(rates, tile, split, shape, nbytes)
        for tile in TILES
        for split in SPLITS
        if split == 1 or k // split >= rates.split_k_min_depth
    )


def split_ticks(rates: GemmRates, tile, split: int, shape, nbytes: float) -> int:
    """One (tile, split) choice: the busiest SM's threadblocks at the SM's rate for that
    tile, or the GEMM's bytes, whichever is longer; then the reduction of the split's
    partial tiles. A tile's rate is the SM's times its reuse (``reuse``) and times the
    share of the SM's schedulers its warps keep busy."""
    batch, m, n, k = shape
    (tm, tn), depth = tile, -(-k // split)
    blocks = batch * -(-m // tm) * -(-n // tn) * split
    per_sm = -(-blocks // rates.sm_count)
    fill = min(1.0, per_sm * max(tm * tn / WARP_OUTPUTS, 1.0) / WARPS_TO_FILL_SM)
    compute = per_sm * 2 * tm * tn * depth / (rates.sm_rate * reuse(tile) * fill)
    memory = (nbytes + FLOAT_BYTES * batch * m * n * (split - 1)) / rates.byte_rate
    ticks = max(math.ceil(max(compute, memory) * TICKS_PER_SECOND), rates.min_kernel_time)
    if split > 1:
        reduce = FLOAT_BYTES * batch * m * n * (split + 1) / rates.byte_rate
        ticks += max(math.ceil(reduce * TICKS_PER_SECOND), rates.min_kernel_time)
    return ticks
