"""scripts/gpu_model.py: with --json exactly the four op groups and the step, in
microseconds, equal to the GPU model's op times; bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.compute.gpu import Gpu
from workloads.models import get_model
from workloads.opgraph import OP_NAMES, batch_kernels

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_model.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    ("gpu", "model", "batch"), [("rtx3090", "rm1", 128), ("h200", "rm4", 4096)]
)
def test_json_has_exactly_the_groups_and_the_step(gpu, model, batch):
    done = run("--gpu", gpu, "--model", model, "--batch-size", str(batch), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert list(result) == [*OP_NAMES, "step"]
    device, kernels = Gpu.preset(gpu), batch_kernels(get_model(model), batch)
    for op in OP_NAMES:
        assert result[op] == pytest.approx(device.op_ticks(kernels[op]) / 1e6, abs=1e-6)
    assert result["step"] == pytest.approx(sum(result[op] for op in OP_NAMES), abs=1e-5)


def test_eager_launches_lengthen_the_step():
    graph = json.loads(run("--model", "rm1", "--json").stdout)
    eager = json.loads(run("--model", "rm1", "--json", "--set", "eager=true").stdout)
    assert all(eager[op] >= graph[op] for op in graph) and eager["step"] > graph["step"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu", "v100"], "unknown GPU 'v100'"),
        (["--model", "rm9"], "unknown model 'rm9'"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--set", "warp=3"], "--set expects a GPU parameter"),
        (["--gemm", "1", "0", "4"], "--gemm sizes must be at least 1"),
    ],
)
def test_bad_input_is_one_line(args, words):
    done = run(*args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr
