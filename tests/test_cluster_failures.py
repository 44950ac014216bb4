"""One consistent checkpoint across CXL-MEMs: crash exploration, mutants that only a
cross-device check catches, failure runs and the recovery's timing on 2 x 2 systems."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from cluster_mutants import CLUSTER_MUTANTS

from components.boards.disaggregated import merged
from components.interconnect.cxl import mmio_write
from components.memory.stages import stage
from components.persistence.cluster import ClusterLayout
from components.persistence.image import COMMIT_NAMES, WORD
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from simulate.failures.crashcheck import CheckSettings, crashcheck
from simulate.failures.inject import inject
from simulate.failures.recording import build_journal, initial_image, protocol_for, run_stretch
from simulate.failures.recovery import requests_covering as _requests
from simulate.failures.recovery import time_protocol_recovery as time_recovery
from simulate.run.configure import connected_board, resolve_functional
from simulate.run.options import RunOptions

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def cluster(system: str, batches: int | None = None, **kw) -> RunOptions:
    """The runs crashcheck's single-device tests use (rmc1, batch 8), on 2 GPUs x 2
    CXL-MEMs; cxl runs 8 batches, long enough for three MLP copies to be committed
    (the third reusing the first's slot); a failure run on cxl at least 6."""
    if batches is None:
        batches = 8 if system == "cxl" else 4
    elif system == "cxl":
        batches = max(batches, 6)
    return RunOptions(system=system, model="rmc1", rows=64, batch_size=8, batches=batches,
                      gpus=2, cxl_mems=2, progress=False, **kw)  # fmt: skip


@pytest.fixture(scope="module")
def reports():
    return {s: crashcheck(cluster(s)) for s in ("cxl-d", "cxl-b", "cxl")}


@pytest.mark.parametrize("system", ["cxl-d", "cxl-b", "cxl"])
def test_real_protocols_recover_every_cross_device_state(reports, system):
    report = reports[system]
    assert report.violations == []
    assert report.unmatched_bytes == 0 and report.unhonoured_fences == []
    assert report.states > 1000 and report.schedules > 0
    assert report.interrupted > 0 and report.media_detected > 0
    assert report.resumed_runs == 2
    assert report.modes["late_device"] > 0


@pytest.mark.parametrize("system", ["cxl-b", "cxl"])
def test_the_walk_visits_states_only_several_devices_have(reports, system):
    """Devices whose newest flags disagree, and devices whose flags are ahead of the
    commit word (the commit racing the last device's log), are explored, not assumed."""
    seen = reports[system].cross_device
    assert seen["flags_disagree"] > 0 and seen["ahead_of_commit"] > 0


def test_relaxed_runs_commit_mlp_copies_across_devices(reports):
    """The cxl run commits copies newer than the base (recovered MLPs younger than the
    initial ones are exact or within the gap): the MLP commit words are exercised."""
    options = cluster("cxl")
    stretch = run_stretch(options)
    protocol = protocol_for("cxl", stretch.layout)
    journal = build_journal(protocol, stretch)
    words = {stretch.layout.commit_offset(name) // WORD for name in COMMIT_NAMES}
    written = {int(d) for d in journal.dst if int(d) in words}
    assert written == words
    assert reports["cxl"].verdicts["within_gap"] > 0


@pytest.mark.parametrize("system, mutant", CLUSTER_MUTANTS, ids=lambda m: getattr(m, "__name__", m))
def test_cross_device_mutants_are_caught(system, mutant):
    report = crashcheck(cluster(system), protocol_class=mutant)
    assert report.violations, f"{mutant.__name__} escaped"


def test_the_rollback_mutant_needs_the_delayed_commit_schedules():
    """A device ahead of the commit exists only where the commit persists after that
    device's update began: without the delayed-commit schedules the walk misses it."""
    mutant = dict((m.__name__, m) for _, m in CLUSTER_MUTANTS)["NoRollbackAhead"]
    quiet = CheckSettings(schedules=False)
    assert crashcheck(cluster("cxl-b"), quiet, protocol_class=mutant).violations == []


@pytest.mark.parametrize("system", ["cxl-d", "cxl-b", "cxl"])
def test_failures_at_ten_instants_recover_and_match_the_reference(system):
    options = cluster(system, batches=5)
    end = run_stretch(options).end_tick
    ticks = [str(int(end * (k + 0.5) / 10)) for k in range(10)]
    results, _ = inject(dataclasses.replace(options, fail_at=ticks))
    assert len(results) == 10
    for entry in results:
        assert entry["verdict"] in ("exact", "within_gap"), entry
        assert entry["resume_batch"] <= entry["batch"] + 1
        assert entry["recovery_ms"] > 0
    if system != "cxl":  # the relaxed run's resumed first lookup is strict (float32)
        assert all(e["verdict"] == "exact" and e["final_model_exact"] for e in results)


def _alone(options, body) -> int:
    """Ticks one stage takes by itself on a fresh board's engine."""
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    scheduler.op("alone", "recovery", -1, None, lambda now: body(board))
    engine.run()
    return engine.now


def test_recovery_time_is_its_phases_with_the_devices_in_parallel():
    """The cluster's recovery: the coordinator's commit read and its CXL.io notices,
    then every device reads its own logs (in parallel: at least the slowest device's
    reads alone, less than all of them one after another), its epochs, then the MLP
    stripes to every GPU; the fixed phases take exactly what they take alone."""
    options = cluster("cxl-b")
    stretch = run_stretch(options)
    protocol = protocol_for("cxl-b", stretch.layout)
    image = initial_image(options, state=stretch.initial_state(), layout=stretch.layout)
    cut = [r.end for r in stretch.records if r.name == "update" and r.batch == 2][0] - 1
    build_journal(protocol, stretch).image_at(image.words, cut)
    rec = protocol.plan(image)
    run = time_recovery(options, rec, protocol)
    assert run.ticks == sum(run.phases.values())
    layout: ClusterLayout = stretch.layout
    bases = np.array([d.base for d in layout.devices])
    owner = [int(np.searchsorted(bases, int(o[0]), side="right")) - 1 for o, _ in rec.reads]
    assert set(owner) == {0, 1}  # each device reads its own logs

    def reads_of(board, m):
        pmem = board.shards[m].pmem
        return stage(*[pmem.read(*_requests(o - bases[m], s))
                       for (o, s), d in zip(rec.reads, owner, strict=True) if d == m])  # fmt: skip

    alone = [_alone(options, lambda b, m=m: reads_of(b, m)) for m in (0, 1)]
    assert max(alone) <= run.phases["recovery_read"] < sum(alone)
    commit_word = np.array([layout.commit_offset("commit")])
    notices = _alone(options, lambda b: stage(b.shards[0].pmem.read(commit_word, 24)))
    notices += _alone(
        options, lambda b: mmio_write(b.fabric.path("mem0", "mem1"), b.commit_ack_bytes)
    )
    assert run.phases["recovery_commit"] == notices
    stripes = _alone(options, lambda b: merged(
        b.shards[m].cxl_mem.dcoh.flush(b.fabric.path(f"mem{m}", f"gpu{g}"), 4 * count)
        for m, count in enumerate(layout.stripes) for g in (0, 1)
    ))  # fmt: skip
    assert run.phases["recovery_mlp_to_gpu"] == stripes


def test_crashcheck_cli_reports_cross_device_states():
    result = subprocess.run(
        [sys.executable, "scripts/crashcheck.py", "--system", "cxl-b", "--model", "rmc1",
         "--rows", "64", "--batch-size", "8", "--batches", "4", "--gpus", "2",
         "--cxl-mems", "2", "--resumed", "0", "--metadata-faults", "4"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["violations"] == 0 and summary["cross_device"]["flags_disagree"] > 0
    assert "cross-device states:" in result.stderr


@pytest.mark.parametrize("system", ["cxl-d", "cxl-b", "cxl"])
@pytest.mark.parametrize("device", [0, 1])
def test_one_device_losing_power_while_the_others_run_on(system, device):
    """The others run until they wait for the lost device (the commit needs its
    acknowledgement), then the cluster recovers to the commit: never behind a failure of
    every device at the same instant, and exact."""
    options = cluster(system, batches=5)
    stretch = run_stretch(options)
    tick = str(int(stretch.end_tick * 0.55))
    alone, _ = inject(dataclasses.replace(options, fail_at=[tick], fail_device=device))
    every, _ = inject(dataclasses.replace(options, fail_at=[tick]))
    entry = alone[0]
    assert entry["failed_device"] == device and entry["survivors_ran_ms"] > 0
    assert entry["verdict"] in ("exact", "within_gap")
    assert entry["resume_batch"] >= every[0]["resume_batch"]
    if system != "cxl":
        assert entry["verdict"] == "exact" and entry["final_model_exact"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fail-device", "1"], "add --fail-at or --fail-random"),
        (["--fail-device", "0", "--fail-random", "1"], "add --cxl-mems 2 or more"),
        (["--cxl-mems", "2", "--fail-device", "2", "--fail-random", "1"], "are 0 to 1"),
    ],
)  # fmt: skip
def test_bad_one_device_failures_fail_in_one_line(args, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "configs/trainingcxl.py", "--system", "cxl-b", "--model", "rmc1",
         "--batches", "2", "--outdir", str(tmp_path / "out"), *args],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
