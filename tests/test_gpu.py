"""Roofline checks of the GPU model."""

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import run_ops

from components.compute.gpu import Gpu
from components.sim.params import ConfigError
from components.sim.units import TICKS_PER_SECOND


@dataclass
class Kernel:
    name: str
    flops: float
    bytes: float


def gemm(m: int, n: int, k: int) -> Kernel:
    return Kernel("gemm", 2 * m * n * k, 4 * (m * k + k * n + m * n))


def test_big_square_gemm_is_compute_bound():
    gpu = Gpu()
    kernel = gemm(8192, 8192, 8192)
    assert gpu.is_compute_bound(kernel)
    expected = kernel.flops / (35.6e12 * gpu.gemm_efficiency) * TICKS_PER_SECOND
    assert gpu.kernel_ticks(kernel) - gpu.launch_overhead == pytest.approx(expected, rel=1e-6)


def test_gemv_is_bandwidth_bound():
    gpu = Gpu()
    kernel = gemm(1, 4096, 4096)  # batch 1: a matrix-vector product
    assert not gpu.is_compute_bound(kernel)
    expected = kernel.bytes / (936e9 * gpu.memory_efficiency) * TICKS_PER_SECOND
    assert gpu.compute_ticks(kernel) == pytest.approx(expected, rel=1e-6)


def test_op_ticks_sums_kernels_with_launch_overhead():
    gpu = Gpu()
    kernels = [gemm(256, 512, 128), Kernel("relu", 256 * 512, 8 * 256 * 512)]
    assert gpu.op_ticks(kernels) == sum(gpu.compute_ticks(k) for k in kernels) + 2 * 5_000_000
    assert gpu.op_ticks([]) == 0


def test_run_records_utilisation():
    gpu = Gpu()
    kernels = [gemm(4096, 4096, 4096)] * 2
    (record,), sched = run_ops(lambda now: gpu.run(kernels))
    gpu.absorb_use(sched.network.use, sched.resources)
    ticks = record.end - record.start
    assert ticks == gpu.op_ticks(kernels)
    assert gpu.kernels.value == 2 and gpu.busy_ticks() == ticks - 2 * gpu.launch_overhead
    assert gpu.achievedFlops.value == pytest.approx(35.6e12 * gpu.gemm_efficiency, rel=1e-4)


def test_memory_capacity_check():
    gpu = Gpu()
    gpu.check_fits(20 << 30, "MLPs")
    with pytest.raises(ConfigError, match="memory_capacity"):
        gpu.check_fits(25 << 30, "embedding tables")


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("launch_overhead", "-1us", "launch_overhead"),
        ("peak_flops", "35.6TB", "peak_flops"),
        ("gemm_efficiency", 1.5, "gemm_efficiency"),
    ],
)
def test_bad_parameters(key, value, match):
    with pytest.raises(ConfigError, match=match):
        Gpu(**{key: value})


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 1e13), st.floats(0, 1e10), st.floats(1, 1e12))
def test_kernel_time_monotone(flops, nbytes, extra):
    gpu = Gpu()
    base = gpu.kernel_ticks(Kernel("k", flops, nbytes))
    assert base <= gpu.kernel_ticks(Kernel("k", flops + extra, nbytes))
    assert base <= gpu.kernel_ticks(Kernel("k", flops, nbytes + extra))
