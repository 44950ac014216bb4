"""Software policies on several CXL-MEMs (--system cxl-d --cxl-mems M --checkpoint ...):
each shard saved by the host to a store of its own, all at once; failures of one device
recovered partially (its shard alone, CPR) or fully (every shard to the newest
checkpoint complete on all devices, then a rerun); crash checks and their mutants."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from protocol_mutants import SHARDED_FT_MUTANTS

from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_SECOND
from simulate.failures.costs import timed_run
from simulate.failures.crashcheck import crashcheck
from simulate.failures.run import run_failure_job
from simulate.failures.sharded import time_shard_recovery
from simulate.run.configure import connected_board
from simulate.run.options import RunOptions
from workloads.models import get_model

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def small(policy: str, recovery: str | None = None, interval: float = 1e-9, **more) -> RunOptions:
    """rmc1 on 64-row tables, two GPUs, two CXL-MEMs: a functional failure run."""
    more = {"batches": 6, **more}
    return RunOptions(system="cxl-d", model="rmc1", rows=64, batch_size=8, progress=False,
                      checkpoint=policy, recovery=recovery, gpus=2, cxl_mems=2,
                      ckpt_interval=None if policy == "none" else interval, **more)  # fmt: skip


def big(mems: int, policy: str = "cpr") -> RunOptions:
    return RunOptions(system="cxl-d", model="rmc1", batch_size=64, checkpoint=policy,
                      cxl_mems=mems, ckpt_interval=1e-9 if policy == "cpr" else None,
                      progress=False)  # fmt: skip


def board_of(options: RunOptions):
    engine = Engine()
    scheduler = Scheduler(engine)
    spec = get_model(options.model)
    return engine, scheduler, connected_board(options, spec, 64, engine, scheduler)


def dump_ticks(shard) -> float:
    """A shard's dump to its store: bytes over the slower of PMEM and the store, plus
    the first latencies and the host's op overhead."""
    nbytes = shard.ft.recovery_bytes(shard)
    size = shard.layout.regions()["data"][1]
    store, pmem = shard.ft.store, shard.pmem
    seconds = max(nbytes / store.write_bandwidth, size / pmem.read_bandwidth)
    first = max(store.idle_write_latency, pmem.idle_read_latency) + shard.host.op_overhead
    return seconds * TICKS_PER_SECOND + first


@pytest.mark.parametrize("mems", [2, 4])
def test_every_shard_saves_to_its_own_store_at_once(mems):
    engine, scheduler, board = board_of(big(mems))
    stores = {id(shard.ft.store) for shard in board.shards}
    assert len(stores) == mems  # one store per CXL-MEM
    ops = [
        scheduler.op("dump", "checkpoint", -1, shard.ft.unit,
                     lambda now, s=shard: s.ft.dump(s, s.ft.recovery_bytes(s)))
        for shard in board.shards
    ]  # fmt: skip
    engine.run()
    for shard, op in zip(board.shards, ops, strict=True):
        assert op.record.start == 0  # in parallel: none waits for another
        assert op.record.end - op.record.start == pytest.approx(dump_ticks(shard), rel=1e-6)
    # the pause is one shard's bytes over one store's bandwidth, not M shards'
    whole = sum(shard.ft.recovery_bytes(shard) for shard in board.shards)
    store = board.shards[0].ft.store.write_bandwidth
    assert engine.now < 1.05 * whole / mems / store * TICKS_PER_SECOND


def test_a_cpr_checkpoint_pauses_training_for_one_shards_write():
    options = big(2)
    cpr = timed_run(options, batches=3)["batch_time_ms"]["mean"]
    none = timed_run(replace(options, checkpoint="none", ckpt_interval=None), batches=3)
    _, _, board = board_of(options)
    pause = max(dump_ticks(shard) for shard in board.shards) / TICKS_PER_SECOND * 1e3
    assert cpr - none["batch_time_ms"]["mean"] == pytest.approx(pause, rel=0.01)


def test_partial_recovery_loads_one_shard_full_every_shard_in_parallel():
    options = big(2)
    _, _, board = board_of(options)
    nbytes = {d: shard.ft.recovery_bytes(shard) for d, shard in enumerate(board.shards)}
    one, _ = time_shard_recovery(options, {1: nbytes[1]}, mlps=False)
    both, _ = time_shard_recovery(options, nbytes, mlps=True)
    shard = board.shards[1]
    size = shard.layout.regions()["data"][1]
    seconds = max(nbytes[1] / shard.ft.store.read_bandwidth, size / shard.pmem.write_bandwidth)
    assert one == pytest.approx(seconds * TICKS_PER_SECOND, rel=0.01)
    assert one < both < 1.1 * one  # the shards load at once, not one after the other


def failures_of(options: RunOptions, tmp_path) -> list[dict]:
    got = run_failure_job(replace(options, outdir=str(tmp_path)))["failure"]
    return [got] if isinstance(got, dict) else got


def test_partial_recovery_loses_the_failed_shards_share_of_the_batches_since(tmp_path):
    options = small("cpr", batches=12, fail_at=["1.4ms", "2.4ms"], fail_device=1,
                    interval=1e-3)  # fmt: skip
    failures = failures_of(options, tmp_path)
    assert [f["verdict"] for f in failures] == ["exact", "exact"]
    assert any(f["batches_lost"]["1"] > 0 for f in failures)
    for f in failures:
        assert f["reloaded_devices"] == [1] and f["resume_batch"] == f["batch"]
        lost = f["batches_lost"]["1"]
        assert lost == f["batch"] - 1 - f["checkpoint_batch"]["1"]
        assert f["lost_samples"] == pytest.approx(f["shard_share"]["1"] * lost * 8)
        assert f["rerun_ms"] == 0 and f["recovery_ms"] > 0


def test_full_recovery_reruns_from_the_checkpoint_every_device_holds(tmp_path):
    options = small("cpr", "full", batches=12, fail_at=["1.4ms"], fail_device=1,
                    interval=1e-3)  # fmt: skip
    (f,) = failures_of(options, tmp_path)
    assert f["verdict"] == "exact" and f["reloaded_devices"] == [0, 1]
    b = f["checkpoint_batch"]["0"]
    assert f["checkpoint_batch"]["1"] == b and f["resume_batch"] == b + 1
    assert f["batches_redone"] == f["batch"] - 1 - b > 0 and f["rerun_ms"] > 0
    assert f["lost_samples"] == 0 and f["final_model_exact"]


@pytest.mark.parametrize(("policy", "recovery", "quantize"),
                         [("cpr", "partial", "none"), ("cpr", "full", "none"),
                          ("check-n-run", None, "8"), ("none", None, "none")])  # fmt: skip
def test_crashcheck_finds_no_violation(policy, recovery, quantize):
    report = crashcheck(small(policy, recovery, quantize=quantize, interval=4e-4))
    assert report.violations == [] and report.resumed_runs == 2
    assert report.guarantee["devices"] == 2


@pytest.mark.parametrize("knob", ["mfu_share", "ssu_share"])
def test_prioritised_checkpoints_on_several_devices_are_checked_as_read(knob):
    """CPR-MFU and CPR-SSU on every shard: the oracle holds each device's rows to what
    its checkpoint ops read from its PMEM, and the real policies meet it."""
    sets = [(f"board.shard{m}.ft.{knob}", "0.25") for m in range(2)]
    report = crashcheck(small("cpr", "partial", interval=4e-4, sets=sets))
    assert report.violations == [] and report.guarantee["rows"] == "as last saved"


@pytest.mark.parametrize(
    ("policy", "recovery", "mutant"),
    SHARDED_FT_MUTANTS,
    ids=[f"{m.__name__}-{p}-{r}" for p, r, m in SHARDED_FT_MUTANTS],
)
def test_every_multi_device_mutant_is_caught(policy, recovery, mutant):
    report = crashcheck(small(policy, recovery, interval=4e-4), protocol_class=mutant)
    assert report.violations


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--system", "cxl", "--checkpoint", "cpr"], "paper's protocols"),
        (["--system", "cxl-d", "--checkpoint", "cpr", "--pool-jobs", "2"], "no --topology"),
        (["--system", "cxl-d", "--checkpoint", "check-n-run", "--recovery", "partial"],
         "partial is CPR's"),
        (["--system", "cxl-d", "--recovery", "full"], "--recovery chooses"),
    ],
)  # fmt: skip
def test_unsupported_multi_device_software_runs_fail_in_one_line(args, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "configs/trainingcxl.py", "--model", "rmc1", "--batches", "2",
         "--cxl-mems", "2", "--no-progress", "--outdir", str(tmp_path / "out"), *args],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
