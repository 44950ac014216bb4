"""Measure a GPU's op-group times for one model and batch size: a --gpu-profile file.

    python scripts/profile_gpu.py --model rm1 --batch-size 128 --out rm1_b128.json
    python configs/trainingcxl.py --model rm1 --batch-size 128 --gpu-profile rm1_b128.json

Runs facebookresearch/dlrm's dense training step (workloads/torch_reference.py) with
PyTorch on CUDA in FP32 (TF32 off, PyTorch's default for matmuls). Four nested prefixes
of the step (the bottom MLP's forward; the whole forward; the forward and the backward
down to the bottom MLP's output; the whole step with the SGD update) are each captured
in a CUDA graph, so the host's launch gaps stay out, and replayed ``--repeats`` times
between CUDA events; the op groups are differences of the medians. Without CUDA it
refuses in one line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("profile_gpu.py")

from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.gpu_profile import profile_document  # noqa: E402
from workloads.models import DEFAULT_BATCH_SIZE, get_model  # noqa: E402
from workloads.torch_reference import build_step  # noqa: E402

Timer = Callable[[str, Callable[[], None]], list[float]]
"""(segment name, the segment) -> seconds of each timed repeat."""


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="profile_gpu.py", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--out", required=True, help="the profile file to write (JSON)")
    parser.add_argument("--repeats", type=int, default=50, help="timed replays per segment")
    parser.add_argument("--warmup", type=int, default=10, help="untimed replays first")
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {args.batch_size}")
    if not 3 <= args.repeats <= 10_000 or not 0 <= args.warmup <= 10_000:
        raise UsageError("--repeats must be in 3..10000 and --warmup in 0..10000")
    return args


def group_times(segment_us: dict[str, float]) -> dict[str, float]:
    """The op groups from the nested segments' median microseconds."""
    groups = {
        "bottom_fwd": segment_us["bottom"],
        "interaction_top_fwd": segment_us["forward"] - segment_us["bottom"],
        "top_bwd_interaction": segment_us["top_backward"] - segment_us["forward"],
        "bottom_bwd": segment_us["step"] - segment_us["top_backward"],
    }
    shortest = min(groups, key=groups.get)
    if groups[shortest] <= 0:
        raise UsageError(
            f"{shortest} came out {groups[shortest]:.2f} us: the segments' medians are "
            "too noisy to subtract; rerun with more --repeats on an idle GPU"
        )
    return groups


def profile(spec, batch_size: int, timer: Timer, device: str) -> dict:
    """Time every segment of the step with ``timer``; the profile file's content."""
    step = build_step(spec, batch_size, device)
    medians = {
        name: statistics.median(timer(name, run)) * 1e6 for name, run in step.segments().items()
    }
    method = (
        "CUDA graph replays between CUDA events, medians of repeats; "
        "groups are differences of nested step prefixes"
    )
    return profile_document(spec, batch_size, device, method, {"groups": group_times(medians)})


def cuda_graph_timer(repeats: int, warmup: int) -> Timer:
    """Capture a segment in a CUDA graph (after warm-up runs on a side stream, as
    torch.cuda.graphs' whole-network example does) and time its replays."""
    import torch

    def timed(name: str, run: Callable[[], None]) -> list[float]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        for _ in range(warmup):
            graph.replay()
        seconds = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        return seconds

    return timed


def cuda_device() -> str:
    """The CUDA device's name; refused in one line where there is none."""
    try:
        import torch
    except ImportError:
        raise UsageError("PyTorch is not installed: profiling needs PyTorch with CUDA") from None
    if not torch.cuda.is_available():
        raise UsageError("no CUDA device: profiling needs a GPU (PyTorch sees none)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.cuda.get_device_name()


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = parse_args(argv)
        spec = get_model(args.model)
        name = cuda_device()
        document = profile(
            spec, args.batch_size, cuda_graph_timer(args.repeats, args.warmup), "cuda"
        )
        document["device"] = name
        with open(args.out, "w") as handle:
            json.dump(document, handle, indent=1)
        print(json.dumps(document["groups"]))
        return 0

    return run_main("profile_gpu.py", body)


if __name__ == "__main__":
    sys.exit(main())
