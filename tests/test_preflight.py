"""simulate/run/preflight.py: the memory estimate bounds what a run really uses (and not
by a useless margin); the crash-state estimate bounds the states a check visits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from simulate.failures.crash_budget import crashcheck_cost
from simulate.failures.crashcheck import crashcheck
from simulate.run.options import RunOptions
from simulate.run.preflight import MEMORY_LIMIT_ENV, available_memory, estimate_memory

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--model", "rmc1", "--batch-size", "8"]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize(
    "args",
    [
        ["--model", "rm2", "--batches", "1"],  # timing only: 819k lookups a batch dominate
        ["--model", "rmc1", "--functional", "--rows", "200000", "--batches", "2"],  # tables
        [*SMALL, "--system", "cxl-b", "--rows", "10000", "--batches", "6", "--fail-at", "0.2ms"],
    ],
    ids=["lookups", "tables", "recording"],
)
def test_memory_estimate_bounds_the_measured_peak(tmp_path, args):
    argv = [*args, "--no-progress", "--outdir", str(tmp_path / "out")]
    proc = subprocess.run(
        [sys.executable, "-m", "simulate.peak", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = int(proc.stdout.splitlines()[-1])
    parser_options = _options(args)
    estimate = estimate_memory(parser_options).total
    assert measured <= estimate <= 3 * measured, (measured, estimate)


def _options(args: list[str]) -> RunOptions:
    from simulate.run.options import parse_run_options

    return parse_run_options(args, "t", "t")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("system", ["cxl", "cxl-b", "pmem"])
def test_crash_state_estimate_bounds_the_states_a_check_visits(system):
    options = RunOptions(system=system, model="rmc1", rows=64, batch_size=8, batches=2)
    options.progress = False
    states = crashcheck(options).states
    estimated, seconds = crashcheck_cost(options)
    assert states <= estimated <= 4 * states, (states, estimated)
    sampled, _ = crashcheck_cost(options, sample=10)
    assert sampled < estimated


def test_memory_limit_override_and_the_machine(monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "3GiB")
    assert available_memory() == 3 * 2**30
    monkeypatch.delenv(MEMORY_LIMIT_ENV)
    room = available_memory()
    total = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0]) * 1024
    assert room is None or 0 < room <= total


def test_estimates_grow_with_the_options_that_drive_them():
    base = RunOptions(model="rm1", batches=10)
    more = {
        "batches": RunOptions(model="rm1", batches=10_000),
        "batch size": RunOptions(model="rm1", batches=10, batch_size=1024),
        "rows": RunOptions(model="rm1", batches=10, functional=True, rows=10**6),
    }
    for what, options in more.items():
        assert estimate_memory(options).total > estimate_memory(base).total, what
    functional = RunOptions(model="rm1", functional=True, rows=1000)
    # the recorded MLPs of a failure run grow with its batches (68 MB of MLPs each)
    short = estimate_memory(RunOptions(model="rm1", rows=1000, batches=4, fail_at=["1ms"]))
    long = estimate_memory(RunOptions(model="rm1", rows=1000, batches=8, fail_at=["1ms"]))
    assert long.total - short.total >= 4 * 4 * 68e6
    assert estimate_memory(functional).total < short.total
