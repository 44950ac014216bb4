"""The GPU's kernel times against analytical cases: waves of tiles over SMs, thin GEMMs
bound by bytes, the minimum kernel duration, eager launches; presets from datasheets."""

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import run_ops

from components.compute.gpu import TILES, Gpu, reuse, split_ticks
from components.compute.gpu_presets import PRESETS, UnknownGpuError, check_gpu
from components.sim.params import ConfigError
from components.sim.units import TICKS_PER_SECOND


@dataclass
class Kernel:
    name: str
    flops: float
    bytes: float
    kind: str = "elementwise"
    gemm: tuple | None = None


def gemm(m: int, n: int, k: int, batch: int = 1) -> Kernel:
    return Kernel(
        "gemm", batch * 2 * m * n * k, batch * 4 * (m * k + k * n + m * n), "gemm", (batch, m, n, k)
    )


def sm_rate(gpu: Gpu) -> float:
    return gpu.peak_flops * gpu.gemm_efficiency / gpu.sm_count


def test_big_square_gemm_runs_in_whole_waves_of_tiles():
    """8192^3 on 82 SMs: 4096 tiles of 128 x 128 are 49.95 waves, so 50 are paid (a
    smaller tile quantizes no better and reuses less)."""
    gpu = Gpu()
    expected = 50 * 2 * 128 * 128 * 8192 / sm_rate(gpu) * TICKS_PER_SECOND
    assert gpu.model_ticks(gemm(8192, 8192, 8192)) == pytest.approx(expected, rel=1e-9)


def test_one_tile_more_than_the_sms_costs_a_whole_wave():
    gpu = Gpu()
    shape = lambda tiles: (1, 128, 128 * tiles, 4096)  # noqa: E731
    full = split_ticks(gpu.gemm_rates(), (128, 128), 1, shape(82), gemm(*shape(82)[1:]).bytes)
    over = split_ticks(gpu.gemm_rates(), (128, 128), 1, shape(83), gemm(*shape(83)[1:]).bytes)
    assert full == pytest.approx(2 * 128 * 128 * 4096 / sm_rate(gpu) * TICKS_PER_SECOND, abs=1)
    assert over == pytest.approx(2 * full, abs=2)


def test_thin_k_gemm_is_bound_by_its_bytes():
    """RM1's first bottom layer at batch 128: k = 13, so writing the 128 x 8192 output
    takes longer than computing it."""
    gpu = Gpu()
    kernel = gemm(128, 8192, 13)
    expected = kernel.bytes / (936e9 * gpu.memory_efficiency) * TICKS_PER_SECOND
    assert gpu.model_ticks(kernel) == math.ceil(expected)


def test_gemm_too_small_to_fill_the_sms_runs_at_the_rate_of_the_ones_it_uses():
    """64 x 64 x 4096: one tile; split-K into 32 slices of 128 puts 32 threadblocks on
    32 SMs (a 64 x 64 tile keeps 4 warps, enough to fill its SM, at half the 128 x 128
    tile's reuse), then a reduction of the 32 partial tiles: slower than the whole GPU
    by at least 82 / 32."""
    gpu = Gpu()
    kernel = gemm(64, 64, 4096)
    slice_ticks = 2 * 64 * 64 * 128 / (sm_rate(gpu) * 0.5) * TICKS_PER_SECOND
    assert slice_ticks > gpu.min_kernel_time
    expected = math.ceil(slice_ticks) + gpu.min_kernel_time  # the reduction is tiny
    assert gpu.model_ticks(kernel) == expected
    whole_gpu = kernel.flops / (gpu.peak_flops * gpu.gemm_efficiency) * TICKS_PER_SECOND
    assert gpu.model_ticks(kernel) > whole_gpu * 82 / 32


def test_a_tiles_rate_follows_its_reuse():
    assert [reuse(t) for t in ((128, 128), (128, 64), (64, 64), (32, 32))] == pytest.approx(
        [1, 2 / 3, 1 / 2, 1 / 4]
    )


def test_split_k_shortens_a_thin_output_with_a_long_k():
    gpu = Gpu()
    shape = (1, 32, 32, 65536)
    kernel = gemm(*shape[1:])
    unsplit = min(split_ticks(gpu.gemm_rates(), tile, 1, shape, kernel.bytes) for tile in TILES)
    assert gpu.model_ticks(kernel) < unsplit / 4


def test_tiny_kernels_take_the_minimum_duration():
    gpu = Gpu()
    assert gpu.model_ticks(gemm(8, 8, 8)) == gpu.min_kernel_time == 2_500_000
    assert gpu.model_ticks(Kernel("relu", 128, 1024)) == gpu.min_kernel_time
    big = Kernel("relu", 1 << 26, 8 << 26)
    assert gpu.model_ticks(big) == math.ceil(
        (8 << 26) / (936e9 * gpu.memory_efficiency) * TICKS_PER_SECOND
    )


def test_eager_launches_stretch_short_kernels_only():
    gpu = Gpu(eager=True)
    short, long = Kernel("relu", 128, 1024), Kernel("relu", 1 << 26, 8 << 26)
    assert gpu.kernel_ticks(short) == gpu.launch_overhead == 5_000_000
    assert gpu.kernel_ticks(long) == gpu.model_ticks(long) > gpu.launch_overhead
    assert Gpu().kernel_ticks(short) == gpu.min_kernel_time
    assert gpu.op_ticks([short, long]) == gpu.launch_overhead + gpu.model_ticks(long)
    assert gpu.op_ticks([]) == 0


def test_run_puts_device_time_on_the_sms_and_eager_waits_in_latency():
    gpu = Gpu(eager=True)
    kernels = [gemm(4096, 4096, 4096), Kernel("relu", 128, 1024)]
    (record,), sched = run_ops(lambda now: gpu.run(kernels))
    gpu.absorb_use(sched.network.use, sched.resources)
    ticks = record.end - record.start
    assert ticks == gpu.op_ticks(kernels)
    waited = gpu.launch_overhead - gpu.min_kernel_time
    assert gpu.launchTicks.value == waited
    assert gpu.busy_ticks() == ticks - waited
    assert gpu.kernels.value == 2


def test_measured_times_replace_the_model_for_the_kernels_they_name():
    gpu = Gpu()
    step, other = gemm(4096, 4096, 4096), Kernel("device_copy", 0, 1 << 20)
    gpu.use_measured({"gemm": 7_000_000})
    assert gpu.kernel_ticks(step) == 7_000_000
    assert gpu.kernel_ticks(other) == gpu.model_ticks(other)
    gpu.use_measured(None)
    assert gpu.kernel_ticks(step) == gpu.model_ticks(step)


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
        ("sm_count", 0, "sm_count"),
    ],
)
def test_bad_parameters(key, value, match):
    with pytest.raises(ConfigError, match=match):
        Gpu(**{key: value})


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 9000), st.integers(1, 9000), st.integers(1, 20000))
def test_no_gemm_beats_its_roofline_or_the_minimum_duration(batch, m, n, k):
    gpu = Gpu()
    kernel = gemm(m, n, k, batch)
    roofline = max(
        kernel.flops / (gpu.peak_flops * gpu.gemm_efficiency),
        kernel.bytes / (gpu.memory_bandwidth * gpu.memory_efficiency),
    )
    ticks = gpu.model_ticks(kernel)
    assert ticks >= roofline * TICKS_PER_SECOND * (1 - 1e-9)
    assert ticks >= gpu.min_kernel_time


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 1e13), st.floats(0, 1e10), st.floats(1, 1e12))
def test_kernel_time_monotone(flops, nbytes, extra):
    gpu = Gpu()
    base = gpu.kernel_ticks(Kernel("k", flops, nbytes))
    assert base <= gpu.kernel_ticks(Kernel("k", flops + extra, nbytes))
    assert base <= gpu.kernel_ticks(Kernel("k", flops, nbytes + extra))


@pytest.mark.parametrize(
    ("name", "peak", "bandwidth", "sms"),
    [
        ("rtx3090", 35.6e12, 936e9, 82),
        ("a100", 19.5e12, 2039e9, 108),
        ("h100", 67e12, 3.35e12, 132),
        ("h200", 67e12, 4.8e12, 132),
    ],
)
def test_presets_carry_their_datasheet_figures(name, peak, bandwidth, sms):
    gpu = Gpu.preset(name)
    assert (gpu.peak_flops, gpu.memory_bandwidth, gpu.sm_count) == (peak, bandwidth, sms)


def test_rtx3090_preset_is_the_default_gpu():
    default, preset = Gpu(), Gpu.preset("RTX3090")
    assert all(getattr(default, k) == getattr(preset, k) for k in Gpu._params)


def test_unknown_gpu_names_the_presets():
    with pytest.raises(UnknownGpuError, match="valid GPUs: rtx3090, a100, h100, h200"):
        check_gpu("v100")


def test_every_preset_value_has_a_source():
    for preset in PRESETS.values():
        for key, (_, source) in preset.values.items():
            assert key in Gpu._params and source.strip()
