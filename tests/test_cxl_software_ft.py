"""Software policies on CXL-MEM-resident tables (CXL-D with ``--checkpoint``): the host
copies the tables out of CXL-MEM's PMEM to its store instead of the redo log. The
checkpoint's time against bytes over bandwidth, the redo log gone, failures recovered
exactly, crashcheck clean and every software mutant caught on this path too."""

from __future__ import annotations

from dataclasses import replace

import pytest
from protocol_mutants import FT_MUTANTS

from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_SECOND
from simulate.failures.crashcheck import crashcheck
from simulate.failures.run import run_failure_job
from simulate.run.configure import connected_board
from simulate.run.options import RunOptions
from workloads.models import get_model

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def cxl_run(policy: str, quantize: str = "none") -> RunOptions:
    return RunOptions(system="cxl-d", model="rmc1", rows=64, batch_size=8, batches=5,
                      progress=False, checkpoint=policy, quantize=quantize,
                      ckpt_interval=1e-9)  # fmt: skip


def test_a_cpr_dump_reads_cxl_mems_pmem_at_the_stores_bandwidth():
    options = RunOptions(system="cxl-d", model="rmc1", batch_size=64, checkpoint="cpr")
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, get_model("rmc1"), 64, engine, scheduler)
    assert board.checkpoint_source() is board.cxl_mem.pmem
    nbytes = board.ft.recovery_bytes(board)
    op = scheduler.op("dump", "checkpoint", -1, None, lambda now: board.ft.dump(board, nbytes))
    engine.run()
    store, pmem = board.ft.store, board.cxl_mem.pmem
    size = board.layout.regions()["data"][1]
    seconds = max(nbytes / store.write_bandwidth, size / pmem.read_bandwidth)
    first = max(store.idle_write_latency, pmem.idle_read_latency) + board.host.op_overhead
    assert op.record.end - op.record.start == pytest.approx(
        seconds * TICKS_PER_SECOND + first, rel=1e-6
    )


def test_the_redo_log_gives_way_to_the_policy(tmp_path):
    from simulate.failures.costs import timed_run

    paper = timed_run(RunOptions(system="cxl-d", model="rmc1", batch_size=64), batches=3)
    none = timed_run(
        RunOptions(system="cxl-d", model="rmc1", batch_size=64, checkpoint="none"), batches=3
    )
    assert paper["breakdown_ms"]["checkpoint"] > 0 and none["breakdown_ms"]["checkpoint"] == 0
    assert none["batch_time_ms"]["mean"] < paper["batch_time_ms"]["mean"]


@pytest.mark.parametrize(("policy", "quantize"), [("cpr", "none"), ("check-n-run", "none"),
                                                  ("check-n-run", "4")])  # fmt: skip
def test_failures_recover_as_the_policy_guarantees(tmp_path, policy, quantize):
    results = run_failure_job(replace(cxl_run(policy, quantize), fail_random=2,
                                      outdir=str(tmp_path)))  # fmt: skip
    failures = results["failure"]
    failures = [failures] if isinstance(failures, dict) else failures
    assert failures and all(f["batch"] < 5 for f in failures)
    assert all(f["verdict"] in ("exact", "within_bound") for f in failures)


@pytest.mark.parametrize(("policy", "quantize"), [("cpr", "none"), ("check-n-run", "8")])
def test_crashcheck_finds_no_violation(policy, quantize):
    report = crashcheck(cxl_run(policy, quantize))
    assert report.violations == [] and report.resumed_runs == 2


@pytest.mark.parametrize(("policy", "quantize", "mutant"), FT_MUTANTS,
                         ids=[f"{m.__name__}-{p}" for p, _, m in FT_MUTANTS])  # fmt: skip
def test_every_software_mutant_is_caught_on_cxl_mem_tables(policy, quantize, mutant):
    assert crashcheck(cxl_run(policy, quantize), protocol_class=mutant).violations
