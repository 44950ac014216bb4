"""End-to-end runs under a real gem5.opt; skipped unless GEM5 points to one (docs/gem5.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GEM5 = os.environ.get("GEM5")
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not GEM5, reason="GEM5 is not set: needs a gem5 v24 gem5.opt (see docs/gem5.md)"
)


def _gem5(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    command = [GEM5, "-d", str(tmp_path / "m5out"), str(ROOT / script), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=3600)


@pytest.mark.parametrize("system", ["cxl", "cxl-d", "pmem"])
def test_trainingcxl_config_runs_under_gem5(tmp_path, system):
    out = tmp_path / "out"
    run = _gem5(
        tmp_path,
        "configs/trainingcxl.py",
        *("--system", system, "--model", "rm1", "--batches", "2", "--outdir", str(out)),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["batches"] == 2


def test_gem5_op_durations_are_positive_and_comparable(tmp_path):
    ops_json = tmp_path / "ops.json"
    run = _gem5(
        tmp_path,
        "scripts/compare_backends.py",
        *("--gem5-side", str(ops_json), "--system", "cxl", "--batches", "1"),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    ops = json.loads(ops_json.read_text())["ops"]
    names = {op["op"] for op in ops}
    assert {"lookup", "update", "pooled_to_gpu", "grads_to_mem"} <= names
    assert all(op["ticks"] > 0 for op in ops)


def test_compare_backends_prints_both_sides():
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/compare_backends.py"), "--batches", "1"],
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "GEM5": GEM5 or ""},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "gem5/built-in" in run.stdout and "lookup" in run.stdout
