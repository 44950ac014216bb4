"""What the GPU model predicts for one training step, or for one SGEMM.

    python scripts/gpu_model.py --gpu h100 --model rm1 --batch-size 1024 [--json]
    python scripts/gpu_model.py --gpu rtx3090 --gemm 4096 4096 4096 [--json]

For a model: microseconds of the four op groups (bottom_fwd, interaction_top_fwd,
top_bwd_interaction, bottom_bwd) and of the whole dense ``step``, their sum; with
--json one object with exactly those keys. For --gemm M N K: one FP32 GEMM's
microseconds and TFLOPS (``us``, ``tflops``). ``--set PARAM=VALUE`` overrides a GPU
parameter (docs/parameters.md), e.g. ``--set eager=true``.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("gpu_model.py")

from components.compute.gpu import Gpu  # noqa: E402
from components.compute.gpu_presets import DEFAULT_GPU, PRESETS, UnknownGpuError  # noqa: E402
from components.sim.units import TICKS_PER_SECOND  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from workloads.models import DEFAULT_BATCH_SIZE, get_model  # noqa: E402
from workloads.opgraph import OP_NAMES, batch_kernels, gemm  # noqa: E402

TICKS_PER_US = TICKS_PER_SECOND // 1_000_000


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="gpu_model.py", description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default=DEFAULT_GPU, help=f"one of {', '.join(PRESETS)}")
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--gemm", type=int, nargs=3, metavar=("M", "N", "K"), default=None)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="P=V")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.gemm is not None and min(args.gemm) < 1:
        raise UsageError(f"--gemm sizes must be at least 1, got {args.gemm}")
    return args


def build_gpu(name: str, sets: list[str]) -> Gpu:
    try:
        gpu = Gpu.preset(name)
    except UnknownGpuError as exc:
        raise UsageError(f"--gpu: {exc}") from None
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in Gpu._params:
            raise UsageError(f"--set expects a GPU parameter PARAM=VALUE, got {item!r}")
        setattr(gpu, key.strip(), value.strip())
    return gpu


def step_us(gpu: Gpu, model: str, batch_size: int) -> dict[str, float]:
    """Microseconds of each op group of one step, and of the step."""
    kernels = batch_kernels(get_model(model), batch_size)
    ticks = {op: gpu.op_ticks(kernels[op]) for op in OP_NAMES}
    ticks["step"] = sum(ticks.values())
    return {op: t / TICKS_PER_US for op, t in ticks.items()}


def gemm_us(gpu: Gpu, m: int, n: int, k: int) -> dict[str, float]:
    kernel = gemm("sgemm", m, n, k)
    ticks = gpu.kernel_ticks(kernel)
    return {"us": ticks / TICKS_PER_US, "tflops": kernel.flops / ticks * TICKS_PER_SECOND / 1e12}


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = parse_args(argv)
        gpu = build_gpu(args.gpu, args.sets)
        if args.gemm is not None:
            result = gemm_us(gpu, *args.gemm)
        else:
            result = step_us(gpu, args.model, args.batch_size)
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key:<22}{value:>12.2f}")
        return 0

    return run_main("gpu_model.py", body)


if __name__ == "__main__":
    sys.exit(main())
