"""Disaggregated systems: topologies, routes, sharding, the all-to-all and the all-reduce."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from components.boards.cxl import CxlBBoard, CxlBoard, CxlDBoard
from components.boards.disaggregated import DisaggregatedBoard
from components.boards.sharding import TableSharding, build_sharding
from components.interconnect.cxl import HEADER_BITS, LINE_BYTES, CxlLink, CxlSwitch
from components.interconnect.topology import Fabric, TopologySpec, topology_from_dict
from components.sim.engine import Engine
from components.sim.flows import Flow, FlowNetwork
from components.sim.params import ConfigError
from simulate.simulator import Simulator
from tests.simrun import run_ops
from workloads.dlrm import DLRM, dense
from workloads.dlrm.sharded import shard_tables, sharded_lookup
from workloads.inputs import InputGenerator
from workloads.models import get_model
from workloads.opgraph import build_demand, split_samples
from workloads.training import FunctionalTrainer
from workloads.workload import DlrmWorkload

BOARDS = {"cxl-d": CxlDBoard, "cxl-b": CxlBBoard, "cxl": CxlBoard}


def simulate(board, tmp_path, name, model="rmc1", batches=3) -> dict:
    out = tmp_path / name
    Simulator(board=board, workload=DlrmWorkload(model), batches=batches, outdir=out,
              progress=False).run()  # fmt: skip
    return json.loads((out / "results.json").read_text())


# ----- one GPU and one CXL-MEM through the disaggregated board ------------------------------
@pytest.mark.parametrize("system", sorted(BOARDS))
def test_one_by_one_through_the_shared_skeleton_times_every_batch_as_the_single_board(
    system, tmp_path
):
    """The same batches but for the cluster's commit, which one device does not have:
    its 8 B word costs a batch at most the PMEM's write latency (redo applies after it)
    plus one XPLine of media time taken from the PMEM-bound ops beside it."""
    single = simulate(BOARDS[system](), tmp_path, "single", model="rm1")
    one = DisaggregatedBoard(BOARDS[system], TopologySpec.single_switch(1, 1))
    shared = simulate(one, tmp_path, "shared", model="rm1")
    pmem = one.shards[0].pmem
    most = (pmem.write_latency + pmem.access_unit / pmem.ctrl_write_bandwidth * 1e12) / 1e9
    for alone, committed in zip(single["batch_times_ms"], shared["batch_times_ms"], strict=True):
        assert 0 <= committed - alone <= most
    for key in ("embedding", "transfer", "bottom_mlp", "top_mlp"):
        assert shared["breakdown_ms"][key] == single["breakdown_ms"][key]


def test_one_by_one_on_the_command_line_is_todays_board(tmp_path):
    def stats(*extra):
        out = tmp_path / "_".join(extra or ("default",))
        subprocess.run(
            [sys.executable, "configs/trainingcxl.py", "--model", "rmc1", "--batches", "2",
             "--no-progress", "--outdir", str(out), *extra], check=True, capture_output=True,
        )  # fmt: skip
        lines = (out / "stats.txt").read_text().splitlines()
        return [line for line in lines if not line.startswith("host")]

    assert stats("--gpus", "1", "--cxl-mems", "1") == stats()


# ----- routes and sharing -------------------------------------------------------------------
def tree(gpus: int, mems: int) -> TopologySpec:
    """The GPUs and the host under the root, the CXL-MEMs under a leaf switch."""
    return topology_from_dict(
        {"switches": {"root": None, "leaf": {"parent": "root"}}, "host": "root",
         "gpus": {"root": gpus}, "cxl_mems": {"leaf": mems}}
    )  # fmt: skip


def fabric_of(topology: TopologySpec) -> Fabric:
    links = {endpoint: CxlLink() for endpoint in topology.attach}
    switches = {}
    for spec in topology.switches:
        switches[spec.name] = CxlSwitch()
        if spec.parent is not None:
            switches[spec.name].uplink = CxlLink()
    for name, link in links.items():
        object.__setattr__(link, "_name", name)
    for name, switch in switches.items():
        object.__setattr__(switch, "_name", name)
    return Fabric(topology, links, switches)


def test_a_route_climbs_to_the_common_switch_and_back_down():
    fabric = fabric_of(tree(2, 2))
    path = fabric.path("mem0", "gpu1")
    names = [(link.name, way) for link, way in path.hops]
    assert names == [("mem0", "up"), ("uplink", "up"), ("gpu1", "down")]
    assert [s.name for s in path.switches] == ["leaf", "root"]
    sideways = fabric.path("mem0", "mem1")  # peer to peer under the leaf: no uplink
    assert [(link.name, way) for link, way in sideways.hops] == [("mem0", "up"), ("mem1", "down")]
    assert fabric.path("host", "mem1").hops[0] == (fabric.links["host"], "down")


@pytest.mark.parametrize("flows", [1, 2, 4, 8])
def test_flows_through_one_switch_uplink_each_get_their_share_of_it(flows):
    """G streams from G CXL-MEMs under a leaf switch to G GPUs above it share only the
    leaf's uplink: each is served at 1/G of it, so all end at G x the time one takes."""
    fabric = fabric_of(tree(flows, flows))
    nbytes = 4 << 20
    streams = [Flow(fabric.path(f"mem{i}", f"gpu{i}").needs(nbytes)) for i in range(flows)]
    engine = Engine()
    network = FlowNetwork(engine)
    for flow in streams:
        network.start(flow)
    engine.run()
    alone = fabric.links["mem0"].serialization_ticks(nbytes)
    assert [flow.end for flow in streams] == pytest.approx([flows * alone] * flows, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.integers(1, 3), st.integers(1, 3))
def test_routes_are_symmetric_and_cross_each_link_once(parents, gpus, mems):
    """Any tree: the way back crosses the same links the other way round, and no link or
    switch twice."""
    names = ["s0"] + [f"s{i + 1}" for i in range(len(parents))]
    switches = {"s0": None} | {
        f"s{i + 1}": {"parent": names[min(p, i)]} for i, p in enumerate(parents)
    }
    topology = topology_from_dict({
        "switches": switches, "host": "s0",
        "gpus": {names[-1]: gpus}, "cxl_mems": {names[len(names) // 2]: mems},
    })  # fmt: skip
    fabric = fabric_of(topology)
    for a in topology.attach:
        for b in topology.attach:
            if a == b:
                continue
            there, back = fabric.path(a, b), fabric.path(b, a)
            links = [id(link) for link, _ in there.hops]
            assert len(links) == len(set(links))
            assert links == [id(link) for link, _ in back.hops][::-1]
            flipped = {"up": "down", "down": "up"}
            assert [w for _, w in there.hops] == [flipped[w] for _, w in back.hops][::-1]
            assert len(there.switches) == len(set(map(id, there.switches)))


# ----- the all-reduce -----------------------------------------------------------------------
def connected(board, model="rmc1", batch_size=128):
    engine = Engine()
    from components.sim.schedule import Scheduler

    scheduler = Scheduler(engine)
    board.connect(engine, scheduler, get_model(model), batch_size)
    return board


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_a_ring_all_reduce_alone_takes_the_ring_cost(gpus):
    """Alone: each GPU writes 2(G-1) chunks of B/G to the next, so the time is the flits
    on the busier direction of one GPU's link plus 2(G-1) first-line round trips:
    2(G-1)/G x B / bandwidth + 2(G-1) x alpha (Patarasuk & Yuan). Towards a GPU run
    both the previous GPU's writes (M2S RwD: header + 64 B a line) and the completions
    of its own (S2M NDR), so that direction sets the pace."""
    board = connected(DisaggregatedBoard(CxlBBoard, TopologySpec.single_switch(gpus, 1)))
    nbytes = 64 << 20
    records, _ = run_ops(lambda now: board.allreduce(nbytes))
    link = board.cxl_gpus[0].link
    lines = 2 * (gpus - 1) * math.ceil(math.ceil(nbytes / gpus) / LINE_BYTES)
    rwd = math.ceil(HEADER_BITS["M2S RwD"] / 8) + LINE_BYTES
    path = board.fabric.path("gpu0", "gpu1")
    ndr = math.ceil(HEADER_BITS["S2M NDR"] / 8)
    rtt = path.round_trip_ticks(rwd, ndr)
    expected = link.serialization_ticks(lines * (rwd + ndr)) + 2 * (gpus - 1) * rtt
    assert records[0].end - records[0].start == pytest.approx(expected, abs=2)
    payload_seconds = 2 * (gpus - 1) / gpus * nbytes / link.effective_bandwidth
    assert (expected - 2 * (gpus - 1) * rtt) / 1e12 == pytest.approx(
        payload_seconds * (rwd + ndr) / LINE_BYTES, rel=0.02
    )


@pytest.mark.parametrize("gpus", [2, 4])
def test_an_nvlink_all_reduce_takes_its_packets_at_the_ports_rate(gpus):
    """Over NVLink ports: 2(G-1)/G x B in 256 B packets with a 16 B header each, at
    56.25 GB/s a direction (the RTX 3090's 112.5 GB/s both ways), plus 2(G-1) one-way
    latencies of two ports (out of one GPU, into the next)."""
    board = DisaggregatedBoard(CxlBBoard, TopologySpec.single_switch(gpus, 1))
    board.allreduce_link = "nvlink"
    connected(board)
    nbytes = 64 << 20
    records, _ = run_ops(lambda now: board.allreduce(nbytes))
    sent = 2 * (gpus - 1) * math.ceil(nbytes / gpus)
    seconds = sent * 272 / 256 / 56.25e9 + 2 * (gpus - 1) * 2 * 350e-9
    assert (records[0].end - records[0].start) / 1e12 == pytest.approx(seconds, rel=1e-3)


# ----- sharding -----------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=40), st.integers(1, 8))
def test_table_sharding_places_every_table_once_within_lpt_bound(rows, devices):
    if devices > len(rows):
        with pytest.raises(ConfigError, match="leaves a device empty"):
            TableSharding.balanced(tuple(rows), 128, devices)
        return
    sharding = TableSharding.balanced(tuple(rows), 128, devices)
    placed = sorted(t for tables in sharding.tables for t in tables)
    assert placed == list(range(len(rows)))
    loads = [sum(rows[t] for t in tables) for tables in sharding.tables]
    best = max(max(rows), math.ceil(sum(rows) / devices))  # no placement beats this
    assert max(loads) <= 4 / 3 * best + 1e-9 or max(loads) <= max(rows) + min(loads)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(8, 400), min_size=1, max_size=12), st.integers(1, 8),
       st.sampled_from(["table", "row"]))  # fmt: skip
def test_every_row_has_one_home_and_shards_keep_the_global_order(rows, devices, kind):
    if kind == "table" and devices > len(rows):
        return  # refused (test above)
    placement = build_sharding(kind, tuple(rows), 128, devices)
    everything = np.arange(sum(rows), dtype=np.int64)
    device, local = placement.locate(everything)
    for d in range(devices):
        mine = local[device == d]
        assert np.array_equal(mine, np.arange(sum(placement.shard_rows(d))))  # a bijection
    if kind == "row":  # each device holds ceil or floor of 1/M of every table
        parts = np.array([placement.shard_rows(d) for d in range(devices)])
        assert np.array_equal(parts.sum(axis=0), rows)
        assert parts.max(axis=0).tolist() == [-(-r // devices) for r in rows]


@pytest.mark.parametrize("kind, devices", [("table", 3), ("row", 3), ("row", 8)])
def test_sharded_lookups_add_up_to_the_unsharded_bags(kind, devices):
    """Each device pools its part of every bag from its own shard array; the partial
    sums add up to the whole model's bags (exactly for whole tables, up to float32
    reassociation for row-wise partial sums)."""
    spec = get_model("rmc1").capped(2000)
    model = DLRM(spec, seed=4)
    batch = InputGenerator(spec, 64, seed=5).batch(0)
    placement = build_sharding(kind, spec.rows_per_table, spec.row_bytes, devices)
    shards = shard_tables(model.table, placement)
    assert sum(shard.shape[0] for shard in shards) == spec.total_rows
    pooled = sharded_lookup(shards, batch, spec, placement)
    if kind == "table":
        assert np.array_equal(pooled, model.lookup(batch))
    else:
        assert np.allclose(pooled, model.lookup(batch), rtol=1e-5, atol=1e-6)


def test_row_wise_sharding_moves_every_bag_from_every_device(tmp_path):
    """Row-wise, each CXL-MEM sends a partial vector of every bag: M times the pooled
    bytes of table-wise placement cross the CXL-MEMs' links."""

    def pooled_bytes(kind):
        board = DisaggregatedBoard(CxlDBoard, TopologySpec.single_switch(1, 4))
        board.sharding = kind
        out = tmp_path / kind
        Simulator(board=board, workload=DlrmWorkload("rm1"), batches=2, outdir=out,
                  progress=False).run()  # fmt: skip
        stats = dict(line.split()[:2] for line in (out / "stats.txt").read_text().splitlines()
                     if line.startswith("board.shard"))  # fmt: skip
        return sum(int(stats[f"board.shard{m}.cxl_mem.dcoh.linesFlushed"]) for m in range(4))

    assert pooled_bytes("row") == 4 * pooled_bytes("table")


def test_split_demands_keep_every_lookup_with_its_shard_local_row():
    spec = get_model("rmc1")
    generator = InputGenerator(spec, 64, seed=3)
    sharding = TableSharding.balanced(spec.rows_per_table, spec.row_bytes, 3)
    first = build_demand(spec, generator.batch(0), 0, None)
    second = build_demand(spec, generator.batch(1), 1, generator.batch(0))
    parts0 = sharding.split(first, [64], None)
    parts1 = sharding.split(second, [64], parts0)
    assert sum(p.lookup.lookups for p in parts1) == second.lookup.lookups
    assert sum(p.lookup.pooled_bytes for p in parts1) == second.lookup.pooled_bytes
    assert sum(p.lookup.reused_rows for p in parts1) == second.lookup.reused_rows
    # each shard counts its own lookups of reused rows, not the whole batch's
    assert sum(p.lookup.reused_lookups for p in parts1) == second.lookup.reused_lookups
    starts = np.concatenate(([0], np.cumsum(spec.rows_per_table)))
    for device, part in enumerate(parts1):
        local_rows = sum(spec.rows_per_table[t] for t in sharding.tables[device])
        assert part.lookup.rows.max() < local_rows
        assert np.all(np.diff(part.lookup.unique_rows) > 0)
        # back to global ids: exactly this device's tables' lookups, in issue order
        tables = np.searchsorted(starts, second.lookup.rows, side="right") - 1
        mine = np.isin(tables, sharding.tables[device])
        assert np.array_equal(part.lookup.rows, sharding.locate(second.lookup.rows[mine])[1])


@pytest.mark.parametrize("mems", [2, 4])
def test_table_wise_sharding_divides_a_pmem_bound_lookup(mems, tmp_path):
    """RM1's 20 equal tables over M CXL-MEMs: each device looks up 1/M of the rows on
    PMEM of its own, so the lookup (media-bound) takes ~1/M as long."""

    def lookup_ms(board):
        out = tmp_path / f"m{len(getattr(board, 'shards', [0]))}"
        Simulator(board=board, workload=DlrmWorkload("rm1"), batches=3, outdir=out,
                  progress=False).run()  # fmt: skip
        import csv

        with open(out / "timeline.csv") as handle:
            rows = [r for r in csv.DictReader(handle) if r["op"] == "lookup" and r["batch"] == "1"]
        return max(float(r["end_ms"]) - float(r["start_ms"]) for r in rows)

    one = lookup_ms(CxlDBoard())
    many = lookup_ms(DisaggregatedBoard(CxlDBoard, TopologySpec.single_switch(1, mems)))
    assert many == pytest.approx(one / mems, rel=0.1)


def test_strong_scaling_splits_the_samples_and_their_kernels():
    spec = get_model("rm1")
    batch = InputGenerator(spec, 130, seed=1).batch(0)
    demand = build_demand(spec, batch, 0, None, gpus=4)
    assert split_samples(130, 4) == [33, 33, 32, 32] == demand.gpu_batch_sizes
    flops = [sum(k.flops for k in kernels["bottom_fwd"]) for kernels in demand.gpu_kernels]
    whole = sum(k.flops for k in demand.kernels["bottom_fwd"])
    assert sum(flops) == whole  # GEMM FLOPs are linear in the samples


def test_two_by_two_doubles_rm1_cxl_throughput(tmp_path):
    """RM1 on CXL is PMEM-bound: two CXL-MEMs halve the lookup and the update, two GPUs
    the MLP work; the all-reduce of RM1's 68 MB of MLP gradients is what is added."""
    one = simulate(CxlBoard(), tmp_path, "1x1", model="rm1", batches=4)
    two = simulate(DisaggregatedBoard(CxlBoard, TopologySpec.single_switch(2, 2)), tmp_path,
                   "2x2", model="rm1", batches=4)  # fmt: skip
    assert one["batch_time_ms"]["mean"] / two["batch_time_ms"]["mean"] >= 1.5


def _closest_to_a_kink(gaps: list[float]):
    """dense.mlp_forward, also noting each call's ReLU pre-activation nearest zero (the
    same float operations, so the same values)."""
    forward = dense.mlp_forward

    def noting(layers, x, sigmoid_last):
        out, inputs = forward(layers, x, sigmoid_last)
        relu = layers[:-1] if sigmoid_last else layers
        gaps.extend(
            float(np.abs(i @ w.T + b).min())
            for i, (w, b) in zip(inputs[: len(relu)], relu, strict=True)
        )
        return out, inputs

    return noting


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 5), st.integers(0, 2**16), st.booleans())
@example(replicas=2, seed=7728, relaxed=False)  # a pre-activation 4.5e-8 from zero: assumed away
def test_data_parallel_numerics_equal_one_gpu_on_the_global_batch(replicas, seed, relaxed):
    """Synchronous SGD over G replicas, gradients all-reduced with weights B_g / B, is
    one step on the whole batch: the same tables, MLPs and losses up to float32
    rounding (a few ulps of the gradients' sums in a different order). Where a ReLU's
    pre-activation lies within that rounding of zero, the two orders may take opposite
    sides of the kink and the gradients differ by a whole unit's contribution, so such
    draws are skipped (seed 7728 with 2 replicas: 4.5e-8, 371 rows apart)."""
    spec = get_model("rmc1").capped(500)
    generator = InputGenerator(spec, 37, seed=seed)
    one = FunctionalTrainer.create(spec, seed, relaxed)
    many = FunctionalTrainer.create(spec, seed, relaxed, replicas=replicas)
    gaps: list[float] = []
    for n in range(3):
        batch = generator.batch(n)
        with patch.object(dense, "mlp_forward", _closest_to_a_kink(gaps)):
            loss = one.step(batch)
        assume(min(gaps) > 1e-5)  # float32 sums of ~10^2 terms near 1: ~1e-6 apart
        assert many.step(batch) == pytest.approx(loss, rel=1e-5)
    one.flush()
    many.flush()
    assert np.allclose(many.model.table, one.model.table, rtol=1e-5, atol=1e-7)
    assert np.allclose(many.model.mlp_flat(), one.model.mlp_flat(), rtol=1e-4, atol=1e-6)
    assert not np.array_equal(
        one.model.table, FunctionalTrainer.create(spec, seed, relaxed).model.table
    )


def test_a_replica_share_is_the_samples_it_names():
    spec = get_model("rmc1").capped(100)
    batch = InputGenerator(spec, 10, seed=2).batch(0)
    part = batch.samples(3, 7)
    assert part.batch_size == 4
    for t in range(spec.num_tables):
        bags = np.split(batch.indices[t], batch.offsets[t][1:-1])
        assert np.array_equal(part.indices[t], np.concatenate(bags[3:7]))
        assert part.offsets[t][0] == 0 and part.offsets[t][-1] == part.indices[t].size


# ----- pooling -----------------------------------------------------------------------------
def test_pooled_jobs_each_get_their_partition_of_every_device():
    board = connected(
        DisaggregatedBoard(CxlBBoard, TopologySpec.single_switch(2, 2, hosts=2), jobs=2)
    )
    for m in range(2):
        first, second = board.jobs[0].shards[m], board.jobs[1].shards[m]
        assert second.cxl_mem is first.cxl_mem  # one device, shared
        assert second.layout.base == first.layout.size  # side by side, not aliased
        assert first.pmem.capacity == first.layout.size + second.layout.size
        assert second.lookup_resource == first.lookup_resource  # one engine serves both
    assert board.jobs[1].gpus == [1] and board.jobs[0].gpus == [0]


def test_two_pmem_bound_jobs_on_one_pool_each_run_at_half_speed(tmp_path):
    """RM1 on CXL is PMEM-bound: two jobs sharing the same CXL-MEMs split the PMEM
    controllers' time, so each batch takes about twice as long as alone; the lost time
    shows as contention in each job's breakdown."""
    alone = simulate(DisaggregatedBoard(CxlBoard, TopologySpec.single_switch(1, 2)), tmp_path,
                     "alone", model="rm1", batches=4)  # fmt: skip
    pooled = simulate(
        DisaggregatedBoard(CxlBoard, TopologySpec.single_switch(2, 2, hosts=2), jobs=2),
        tmp_path, "pooled", model="rm1", batches=4,
    )  # fmt: skip
    for job in (pooled, pooled["jobs"][0]):
        assert job["batch_time_ms"]["mean"] == pytest.approx(
            2 * alone["batch_time_ms"]["mean"], rel=0.1
        )
        assert job["breakdown_ms"]["contention"] > 0.2 * job["batch_time_ms"]["mean"]
    timeline = (tmp_path / "pooled" / "timeline.csv").read_text()
    assert ",job1.lookup," in timeline and ",lookup," in timeline


# ----- bad topologies -----------------------------------------------------------------------
BAD = {
    "no GPUs": ({"switches": {"s": None}, "cxl_mems": {"s": 1}}, "no GPUs"),
    "no CXL-MEMs": ({"switches": {"s": None}, "gpus": {"s": 1}}, "no CXL-MEMs"),
    "a cycle": (
        {"switches": {"a": {"parent": "b"}, "b": {"parent": "a"}, "r": None}, "host": "r",
         "gpus": {"r": 1}, "cxl_mems": {"r": 1}},
        "form a cycle",
    ),
    "too few ports": (
        {"switches": {"s": {"ports": 2}}, "gpus": {"s": 1}, "cxl_mems": {"s": 1}},
        "3 children but 2 ports",
    ),
    "two roots": (
        {"switches": {"a": None, "b": None}, "host": "a", "gpus": {"a": 1}, "cxl_mems": {"b": 1}},
        "2 root switches",
    ),
    "two levels on CXL 2.0": (
        {"cxl": "2.0", "switches": {"r": None, "l": {"parent": "r"}}, "host": "r",
         "gpus": {"r": 1}, "cxl_mems": {"l": 1}},
        "need CXL 3.x",
    ),
    "unknown parent": (
        {"switches": {"a": {"parent": "zz"}}, "gpus": {"a": 1}, "cxl_mems": {"a": 1}},
        "unknown parent 'zz'",
    ),
    "unknown key": ({"switches": {"a": None}, "nics": 3}, "unknown key 'nics'"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_impossible_topologies_are_refused_naming_the_problem(case):
    data, message = BAD[case]
    with pytest.raises(ConfigError, match=message):
        topology_from_dict(data)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "0"], "--gpus must be at least 1"),
        (["--cxl-mems", "21"], "leaves a device empty"),
        (["--gpus", "129", "--batch-size", "128"], "each GPU needs at least one"),
        (["--gpus", "2", "--system", "pmem"], "several devices are modelled for"),
        (["--gpus", "2", "--pool-jobs", "2", "--fail-random", "1"], "not for several jobs"),
        (["--cxl-mems", "2", "--pmem-image", "x.img"], "drop it"),
        (["--cxl-mems", "2", "--checkpoint", "cpr"], "paper's protocols"),
        (["--topology", "missing.yaml"], "No such file"),
        (["--pool-jobs", "0"], "--pool-jobs must be at least 1"),
        (["--cxl-mems", "2", "--sample", "10", "--batches", "40"], "simulate every batch"),
        (["--pool-jobs", "2", "--functional"], "trains one job's numerics"),
        (["--pool-jobs", "2", "--topology", "configs/topologies/two_level_4x4.yaml"],
         "1 hosts for --pool-jobs 2"),
        (["--gpus", "2", "--set", "board.rows.x=1"], "unknown parameter path"),
        (["--set", "board.shard0.cxl_mem.pmem.module_capacity=1MiB", "--cxl-mems", "2"],
         "larger than one CXL-MEM"),
    ],
)  # fmt: skip
def test_bad_multi_device_runs_fail_in_one_line(args, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "configs/trainingcxl.py", "--model", "rm1", "--batches", "2",
         "--no-progress", "--outdir", str(tmp_path / "out"), *args],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
