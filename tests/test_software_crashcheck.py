"""crashcheck on the software checkpoint policies (simulate/failures/software.py): no
violation for the real ones, at crash points inside every checkpoint's snapshot and
write; each mutant of tests/protocol_mutants.py's FT_MUTANTS caught."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from protocol_mutants import FT_MUTANTS, DropsChainForNewFull, TrustsTornCheckpoint

from simulate.failures.crashcheck import crashcheck
from simulate.failures.recording import run_stretch
from simulate.failures.software import crash_ticks
from simulate.run.options import RunOptions

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[1]


def software_run(policy: str, quantize: str = "none") -> RunOptions:
    return RunOptions(system="dram", model="rmc1", rows=64, batch_size=8, batches=5,
                      progress=False, checkpoint=policy, quantize=quantize,
                      ckpt_interval=1e-9)  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "quantize", "verdict"),
    [("cpr", "none", "exact"), ("check-n-run", "none", "exact"),
     ("check-n-run", "8", "within_bound"), ("check-n-run", "4", "within_bound"),
     ("none", "none", "exact")],
)  # fmt: skip
def test_the_real_policies_recover_every_crash_point(policy, quantize, verdict):
    report = crashcheck(software_run(policy, quantize))
    assert report.violations == [] and report.resumed_runs == 2
    assert report.verdicts[verdict] > 0 and report.modes["resumed"] > 0


def test_crash_points_fall_inside_every_snapshot_and_store_write():
    stretch = run_stretch(software_run("check-n-run"))
    ticks = crash_ticks(stretch)
    ops = [r for r in stretch.records if r.category == "checkpoint"]
    assert {r.name for r in ops} == {"cnr_snapshot", "cnr_write"}
    for r in ops:
        assert any(r.start < t < r.end for t in ticks) and r.end in ticks


@pytest.mark.parametrize(("policy", "quantize", "mutant"), FT_MUTANTS,
                         ids=[f"{m.__name__}-{p}" for p, _, m in FT_MUTANTS])  # fmt: skip
def test_every_software_mutant_is_caught(policy, quantize, mutant):
    report = crashcheck(software_run(policy, quantize), protocol_class=mutant)
    assert report.violations


def test_the_script_checks_a_software_policy(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "crashcheck.py"), "--system", "ssd",
         "--model", "rmc1", "--rows", "64", "--batch-size", "8", "--batches", "3",
         "--checkpoint", "cpr", "--ckpt-interval", "1e-9"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["violations"] == 0 and summary["guarantee"]["policy"] == "cpr"


@pytest.mark.parametrize("share", ["board.ft.mfu_share", "board.ft.ssu_share"])
def test_cpr_mfu_partial_checkpoints_check_clean_and_catch_broken_recoveries(share):
    options = replace(software_run("cpr"), sets=[(share, "0.25")])
    assert crashcheck(options).violations == []
    for mutant in (TrustsTornCheckpoint, DropsChainForNewFull):
        assert crashcheck(options, protocol_class=mutant).violations, mutant.__name__
