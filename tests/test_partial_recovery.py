"""CPR's partial recovery over sharded tables (simulate/failures/partial.py): a
hand-worked schedule, the existing one-node long run (simulate/failures/goodput.py) as
an independent implementation, the time identity, the lost-share law, and one shard's
save and load against bytes over bandwidth."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_SECOND
from simulate.failures.costs import cpr_costs, cpr_prioritised_costs, cpr_shard_costs
from simulate.failures.goodput import Scheme, exponential_gaps, long_run
from simulate.failures.partial import ShardedScheme, lost_share_interval, sharded_run
from simulate.run.configure import connected_board
from simulate.run.options import RunOptions
from workloads.models import get_model

# 1 s batches, a 2 s save every 3 batches (a 5 s period), 5 s load, 4 shards
FULL = ShardedScheme("full", 1.0, 2.0, 5.0, 3, 4, partial=False)
PARTIAL = ShardedScheme("partial", 1.0, 2.0, 5.0, 3, 4, partial=True)


def test_a_failure_during_a_save_reruns_the_interval_or_loses_one_shards_share():
    """Failure at 8.5 s: one period done, 3 batches ran since and the save holding them
    was 0.5 s in. Full: those 3 s rerun, 7 batches and 2 saves left (11 s). Partial: the
    3 batches stay (3 x 64 / 4 samples lost on the failed shard), 4 batches and one save
    left (6 s)."""
    full = sharded_run(FULL, 10, 64, [8.5, math.inf])
    assert (full.failures, full.rerun_s, full.load_s, full.lost_samples) == (1, 3.0, 5.0, 0.0)
    assert full.save_s == pytest.approx(2 + 0.5 + 2 * 2)
    assert full.wall_s == pytest.approx(8.5 + 5 + 11)
    part = sharded_run(PARTIAL, 10, 64, [8.5, math.inf])
    assert (part.rerun_s, part.lost_samples) == (0.0, 3 * 64 / 4)
    assert part.save_s == pytest.approx(2 + 0.5 + 2)
    assert part.wall_s == pytest.approx(8.5 + 5 + 6)
    assert part.lost_share == pytest.approx(48 / 640)


gaps = st.lists(st.floats(0.01, 50.0), min_size=1, max_size=20).map(lambda g: [*g, math.inf])
schemes = st.tuples(
    st.floats(0.1, 3.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0), st.integers(1, 8)
)


@settings(max_examples=60, deadline=None)
@given(schemes, st.integers(1, 16), st.integers(1, 60), gaps)
def test_one_shard_agrees_with_the_one_node_long_run(params, shards, batches, gaps):
    """Full recovery with any number of shards, and partial recovery of one shard, are
    the one-node long run's replay and CPR rules (written separately): the same wall
    time and failures, and one shard's lost samples are its given-up batches."""
    batch, save, load, interval = params
    for partial, replay in ((False, True), (True, False)):
        n = shards if not partial else 1
        ours = sharded_run(ShardedScheme("s", batch, save, load, interval, n, partial),
                           batches, 8, gaps)  # fmt: skip
        theirs = long_run(Scheme("s", batch, save, load, interval, replay), batches, 8, gaps)
        assert ours.wall_s == pytest.approx(theirs.wall_s)
        assert ours.failures == theirs.failures
        if partial:
            assert ours.lost_samples == theirs.lost_batches * 8


@settings(max_examples=60, deadline=None)
@given(schemes, st.integers(1, 16), st.booleans(), st.integers(1, 60), gaps)
def test_wall_time_is_training_plus_saving_loading_and_rerunning(
    params, shards, partial, batches, gaps
):
    batch, save, load, interval = params
    scheme = ShardedScheme("s", batch, save, load, interval, shards, partial)
    run = sharded_run(scheme, batches, 8, gaps)
    assert run.wall_s == pytest.approx(batches * batch + run.save_s + run.load_s + run.rerun_s)
    assert run.load_s == pytest.approx(run.failures * load)


@pytest.mark.parametrize("shards", [1, 4, 16])
def test_the_lost_share_follows_the_interval_law_and_its_bound(shards):
    """Exponential failures over a long run: the lost share is (I b / 2 + C) / (N M),
    and the interval chosen for a target keeps it there (a period short against the
    MTBF: a tenth of it, so that a failure lands nearly uniformly in a period)."""
    mtbf, batch, save, target = 3600.0, 0.01, 20.0, 0.08 / shards
    interval = lost_share_interval(target, shards, mtbf, batch, save)
    scheme = ShardedScheme("p", batch, save, 1.0, interval, shards, partial=True)
    run = sharded_run(scheme, 200_000_000, 1, exponential_gaps(mtbf, 3))
    expected = (interval * batch / 2 + save) / (shards * mtbf)
    assert run.failures > 400
    assert run.lost_share == pytest.approx(expected, rel=0.1)
    assert run.lost_share == pytest.approx(target, rel=0.1)


def test_a_shards_save_and_load_are_its_bytes_over_the_stores_bandwidth():
    """One node of eight: its 1/8 of the tables (and the MLPs, which it saves) from PMEM
    to the store at the store's write bandwidth, after the MLP pull; the load the shard
    back at the read bandwidth. One node of one is CPR's whole checkpoint."""
    options = RunOptions(system="pmem", model="rmc1", batch_size=64, checkpoint="none")
    engine = Engine()
    cpr = replace(options, checkpoint="cpr")
    board = connected_board(cpr, get_model("rmc1"), 64, engine, Scheduler(engine))
    store, pmem = board.ft.store, board.storage
    shard = board.layout.regions()["data"][1] // 8
    mlps = board.layout.mlp_bytes
    eight, one = cpr_shard_costs(options, 8), cpr_shard_costs(options, 1)
    pull = one["save_s"] - max(
        (shard * 8 + mlps) / store.write_bandwidth, shard * 8 / pmem.read_bandwidth
    ) - (max(store.idle_write_latency, pmem.idle_read_latency) + board.host.op_overhead) / (
        TICKS_PER_SECOND
    )  # fmt: skip
    write = max((shard + mlps) / store.write_bandwidth, shard / pmem.read_bandwidth)
    first = max(store.idle_write_latency, pmem.idle_read_latency) + board.host.op_overhead
    assert eight["save_s"] == pytest.approx(pull + write + first / TICKS_PER_SECOND, rel=1e-6)
    read = max(shard / store.read_bandwidth, shard / pmem.write_bandwidth)
    first = max(store.idle_read_latency, pmem.idle_write_latency) + board.host.op_overhead
    assert eight["load_s"] == pytest.approx(read + first / TICKS_PER_SECOND, rel=1e-6)
    assert one["save_s"] == pytest.approx(cpr_costs(options)["checkpoint_s"], rel=1e-9)
    assert 0 < pull < 1


def test_the_law_would_catch_a_partial_recovery_that_loses_every_shard():
    """Mutant: a partial recovery that gives the batches up on every shard (no division
    by the shards) is N times off the law, far outside its tolerance."""
    mtbf, batch, save, shards = 3600.0, 0.01, 20.0, 4
    interval = lost_share_interval(0.02, shards, mtbf, batch, save)
    scheme = ShardedScheme("p", batch, save, 1.0, interval, shards, partial=True)
    run = sharded_run(scheme, 50_000_000, 1, exponential_gaps(mtbf, 3))
    mutant = replace(run, lost_samples=run.lost_samples * shards)
    expected = (interval * batch / 2 + save) / (shards * mtbf)
    assert run.lost_share == pytest.approx(expected, rel=0.1)
    assert mutant.lost_share != pytest.approx(expected, rel=0.1)


SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cpr_shards.py"


def test_the_script_reports_save_load_rerun_and_lost_samples_apart(tmp_path):
    out = tmp_path / "cpr"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--outdir", str(out), "--model", "rmc1",
         "--shards", "1,8", "--mtbf", "3600", "--days", "0.5"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [r for r in (out / "REPORT.md").read_text().splitlines() if r.startswith("| ")]
    cells = {(c[0], c[2]): c for c in ([x.strip() for x in r.split("|")[1:-1]] for r in rows[1:])}

    def pct(text: str) -> float:
        return float(text.rstrip("%")) / 100

    for shards in ("1", "8"):
        full, part = cells[shards, "full"], cells[shards, "partial"]
        assert full[3] == part[3]  # Young's interval for both
        # the parts add up; partial recovery reruns nothing and loses samples instead
        for row in (full, part):
            assert pct(row[10]) == pytest.approx(sum(pct(x) for x in row[7:10]), abs=2e-4)
        assert pct(part[9]) == 0 and pct(part[11]) > 0 and pct(full[11]) == 0
    # eight nodes save an eighth each: the save is shorter, and so is every overhead
    assert float(cells["8", "full"][4]) < float(cells["1", "full"][4]) / 4
    assert (out / "overhead.png").stat().st_size > 0


@pytest.mark.parametrize(
    "args", [["--shards", "0"], ["--target", "1.5"], ["--system", "cxl"], ["--store", "tape"]]
)
def test_the_scripts_bad_arguments_are_one_line(tmp_path, args):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--outdir", str(tmp_path / "o"), *args],
        capture_output=True, text=True,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "cpr_shards.py: error:" in lines[0]


# CPR's prioritised checkpoints: 1 s batches, every 3 batches; a full save of 2 s, then
# two prioritised ones of 0.5 s (a 12 s cycle: 3 + 2, 3 + 0.5, 3 + 0.5); 4 shards
MFU = ShardedScheme("mfu", 1.0, 2.0, 5.0, 3, 4, True, "mfu", 2, 0.5, 0.75)
SSU = replace(MFU, name="ssu", prioritised="ssu")


def test_a_prioritised_chain_loses_the_unsaved_rows_updates_since_the_full_one():
    """Failure at 22 s: one cycle (12 s), then the full (5 s) and one prioritised (3.5 s)
    checkpoint, 1.5 s into the next interval: 1 batch since, one prioritised checkpoint
    after the full one. MFU misses 1 - 0.75 of that interval's 3 batches' updates, SSU
    (1 - 0.75)^1 of them: 1 + 0.75 batches of the shard's updates, 64 / 4 samples each.
    14 batches left: 4 checkpoints from a new cycle (2 full, 2 prioritised: 5 s)."""
    for scheme in (MFU, SSU):
        run = sharded_run(scheme, 30, 64, [22.0, math.inf])
        assert run.lost_samples == pytest.approx((1 + 0.75) * 64 / 4)
        assert run.rerun_s == pytest.approx(0.5)
        assert run.save_s == pytest.approx(3 + 2 + 0.5 + 5)
        assert run.wall_s == pytest.approx(22 + 5 + 14 + 5)


def test_right_after_a_cycle_the_whole_chain_counts_and_mfu_and_ssu_part():
    """Failure at 12.5 s: the cycle's full and both prioritised checkpoints done, 0
    batches since. MFU: 2 intervals x 3 batches x 0.25; SSU: 3 x (0.25 + 0.25^2)."""
    mfu = sharded_run(MFU, 30, 64, [12.5, math.inf])
    ssu = sharded_run(SSU, 30, 64, [12.5, math.inf])
    assert mfu.lost_samples == pytest.approx(2 * 3 * 0.25 * 16)
    assert ssu.lost_samples == pytest.approx(3 * (0.25 + 0.0625) * 16)


@settings(max_examples=60, deadline=None)
@given(schemes, st.floats(0.0, 3.0), st.integers(0, 6), st.floats(0.0, 1.0),
       st.sampled_from(["mfu", "ssu"]), st.integers(1, 60), gaps)  # fmt: skip
def test_prioritised_runs_keep_the_time_identity_and_lose_at_least_the_batches_since(
    params, partial_save, chain, coverage, kind, batches, gaps
):
    batch, save, load, interval = params
    scheme = ShardedScheme("p", batch, save, load, interval, 4, True, kind, chain,
                           partial_save, coverage)  # fmt: skip
    run = sharded_run(scheme, batches, 8, gaps)
    assert run.wall_s == pytest.approx(batches * batch + run.save_s + run.load_s + run.rerun_s)
    plain = sharded_run(replace(scheme, prioritised=None), batches, 8, gaps)
    assert run.lost_samples >= plain.lost_samples - 1e-9
    full_coverage = sharded_run(replace(scheme, coverage=1.0), batches, 8, gaps)
    assert full_coverage.lost_samples == pytest.approx(plain.lost_samples)


def test_a_prioritised_checkpoint_stores_its_rows_and_the_mlps_and_saves_faster():
    """RMC1 on 4 nodes: MFU of an eighth of a shard's rows stores those rows x row bytes
    plus the MLPs, its save is at least those bytes over the store's write bandwidth and
    under the full save; the chain is as many as fit in a full checkpoint's bytes."""
    options = RunOptions(system="pmem", model="rmc1", batch_size=64, checkpoint="none")
    engine = Engine()
    cpr = replace(options, checkpoint="cpr")
    board = connected_board(cpr, get_model("rmc1"), 64, engine, Scheduler(engine))
    data, row_bytes = board.layout.regions()["data"][1], board.layout.row_bytes
    mlps = board.layout.mlp_bytes
    got = cpr_prioritised_costs(options, 4, 10_000, 0.125, "mfu")
    assert got["rows"] == math.ceil(0.125 * (data // row_bytes // 4))
    assert got["stored"] == got["rows"] * row_bytes + mlps
    assert got["chain"] == (data // 4 + mlps) // got["stored"]
    assert got["stored"] / board.ft.store.write_bandwidth < got["save_s"]
    assert got["save_s"] < cpr_shard_costs(options, 4)["save_s"]
    assert 0.125 < got["coverage"] < 1  # the most popular rows draw more than their share
    ssu = cpr_prioritised_costs(options, 4, 10_000, 0.125, "ssu")
    assert ssu["coverage"] == 0.125 and ssu["rows"] <= got["rows"]
