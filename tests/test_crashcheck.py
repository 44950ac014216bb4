"""Crash-state exploration finds no violation in any system, and catches broken ones."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.persistence.protocols import RedoProtocol, UndoProtocol
from workloads.crashcheck import crashcheck
from workloads.options import SYSTEMS, RunOptions

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="rmc1", rows=64, batch_size=8, progress=False)


def tiny(system: str, batches: int = 3, **extra) -> RunOptions:
    return RunOptions(system=system, batches=batches, **TINY, **extra)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_persist_event_of_a_short_run_recovers(system):
    report = crashcheck(tiny(system))
    assert report.violations == []
    if system == "dram":
        assert report.states == 1  # nothing persists: the only state is the empty journal
    else:
        assert report.states > 1000  # every persist event and the tick before it
        assert set(report.verdicts) <= {"exact", "within_gap"}


def test_relaxed_mlp_log_recovers_older_mlps_within_the_measured_gap():
    report = crashcheck(tiny("cxl", batches=4, sets=[("board.mlp_log_gap", "2")]))
    assert report.violations == []
    assert report.verdicts.get("within_gap", 0) > 0 and report.gap_bound >= 2


class SkipsRollback(UndoProtocol):
    """Broken recovery: trusts the data region and never rolls back."""

    def plan(self, image):
        rec = super().plan(image)
        rec.writes = [(o, d) for o, d in rec.writes if d.size == 8]
        return rec


class FlagsBeforeLog(UndoProtocol):
    """Broken protocol: the embedding-log flag is set before the log is durable."""

    def phases(self, op, batch, facts, writes):
        phases = super().phases(op, batch, facts, writes)
        return phases[::-1] if op == "emb_log" else phases


class AppliesBeforeLog(RedoProtocol):
    """Broken redo: the in-place update is journaled with the log op, before the flag."""

    def phases(self, op, batch, facts, writes):
        if op == "update":
            return []
        phases = super().phases(op, batch, facts, writes)
        if op in self.log_ops:
            phases.insert(0, self.update_phase(facts.rows, facts.new))
        return phases


@pytest.mark.parametrize(
    "system, broken, region",
    [("cxl-b", SkipsRollback, "data"), ("cxl-b", FlagsBeforeLog, "flags"),
     ("cxl-d", AppliesBeforeLog, "data")],
)  # fmt: skip
def test_crashcheck_catches_a_broken_protocol(system, broken, region):
    report = crashcheck(tiny(system, batches=2), sample=600, protocol_class=broken)
    assert report.violations
    assert any(region in v["regions"] for v in report.violations)
    assert all(v["tick"] >= 0 and v["why"] for v in report.violations)


def test_sampling_checks_the_requested_number_of_states():
    assert crashcheck(tiny("cxl-b", batches=2), sample=50).states == 50


def run_script(*args):
    cmd = [sys.executable, str(ROOT / "scripts" / "crashcheck.py"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd="/", timeout=120)


def test_script_prints_a_json_summary_last():
    out = run_script("--system", "pmem", "--model", "rmc1", "--rows", "64", "--batch-size", "8",
                     "--batches", "2", "--sample", "40")  # fmt: skip
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["states"] == 40 and summary["violations"] == 0
    assert summary["states_per_second"] > 0


@pytest.mark.parametrize("bad", [["--system", "nope"], ["--model", "zz"], ["--sample", "-1"]])
def test_script_bad_input_is_one_error_line_and_exit_2(bad):
    out = run_script(*bad)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("crashcheck.py: error:")
    assert out.stdout == ""
