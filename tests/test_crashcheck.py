"""Crash-state exploration: the real protocols recover from every state the persistency
model allows, and every broken protocol of the mutation suite is caught."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from protocol_mutants import MUTANTS

from components.persistence.explorer import ExploreSettings
from simulate.crashcheck import CheckSettings, crashcheck
from simulate.options import SYSTEMS, RunOptions

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]


def tiny(system: str, batches: int = 3, rows: int = 64, **extra) -> RunOptions:
    return RunOptions(
        system=system, model="rmc1", rows=rows, batch_size=8, batches=batches, progress=False,
        **extra,
    )  # fmt: skip


def mutant_run(system: str) -> RunOptions:
    """The runs the mutants are checked on: the relaxed system needs six batches before
    its board completes an MLP copy newer than the initial weights; a log that shrinks
    (the torn-flag mutant's trigger) needs tables the batches do not saturate."""
    return tiny(system, batches=6) if system == "cxl" else tiny(system, batches=4, rows=128)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_allowed_crash_state_of_a_real_protocol_recovers(system):
    report = crashcheck(tiny(system, batches=6 if system == "cxl" else 3))
    assert report.violations == []
    assert report.unmatched_bytes == 0 and report.unhonoured_fences == []
    if system == "dram":
        assert report.states == 2  # the empty journal, and one media fault
        return
    assert report.modes["prefix"] > 2000 and report.modes["partial"] > 100
    assert report.modes["full"] > 0 and report.interrupted == 400 and report.media == 64
    assert report.exhaustive_intervals > 0 and 0.9 < report.pair_coverage[1] <= 1.0
    assert set(report.verdicts) <= {"exact", "within_gap", "detected"}
    if system == "cxl":  # MLPs of a specific older copy, never the initial ones late on
        assert report.verdicts["within_gap"] > 1000


def test_relaxed_copies_spanning_many_slices_and_snapshots_recover():
    """A model whose MLPs take four FI + top-MLP windows to log: every copy is written
    by several slices while the GPU takes newer snapshots; each copy must hold one
    snapshot throughout (a copy attributed slice by slice fails its CRC)."""
    options = RunOptions(system="cxl", model="dlrm_kaggle", rows=50, batch_size=64, batches=24)
    options.progress = False
    settings = CheckSettings(ExploreSettings(prefix=2000, budget=8), interrupted=50, media=10)
    report = crashcheck(options, settings)
    assert report.violations == [] and report.verdicts["within_gap"] > 1000


@pytest.mark.parametrize("system, mutant", MUTANTS, ids=[m.__name__ for _, m in MUTANTS])
def test_every_broken_protocol_is_caught_at_the_default_settings(system, mutant):
    report = crashcheck(mutant_run(system), protocol_class=mutant)
    assert report.violations, f"{mutant.__name__} passed: {report.summary()}"
    assert all(v["why"] and v["mode"] for v in report.violations)


@pytest.mark.parametrize("system", sorted({s for s, _ in MUTANTS} - {"cxl"}))
def test_the_real_protocols_pass_on_the_mutants_runs(system):
    """The mutants are caught on runs the real protocols survive (not on a run that
    breaks everything; cxl's run is the one of the test above)."""
    assert crashcheck(mutant_run(system)).violations == []


def test_adagrad_state_is_logged_and_recovered_exactly():
    """Row accumulators travel with the rows, MLP accumulators with the MLP log; the
    timing does not write them yet, so their bytes are unmatched (placed in their
    op's epoch) and reported."""
    for system in ("cxl-b", "pmem"):
        report = crashcheck(tiny(system, batches=2), optimizer="adagrad")
        assert report.violations == [] and report.unmatched_bytes > 0
        assert set(report.verdicts) <= {"exact", "detected"}


def test_prefix_sampling_and_a_budget_of_zero_check_only_the_timing_order():
    settings = CheckSettings(ExploreSettings(prefix=50, budget=0), interrupted=0, media=0)
    report = crashcheck(tiny("cxl-b", batches=2), settings)
    assert report.states == 51 and report.modes["prefix"] == 51  # and the empty journal
    assert report.intervals == 0


def run_script(*args):
    cmd = [sys.executable, str(ROOT / "scripts" / "crashcheck.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd="/", timeout=300)


def test_script_prints_a_json_summary_last_and_its_rate_and_coverage():
    out = run_script("--system", "pmem", "--model", "rmc1", "--rows", "64", "--batch-size", "8",
                     "--batches", "2", "--sample", "40", "--budget", "4")  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["violations"] == 0 and summary["by_mode"]["prefix"] == 41
    assert summary["states_per_second"] > 0 and "sampled_pair_coverage" in summary
    assert "crash states in" in out.stderr and "coverage" in out.stderr


@pytest.mark.parametrize(
    "bad",
    [["--system", "nope"], ["--model", "zz"], ["--sample", "-1"], ["--budget", "-2"],
     ["--media-faults", "-1"], ["--optimizer", "adam"]],
)  # fmt: skip
def test_script_bad_input_is_one_error_line_and_exit_2(bad):
    out = run_script(*bad)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("crashcheck.py: error:")
    assert out.stdout == ""
