"""Sampled simulation (simulate/run/sampling.py): the interval arithmetic against standard
tables, the carried state's functional fast-forward against hand-worked cases and
against a full run, the estimate against full-detail means, and refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.boards.cxl import CxlBoard
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from simulate.run.batch_stats import interval, t975
from simulate.run.configure import connected_board, input_generator
from simulate.run.host import drive_batches
from simulate.run.options import RunOptions, SamplePlan, UsageError
from simulate.run.sampling import _warm_skipped
from workloads.models import get_model

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"


@pytest.mark.parametrize(
    ("dof", "quantile"),
    [(1, 12.706), (5, 2.571), (30, 2.042), (40, 2.021), (60, 2.000), (120, 1.980)],
)
def test_t_quantiles_match_the_standard_table(dof, quantile):
    assert t975(dof) == pytest.approx(quantile, abs=6e-4)


def test_the_interval_of_known_observations():
    values = np.array([9.0, 10.0, 11.0, 10.0])
    result = interval(values)
    half = 3.182 * math.sqrt(2 / 3) / 2  # t(3) * s / sqrt(n), s^2 = 2/3
    assert result == {"mean": 10.0, "ci95": pytest.approx(half), "n": 4}
    assert interval(np.array([5.0]))["ci95"] is None  # one unit gives no interval


@given(st.integers(4, 500), st.integers(1, 5), st.integers(1, 5), st.integers(2, 5000))
@settings(max_examples=200, deadline=None)
def test_units_never_overlap_and_stay_inside_the_run(extra, warmup, units, batches):
    plan = SamplePlan(warmup + units + extra, warmup, units)
    starts = list(plan.starts(batches))
    assert all(s - warmup >= 0 and s + units + 1 <= batches for s in starts)
    assert all(b - a >= plan.detail for a, b in zip(starts, starts[1:], strict=False))
    assert starts[:1] in ([], [warmup])  # the first unit's warm-up is the run's start


@pytest.mark.parametrize("text", ["", "x", "10:", ":2", "10:0", "10:2:0", "3:2:1", "1²", "-5"])
def test_malformed_or_impossible_plans_are_refused(text):
    with pytest.raises(UsageError):
        SamplePlan.parse(text)


@pytest.mark.parametrize(
    ("gap", "first", "skipped", "expected"),
    [
        # 100 of 1000 bytes left at 100 B a slice: done in batch 15, seen done by batch 17,
        # which starts the next copy (gap 1); 3 batches move 300 B of it
        (1, 20, 5, {"moved": 300, "started": 17, "slot": 0, "id": 3, "completed": 15}),
        # gap 4: the first batch at or after 17 that may start a copy is 20, the unit's
        (4, 20, 5, {"moved": 1000, "started": 0, "slot": 1, "id": 2, "completed": 15}),
        (8, 14, 3, {"moved": 1000, "started": 0, "slot": 1, "id": 2, "completed": 11}),
        # nothing skipped: unchanged
        (1, 20, 0, {"moved": 900, "started": 0, "slot": 1, "id": 2, "completed": None}),
        # two copies complete (15, then 17..26) and a third starts at 28
        (1, 30, 15, {"moved": 200, "started": 28, "slot": 1, "id": 4, "completed": 26}),
    ],
)
def test_the_mlp_log_is_fast_forwarded_at_the_measured_rate(gap, first, skipped, expected):
    board = CxlBoard(mlp_log_gap=gap)
    state = {"moved": 900, "total": 1000, "started": 0, "slot": 1, "id": 2, "completed": None}
    board.restore_carried(
        state | {"logged": 0, "slices": 0}, first, skipped, {"mlp_log_bytes": 100.0}
    )
    copy = board.carried_state()
    assert {key: copy[key] for key in expected} == expected


def test_a_sampled_unit_sees_the_log_in_the_phase_a_full_run_has():
    """The batch after a copy's last slice was issued before that slice ended, so it
    starts no copy; a restored state must not either (else units alias to one phase)."""
    board = CxlBoard()
    state = {"moved": 1000, "total": 1000, "started": 6, "slot": 1, "id": 2, "completed": 6}
    board.restore_carried(state | {"logged": 0, "slices": 0}, 7, 0, {"mlp_log_bytes": 1000.0})
    assert board.bottom_deps(7, None, None) == []


def test_ssd_cache_warmed_functionally_holds_the_rows_a_full_run_leaves():
    """Functional warming over batches 0..N-1 leaves the rows a timed run of them
    leaves resident (the order of touches within the pipeline may differ, so the
    recency stamps are not compared)."""
    options = RunOptions(system="ssd", model="rmc1", batch_size=64, batches=6, progress=False)
    spec, batch_size = get_model("rmc1"), 64
    engine = Engine()
    scheduler = Scheduler(engine)
    timed = connected_board(options, spec, batch_size, engine, scheduler)
    generator = input_generator(options, spec, batch_size)
    drive_batches(engine, timed, spec, generator, range(6))
    engine = Engine()
    warmed = connected_board(options, spec, batch_size, engine, Scheduler(engine))
    _warm_skipped(warmed, spec, generator, range(6))
    full, fast = timed.storage.resident_addresses(), warmed.storage.resident_addresses()
    assert full.size > 0
    assert np.array_equal(full, fast)


def _run(tmp_path: Path, name: str, *args: str) -> dict:
    outdir = tmp_path / name
    subprocess.run(
        [sys.executable, str(CONFIG), *args, "--outdir", str(outdir), "--no-progress"],
        check=True,
        capture_output=True,
    )
    return json.loads((outdir / "results.json").read_text())


SMALL_RUN = ["--model", "rmc1", "--batch-size", "64", "--batches", "61"]


@pytest.mark.parametrize("system", ["cxl", "pmem"])
def test_the_interval_covers_the_full_detail_mean(tmp_path, system):
    full = _run(tmp_path, "full", "--system", system, *SMALL_RUN)
    sampled = _run(tmp_path, "sampled", "--system", system, *SMALL_RUN, "--sample", "7")
    batch = sampled["batch_time_ms"]
    assert sampled["sampling"]["sampled_units"] == 9
    assert sampled["sampling"]["warnings"] == []
    assert abs(batch["mean"] - full["batch_time_ms"]["mean"]) <= batch["ci95_ms"]


def test_a_period_that_aliases_with_the_mlp_log_copy_is_reported(tmp_path):
    """On rmc1 a copy takes one batch and the next starts a batch later: batch times
    alternate, so an even period meets one phase only and its mean is biased."""
    full = _run(tmp_path, "full", "--system", "cxl", *SMALL_RUN)
    times = np.array(full["batch_times_ms"][1:-1])
    assert abs(times[::2].mean() - times[1::2].mean()) > 0.01  # two phases, 2 batches
    sampled = _run(tmp_path, "sampled", "--system", "cxl", *SMALL_RUN, "--sample", "6")
    assert "MLP log copy (2 batches)" in sampled["sampling"]["warnings"][0]


def test_a_sampled_run_is_deterministic(tmp_path):
    args = ["--system", "cxl", "--model", "rmc1", "--batch-size", "64", "--batches", "40"]
    _run(tmp_path, "a", *args, "--sample", "8")
    _run(tmp_path, "b", *args, "--sample", "8")

    def simulated(name: str) -> list[str]:
        lines = (tmp_path / name / "stats.txt").read_text().splitlines()
        return [line for line in lines if not line.startswith(("hostSeconds", "hostMemory"))]

    assert simulated("a") == simulated("b")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batches", "10", "--sample", "8"], "fewer than 2 units"),
        (["--batches", "40", "--sample", "8", "--functional"], "--functional needs every"),
        (["--batches", "40", "--sample", "8", "--fail-at", "1ms"], "--fail-at needs every"),
        (["--batches", "40", "--sample", "8:x"], "PERIOD[:WARMUP[:UNITS]]"),
    ],
)
def test_sampled_runs_that_cannot_work_are_refused_in_one_line(tmp_path, args, needle):
    done = subprocess.run(
        [sys.executable, str(CONFIG), *args, "--outdir", str(tmp_path / "o"), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainingcxl.py: error:") and needle in lines[0]
