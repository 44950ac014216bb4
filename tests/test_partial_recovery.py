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

from components.sim.units import TICKS_PER_SECOND
from simulate.failures.costs import cpr_costs, cpr_shard_costs
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
    from components.sim.engine import Engine
    from components.sim.schedule import Scheduler

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
