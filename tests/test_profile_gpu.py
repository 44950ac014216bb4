"""scripts/profile_gpu.py on the CPU: refused in one line without CUDA; with an injected
timer, its op groups are the differences of the nested segments' medians, and the
file it writes replays in a run (a timer that reports the model's own times gives the
model's stats)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.compute.gpu import Gpu
from simulate.run.options import UsageError
from simulate.simulator import Simulator
from workloads.models import get_model
from workloads.opgraph import batch_kernels
from workloads.workload import DlrmWorkload

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import profile_gpu  # noqa: E402

MODEL, BATCH = "rmc1", 32


def fake_timer(segment_seconds: dict[str, float]):
    """Runs each segment once (it must work on this device) and reports fixed times,
    the median among noise around them."""
    ran = []

    def timer(name, run):
        run()
        ran.append(name)
        return [segment_seconds[name] * f for f in (0.9, 1.0, 1.3)]

    return timer, ran


def test_groups_are_differences_of_the_segments():
    timer, ran = fake_timer({"bottom": 1e-4, "forward": 1.5e-4, "top_backward": 2.5e-4,
                             "step": 6e-4})  # fmt: skip
    document = profile_gpu.profile(get_model(MODEL), BATCH, timer, "cpu")
    assert ran == ["bottom", "forward", "top_backward", "step"]
    assert document["groups"] == pytest.approx(
        {
            "bottom_fwd": 100,
            "interaction_top_fwd": 50,
            "top_bwd_interaction": 100,
            "bottom_bwd": 350,
        }  # fmt: skip
    )
    assert (document["batch_size"], document["model"]) == (BATCH, MODEL)


def test_noisy_segments_are_refused():
    timer, _ = fake_timer({"bottom": 2e-4, "forward": 1.5e-4, "top_backward": 2.5e-4,
                           "step": 6e-4})  # fmt: skip
    with pytest.raises(UsageError, match="interaction_top_fwd came out -50.00 us"):
        profile_gpu.profile(get_model(MODEL), BATCH, timer, "cpu")


def test_a_profile_written_from_the_models_times_replays_as_the_model(tmp_path):
    gpu, step = Gpu(), batch_kernels(get_model(MODEL), BATCH)
    group = {op: sum(map(gpu.model_ticks, ks)) / 1e12 for op, ks in step.items()}
    cumulative, total = {}, 0.0
    for segment, op in zip(("bottom", "forward", "top_backward", "step"), step, strict=True):
        total += group[op]
        cumulative[segment] = total
    timer, _ = fake_timer(cumulative)
    document = profile_gpu.profile(get_model(MODEL), BATCH, timer, "cpu")
    # the differences of cumulative sums lose the last bits: round to the tick
    document["groups"] = {k: round(v * 1e6) / 1e6 for k, v in document["groups"].items()}
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(document))
    workload = DlrmWorkload(MODEL, batch_size=BATCH)
    runs = {}
    for label, profile in (("plain", None), ("profiled", path)):
        out = tmp_path / label
        Simulator("cxl", workload, 3, out, progress=False, gpu_profile=profile).run()
        runs[label] = [x for x in (out / "stats.txt").read_text().splitlines() if "host" not in x]
    assert runs["profiled"] == runs["plain"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_refuses_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "profile_gpu.py"), "--out", str(tmp_path / "p")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "profile_gpu.py: error: no CUDA device: profiling needs a GPU (PyTorch sees none)"
    )
    assert not (tmp_path / "p").exists()
