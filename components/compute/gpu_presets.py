"""GPU presets from datasheets: the values that differ from the RTX 3090 defaults of
components/compute/gpu.py, each with its source (docs/parameters.md lists them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_GPU = "rtx3090"


@dataclass(frozen=True)
class GpuPreset:
    description: str
    values: dict[str, tuple[str | float | int, str]]
    """Parameter -> (value, source)."""


_ISSUE_SHARED = (
    "like GA102, 128 FP32 lanes per SM issue one warp FMA per scheduler per clock, so "
    "the SGEMM loop's other instructions take FMA slots (H100 whitepaper); GA102's "
    "calibrated value taken over, not fitted on this part"
)
_HBM_EFFICIENCY = "assumption: streaming kernels on HBM parts commonly reach 85-90% of peak"

PRESETS: dict[str, GpuPreset] = {
    DEFAULT_GPU: GpuPreset("NVIDIA GeForce RTX 3090 (GA102), the paper's GPU", {}),
    "a100": GpuPreset(
        "NVIDIA A100 SXM4 80GB (GA100)",
        {
            "peak_flops": ("19.5TFLOPS", "NVIDIA A100 datasheet: FP32 19.5 TFLOPS"),
            "memory_bandwidth": ("2039GB/s", "NVIDIA A100 datasheet: 80GB SXM 2,039 GB/s"),
            "memory_capacity": ("80GiB", "NVIDIA A100 datasheet: 80 GB HBM2e"),
            "sm_count": (108, "NVIDIA A100 whitepaper: 108 SMs"),
            "gemm_efficiency": (
                0.9,
                "assumption: GA100 has 64 FP32 lanes per SM, so a warp FMA takes two "
                "clocks and the loop's loads issue in its shadow (A100 whitepaper); "
                "cuBLAS SGEMM on such SMs (V100, A100) is commonly quoted near 90% of peak",
            ),
            "memory_efficiency": (0.85, _HBM_EFFICIENCY),
            "active_power": ("400W", "NVIDIA A100 datasheet: SXM max TDP 400 W"),
            "static_power": ("50W", "assumption: an idle SXM part with a live context"),
        },
    ),
    "h100": GpuPreset(
        "NVIDIA H100 SXM5 80GB (GH100)",
        {
            "peak_flops": ("67TFLOPS", "NVIDIA H100 datasheet: SXM FP32 67 TFLOPS"),
            "memory_bandwidth": ("3.35TB/s", "NVIDIA H100 datasheet: SXM 3.35 TB/s"),
            "memory_capacity": ("80GiB", "NVIDIA H100 datasheet: SXM 80 GB HBM3"),
            "sm_count": (132, "NVIDIA H100 whitepaper: SXM5 132 SMs"),
            "gemm_efficiency": (0.65, _ISSUE_SHARED),
            "memory_efficiency": (0.85, _HBM_EFFICIENCY),
            "active_power": ("700W", "NVIDIA H100 datasheet: SXM max TDP 700 W"),
            "static_power": ("70W", "assumption: an idle SXM part with a live context"),
        },
    ),
    "h200": GpuPreset(
        "NVIDIA H200 SXM 141GB (GH100 with HBM3e)",
        {
            "peak_flops": ("67TFLOPS", "NVIDIA H200 datasheet: SXM FP32 67 TFLOPS"),
            "memory_bandwidth": ("4.8TB/s", "NVIDIA H200 datasheet: 4.8 TB/s"),
            "memory_capacity": ("141GB", "NVIDIA H200 datasheet: 141 GB HBM3e"),
            "sm_count": (132, "NVIDIA H200 is GH100 with H100 SXM5's 132 SMs"),
            "gemm_efficiency": (0.65, _ISSUE_SHARED),
            "memory_efficiency": (0.85, _HBM_EFFICIENCY),
            "active_power": ("700W", "NVIDIA H200 datasheet: SXM max TDP 700 W"),
            "static_power": ("70W", "assumption: an idle SXM part with a live context"),
        },
    ),
}


class UnknownGpuError(ValueError):
    """A GPU name that is not a preset."""


def check_gpu(name: str) -> str:
    """The preset's name, lower-cased; an unknown one raises with the valid names."""
    key = name.lower()
    if key not in PRESETS:
        raise UnknownGpuError(f"unknown GPU {name!r}; valid GPUs: {', '.join(PRESETS)}")
    return key


def apply_preset(gpu: Any, name: str) -> None:
    """Set ``gpu``'s parameters to the preset's (the defaults are the RTX 3090's)."""
    key_name = check_gpu(name)
    preset = PRESETS[key_name]
    for key, param in type(gpu)._params.items():
        setattr(gpu, key, preset.values.get(key, (param.default, ""))[0])
    gpu.preset_name = key_name
