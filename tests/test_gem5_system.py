"""The gem5 realization under a real gem5.opt (``GEM5``, else ../shared/gem5/gem5 beside
the checkout); skipped when there is none. Nothing needs exporting: the scripts give
gem5's embedded interpreter this checkout and this venv's packages themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.gem5 import binary
from simulate.run.options import SYSTEMS
from tests.gem5_compare import compare
from workloads.models import PRESETS

GEM5 = binary()
ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.gem5,
    pytest.mark.skipif(GEM5 is None, reason="no gem5 binary (GEM5 or ../shared/gem5/gem5)"),
]
SMALL = ("--model", "rmc1", "--batch-size", "32", "--batches", "2")
PMEM_SYSTEMS = ["cxl", "cxl-b", "cxl-d", "pcie", "pmem"]
LOW, HIGH = 0.85, 1.15


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH, no VIRTUAL_ENV: what a user's shell may well look like."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _ratios(results: dict, mode: str, rows: str = "ops") -> dict:
    return {
        (row["batch"], row.get("op", "batch")): row["gem5"][mode] / row["builtin"][mode]
        for row in results[rows]
    }


def _outside(ratios: dict) -> dict:
    return {key: round(r, 3) for key, r in ratios.items() if not LOW <= r <= HIGH}


@pytest.mark.parametrize("system", PMEM_SYSTEMS)
def test_each_op_alone_and_each_batch_agree_within_15_percent(tmp_path, system):
    results = compare(tmp_path, "--system", system, *SMALL)
    names = {op["op"] for op in results["ops"]}
    assert {"lookup", "update", "pooled_to_gpu", "grads_to_mem"} <= names
    assert _outside(_ratios(results, "alone")) == {}
    for mode in ("alone", "concurrent"):
        assert _outside(_ratios(results, mode, "batches")) == {}


@pytest.mark.parametrize("system", ["pcie", "pmem"])
def test_ops_agree_concurrently_where_no_writes_drain_beside_them(tmp_path, system):
    """On the PCIe and host systems what overlaps is a transfer next to PMEM traffic,
    never reads next to draining writes, where the two controllers' arbitration
    differs (docs/gem5.md): each op must agree in the schedule too."""
    results = compare(tmp_path, "--system", system, *SMALL)
    assert _outside(_ratios(results, "concurrent")) == {}


def test_a_lookup_beside_a_log_agrees_only_when_the_controller_takes_turns(tmp_path):
    """gem5's controller serves a read stream and a posted-write stream in turns: with
    ours doing the same (arbitration=requests, the default) the lookup next to the
    previous batch's embedding log agrees in the schedule; sharing media time instead
    (arbitration=time) makes ours far too fast there, while alone both still agree."""

    def lookup(results: dict) -> dict:
        return {(op["batch"], op["op"]): op for op in results["ops"]}[(1, "lookup")]

    turns = lookup(compare(tmp_path / "turns", "--system", "cxl", *SMALL))
    assert LOW <= turns["gem5"]["concurrent"] / turns["builtin"]["concurrent"] <= HIGH
    arbitration = "board.cxl_mem.pmem.arbitration=time"
    shares = lookup(compare(tmp_path / "time", "--system", "cxl", *SMALL, "--set", arbitration))
    assert shares["gem5"]["concurrent"] > 1.5 * shares["builtin"]["concurrent"]
    assert LOW <= shares["gem5"]["alone"] / shares["builtin"]["alone"] <= HIGH


def test_without_the_xpbuffer_both_sides_lose_the_same_hits(tmp_path):
    args = ("--system", "cxl-d", *SMALL)
    buffered = compare(tmp_path / "on", *args)
    bare = compare(tmp_path / "off", *args, "--set", "board.cxl_mem.pmem.buffer_lines=0")
    lookup = {(op["batch"], op["op"]): op for op in bare["ops"]}[(0, "lookup")]
    assert LOW <= lookup["gem5"]["alone"] / lookup["builtin"]["alone"] <= HIGH
    before = {(op["batch"], op["op"]): op for op in buffered["ops"]}[(0, "lookup")]
    assert lookup["gem5"]["alone"] > 1.1 * before["gem5"]["alone"]  # the hits were real


@pytest.mark.parametrize("model", sorted(PRESETS))
@pytest.mark.parametrize("system", [s for s in SYSTEMS if s != "ssd"])
def test_every_system_and_model_runs_in_gem5(tmp_path, system, model):
    """A sampled replay (a few hundred packets per stream) of one batch: every op,
    device region and route of the configuration is built and crossed in gem5."""
    argv = ["--system", system, "--model", model, "--batches", "1", "--batch-size", "4"]
    results = compare(tmp_path, *argv, "--rows", "1000", "--gem5-sample", "200")
    assert results["ops"] and all(op["gem5"]["alone"] > 0 for op in results["ops"])


def test_the_ssd_system_refuses_in_one_line():
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/compare_backends.py"), "--system", "ssd"],
        capture_output=True,
        text=True,
        env={**_clean_env(), "GEM5": GEM5},
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "gem5 has no stock SimObject" in run.stderr


def test_trainingcxl_config_runs_under_gem5_without_exports(tmp_path):
    """The README's command from a shell with nothing exported: the config finds this
    checkout's .venv (or the active one) itself."""
    out = tmp_path / "out"
    command = [GEM5, "-d", str(tmp_path / "m5"), str(ROOT / "configs/trainingcxl.py")]
    argv = ["--system", "pcie", "--model", "rmc1", "--batches", "1", "--batch-size", "8"]
    env = {**_clean_env(), "VIRTUAL_ENV": str(Path(sys.prefix))}
    run = subprocess.run(
        [*command, *argv, "--outdir", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    replayed = {op["op"] for op in results["gem5"]["ops"]}
    assert {"lookup", "ckpt_log", "update"} <= replayed
    refused = subprocess.run(
        [*command, "--system", "ssd", "--outdir", str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].startswith("trainingcxl.py: error: --system ssd")


def test_compare_backends_prints_both_sides(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts/compare_backends.py"), "--system", "cxl-d", *SMALL],
        capture_output=True,
        text=True,
        env={**_clean_env(), "GEM5": GEM5},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "gem5" in run.stdout.splitlines()[1] and "(batch)" in run.stdout
