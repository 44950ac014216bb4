"""Crash-state exploration: the real protocols recover from every state the persistency
model allows, and every broken protocol of the mutation suite is caught."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from protocol_mutants import MUTANTS

from components.persistence.explorer import ExploreSettings
from simulate.failures.crashcheck import CheckSettings, crashcheck
from simulate.failures.persist_states import LOW_BITS, sweep_bits
from simulate.run.options import SYSTEMS, RunOptions

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
    if system == "dram":  # the empty journal, one media fault, the metadata flips:
        # 4 flag words and the base record's count at the low bits and the first draw's
        # share, its batch at 5 bits and its CRC at one
        bits = len(set(range(LOW_BITS)) | set(sweep_bits(0, CheckSettings().metadata)))
        flips = 4 * bits + 5 + bits + 1
        assert report.states == 1 + 1 + flips and report.modes["metadata"] == flips
        return
    assert report.modes["prefix"] > 2000 and report.modes["partial"] > 100
    assert report.resumed_runs >= 1 and report.modes["resumed"] > 200  # 2 drawn, R < end
    assert report.interrupted == 400 + 20 * report.resumed_runs and report.media == 64
    assert report.modes["full"] > 0 and report.metadata >= 24 * (4 + 2 * 7)
    assert report.exhaustive_intervals > 0 and 0.9 < report.pair_coverage[1] <= 1.0
    assert set(report.verdicts) <= {"exact", "within_gap", "detected"}
    if system == "cxl-b":  # both undo logs of each batch, in the other order too
        assert report.schedules >= 3 and report.modes["schedule"] > 100
        assert report.modes["late_device"] > 0
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
    family = CAUGHT_BY.get(mutant.__name__)
    assert family is None or family in {v["mode"] for v in report.violations}


CAUGHT_BY = {  # the family that exists to catch each (they escaped every other one)
    "RollbackNewestWins": "schedule",
    "KeepsMlpFlags": "resumed",
    "HeaderOutsideCrc": "metadata",
}


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
    explore = ExploreSettings(prefix=50, budget=0)
    settings = CheckSettings(explore, 0, 0, metadata=0, resumed=0, schedules=False)
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


def test_the_relaxed_age_bound_follows_from_the_gap_and_the_longest_copy():
    """A synthetic schedule: gap 2, a copy from snapshot 0 completed by batch 1's slice
    (2 batches), one from snapshot 3 completed by batch 5's (3 batches): the bound is
    gap + 2 x 3 = 8 batches; R grows with each ended embedding log."""
    from types import SimpleNamespace

    from components.persistence.journal import Requests
    from components.sim.schedule import OpRecord
    from simulate.failures.oracle import guarantee_for
    from simulate.failures.recording import image_layout

    layout = image_layout(tiny("cxl"))
    flag = np.array([layout.flag_offset("mlp1")])
    z = np.zeros(1, np.int64)
    ops = [("mlp_snapshot", 0, 0, 5), ("emb_log", 0, 10, 20), ("mlp_log_slice", 1, 30, 40),
           ("emb_log", 1, 50, 60), ("mlp_snapshot", 3, 70, 75), ("emb_log", 3, 80, 90),
           ("mlp_log_slice", 5, 100, 110)]  # fmt: skip
    records = [
        OpRecord(uid, name, "c", "r", batch, start, end) for uid, (name, batch, start, end) in
        enumerate(ops)
    ]  # fmt: skip
    requests = {2: Requests(flag, flag + 8, z, z), 6: Requests(flag, flag + 8, z, z)}
    stretch = SimpleNamespace(
        records=records, layout=layout, requests=requests, start=0,
        board=SimpleNamespace(mlp_log_gap=2),
    )  # fmt: skip
    bound = guarantee_for("relaxed", stretch)
    assert (bound.gap, bound.copy_batches, bound.max_age) == (2, 3, 8)
    assert bound.snapshots == {0, 3}
    assert [bound.least(t) for t in (19, 20, 59, 60, 95)] == [0, 0, 0, 1, 3]
    redo = guarantee_for(
        "redo", SimpleNamespace(records=[OpRecord(0, "ckpt_log", "c", "r", 4, 0, 9)])
    )
    assert (redo.least(8), redo.least(9), redo.max_age) == (0, 5, 0)


def test_a_reordered_schedule_finishes_the_later_log_before_the_other_commits():
    """CXL-B: the embedding and MLP undo logs of a batch wait for the same lookup; the
    timing ends the embedding log last. In each variant it ends before the MLP log's
    flag epoch begins, and no other op's pieces move."""
    from components.persistence.protocols import UndoProtocol
    from simulate.failures.recording import build_journal, run_stretch
    from simulate.failures.schedules import reordered_schedules

    stretch = run_stretch(tiny("cxl-b", batches=3))
    journal = build_journal(UndoProtocol(stretch.layout), stretch)
    variants = list(reordered_schedules(journal, stretch.records))
    assert len(variants) == 3 and None not in variants
    for v in variants:
        assert (v.first.name, v.second.name, v.first.batch) == (
            "emb_log",
            "mlp_log",
            v.second.batch,
        )
        moved, other = journal.op == v.first.uid, journal.op == v.second.uid
        last = journal.epoch[other] == journal.epoch[other].max()
        commit = journal.lo[other][last].min()
        assert journal.hi[moved].max() > journal.hi[other].max()  # the recorded order
        assert v.journal.hi[moved].max() < commit  # the other one
        assert (v.journal.lo[moved] >= v.first.start).all()
        assert np.array_equal(v.journal.p[~moved], journal.p[~moved])
        assert v.window[0] <= v.window[1]
