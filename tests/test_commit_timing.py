"""One consistent checkpoint across devices: the commit's timing and the order it imposes.

The commit op's duration alone is derived from the link, switch and PMEM parameters;
the ordering rules are checked on recorded 2 x 2 runs, and a board without one of them
is shown to break its property (the check can fail).
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from components.boards.base import BatchOps
from components.boards.cxl import CxlBBoard, CxlBoard, CxlDBoard
from components.boards.disaggregated import DisaggregatedBoard
from components.interconnect.cxl import TLP_HEADER_BYTES
from components.interconnect.topology import TopologySpec, topology_from_dict
from components.sim.engine import Engine
from components.sim.schedule import Op, Scheduler
from components.sim.units import TICKS_PER_SECOND
from simulate.run.host import drive_batches
from workloads.inputs import InputGenerator
from workloads.models import get_model

BOARDS = {"cxl-d": CxlDBoard, "cxl-b": CxlBBoard, "cxl": CxlBoard}
DURABLE = {"cxl-d": ("ckpt_log",), "cxl-b": ("emb_log", "mlp_log"), "cxl": ("emb_log",)}


def connected(board: DisaggregatedBoard, model: str = "rmc1") -> DisaggregatedBoard:
    engine = Engine()
    board.connect(engine, Scheduler(engine), get_model(model), 128)
    return board


def recorded(board: DisaggregatedBoard, batches: int, model: str = "rmc1") -> list:
    """The op records of ``batches`` batches on ``board``, run to the end."""
    engine = Engine()
    scheduler = Scheduler(engine)
    spec = get_model(model)
    board.connect(engine, scheduler, spec, 128)
    drive_batches(engine, board, spec, InputGenerator(spec, 128, seed=3), range(batches))
    return scheduler.records


def by_batch(records, name: str) -> dict[int, list]:
    out = defaultdict(list)
    for record in records:
        if record.name == name:
            out[record.batch].append(record)
    return out


# ----- the commit op alone ----------------------------------------------------------------
def ack_ticks(link, switch, links: int, switches: int, ack_bytes: int) -> int:
    """A posted CXL.io write alone: its flits serialized once (links forward them as
    they arrive: every link here is alike), each link's propagation, each switch's
    port latency."""
    payload = link.flit_bytes - link.flit_overhead_bytes
    flits = math.ceil((TLP_HEADER_BYTES + ack_bytes) / payload)
    raw = link.lanes * link.lane_rate * 1e9 / 8 * link.encoding_efficiency
    serialization = math.ceil(flits * link.flit_bytes * TICKS_PER_SECOND / raw)
    return serialization + links * link.propagation_latency + switches * switch.port_latency


def commit_alone(board: DisaggregatedBoard) -> int:
    board.commit(board.jobs[0], "commit", 0, "commit", [])
    board.engine.run()
    (record,) = [r for r in board.scheduler.records if r.name == "commit"]
    return record.end - record.start


def test_an_idle_commit_takes_the_ack_path_then_the_word_write():
    """2 x 2 under one switch: CXL-MEM 1's acknowledgement crosses its link, the switch
    and CXL-MEM 0's link; then the 8 B word is accepted by CXL-MEM 0's empty WPQ after
    the PMEM's write latency (the persistence point under ADR)."""
    board = connected(DisaggregatedBoard(CxlBBoard, TopologySpec.single_switch(2, 2)))
    link, switch = board.shards[1].cxl_mem.link, board.switch0
    pmem = board.shards[0].pmem
    expected = ack_ticks(link, switch, 2, 1, board.commit_ack_bytes) + pmem.write_latency
    assert commit_alone(board) == pytest.approx(expected, abs=2)
    assert board.commitAckBytes.value == TLP_HEADER_BYTES + board.commit_ack_bytes


def test_a_two_level_tree_adds_the_uplink_and_the_second_switch_to_the_ack():
    """CXL-MEM 0 under the root, CXL-MEM 1 under a leaf: the ack also crosses the leaf's
    uplink and a second switch."""
    topology = topology_from_dict(
        {"switches": {"root": None, "leaf": {"parent": "root"}}, "host": "root",
         "gpus": {"root": 2}, "cxl_mems": {"root": 1, "leaf": 1}}
    )  # fmt: skip
    board = connected(DisaggregatedBoard(CxlBBoard, topology))
    link, switch = board.shards[1].cxl_mem.link, board.root
    pmem = board.shards[0].pmem
    expected = ack_ticks(link, switch, 3, 2, board.commit_ack_bytes) + pmem.write_latency
    one_switch = ack_ticks(link, switch, 2, 1, board.commit_ack_bytes) + pmem.write_latency
    assert commit_alone(board) == pytest.approx(expected, abs=2)
    assert expected - one_switch == link.propagation_latency + switch.port_latency
    assert board.commitSwitchedBytes.value == 2 * (TLP_HEADER_BYTES + board.commit_ack_bytes)


def test_one_cxl_mem_acknowledges_itself_locally():
    board = connected(DisaggregatedBoard(CxlDBoard, TopologySpec.single_switch(2, 1)))
    assert commit_alone(board) == board.shards[0].pmem.write_latency
    assert board.commitAckBytes.value == 0


def test_the_commit_word_is_the_coordinators_in_each_pooled_jobs_partition():
    board = connected(
        DisaggregatedBoard(CxlBBoard, TopologySpec.single_switch(2, 2, hosts=2), jobs=2)
    )
    words = []
    for job in board.jobs:
        layout = job.shards[0].layout
        assert layout.commit and not job.shards[1].layout.commit
        words.append(layout.commit_offset("commit"))
        assert layout.base <= words[-1] < layout.base + layout.size
    assert words[1] - words[0] == board.jobs[0].shards[0].layout.size


# ----- the order the commit imposes -------------------------------------------------------
def check_order(system: str, records) -> None:
    """Rules 1 and 2 on every batch: the commit of N after every shard's logs of N; a
    redo update of N after the commit of N; a log overwriting slot N % 2 after the
    commit of N-1."""
    commits = {batch: r for batch, (r,) in by_batch(records, "commit").items()}
    assert sorted(commits) == list(range(len(commits)))
    for name in DURABLE[system]:
        for batch, logs in by_batch(records, name).items():
            assert len(logs) == 2
            assert commits[batch].start >= max(log.end for log in logs), (name, batch)
            if batch > 0:
                assert min(log.start for log in logs) >= commits[batch - 1].end, (name, batch)
    if system == "cxl-d":
        for batch, updates in by_batch(records, "update").items():
            assert min(u.start for u in updates) >= commits[batch].end, batch


@pytest.mark.parametrize("system", sorted(BOARDS))
def test_every_batch_commits_after_every_device_logged_it(system):
    records = recorded(DisaggregatedBoard(BOARDS[system], TopologySpec.single_switch(2, 2)), 5)
    check_order(system, records)


class ApplyBeforeCommit(DisaggregatedBoard):
    """A mutant: redo updates in place once its own device logged the batch."""

    def update_commit_deps(self, ops: BatchOps, commit: Op) -> list[Op]:
        return []


def test_a_redo_board_applying_before_the_commit_breaks_the_order():
    records = recorded(ApplyBeforeCommit(CxlDBoard, TopologySpec.single_switch(2, 2)), 3)
    with pytest.raises(AssertionError):
        check_order("cxl-d", records)


def test_relaxed_copies_start_together_and_overwrite_a_slot_only_once_committed():
    """Every shard snapshots at the same batches; each copy is committed once, after the
    last slice of every shard; the next copy's snapshot and slices come after that."""
    records = recorded(DisaggregatedBoard(CxlBoard, TopologySpec.single_switch(2, 2)), 10)
    snapshots = by_batch(records, "mlp_snapshot")
    assert all(len(ops) == 2 for ops in snapshots.values())
    starts = sorted(snapshots)
    commits = sorted((r for r in records if r.name == "mlp_commit"), key=lambda r: r.start)
    assert len(commits) >= 3 and len(starts) >= len(commits)
    slices = [r for r in records if r.name == "mlp_log_slice"]
    for copy, commit in enumerate(commits):
        own = [s for s in slices if starts[copy] <= s.batch <= commit.batch]
        assert {s.resource for s in own} == {"cxl_mem0.ckpt_mlp", "cxl_mem1.ckpt_mlp"}
        assert commit.start >= max(s.end for s in own)
        if copy + 1 < len(starts):
            following = starts[copy + 1]
            assert min(r.start for r in snapshots[following]) >= commit.end
            assert min(s.start for s in slices if s.batch >= following) >= commit.end
