"""A recorded built-in run as gem5 replay plans (components/gem5/record.py, ops.py),
checked without gem5: the plans replay exactly the recorded requests, every link a
stage used becomes a transfer, and what gem5 will not time (software) is all that is
left as a wait."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from components.gem5.ops import (
    LinearStream,
    TraceStream,
    Unrealizable,
    check_realizable,
    plan_ops,
    region,
)
from components.interconnect.link import SerialLink
from components.memory.stages import concurrent
from components.memory.stages import stage as one_stage
from components.sim.units import TICKS_PER_SECOND
from simulate.run.configure import prepare
from simulate.run.gem5_run import record_builtin, refusal
from simulate.run.options import parse_run_options

SMALL = ["--model", "rmc1", "--rows", "2000", "--batch-size", "8", "--batches", "2"]
SYSTEMS = ["cxl", "cxl-b", "cxl-d", "pcie", "pmem", "dram"]


@cache
def _recorded(system: str, argv: tuple[str, ...] = ()):
    options = parse_run_options(["--system", system, *SMALL, *argv], "test", "")
    board, traces, demands = record_builtin(options)
    return board, traces, plan_ops(board, traces, demands)


def _links(board) -> set[str]:
    return {
        link.resource(d)
        for link in board.descendants()
        if isinstance(link, SerialLink)
        for d in ("up", "down")
    }


def test_the_ssd_system_is_refused_in_one_line():
    _, _, board = prepare(parse_run_options(["--system", "ssd"], "test", ""))
    with pytest.raises(Unrealizable, match="gem5 has no stock SimObject") as refused:
        check_realizable(board)
    assert "\n" not in str(refused.value)
    assert refusal(["--system", "ssd"]).startswith("--system ssd:")
    assert refusal(["--system", "cxl"]) is None
    assert refusal(["--system", "nonsense"]) is None  # the run itself reports bad options


@pytest.mark.parametrize("system", SYSTEMS)
def test_plans_replay_exactly_the_recorded_requests(system):
    board, _, plans = _recorded(system)
    for plan in plans:
        if not plan.realized:
            assert all(not s.streams for s in plan.trace.stages)  # nothing of memory
            continue
        for stage, recorded in zip(plan.stages, plan.trace.stages, strict=True):
            traces = [s for s in stage.streams if isinstance(s, TraceStream)]
            for kind in ("read", "write"):
                ours = sum(
                    r.requests * r.size for r in recorded.streams if r.kind == kind and r.requests
                )
                theirs = sum(int(s.size.sum()) for s in traces if s.write == (kind == "write"))
                assert theirs == ours, (plan.name, kind)
            for stream in traces:
                assert (stream.addr >= 0).all() and (np.diff(stream.ticks) >= 0).all()


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_stage_on_a_link_becomes_one_transfer(system):
    board, _, plans = _recorded(system)
    links = _links(board)
    assert any(plan.realized for plan in plans)
    for plan in plans:
        if not plan.realized:
            continue
        for stage, recorded in zip(plan.stages, plan.trace.stages, strict=True):
            transfers = [s for s in stage.streams if isinstance(s, LinearStream)]
            uses_link = any(resource in links for resource in recorded.needs)
            assert len(transfers) == int(uses_link), (plan.name, recorded.needs)
            for transfer in transfers:
                issuer, target, kind = transfer.route
                assert transfer.start == region(target, kind) and transfer.nbytes > 0


def _waits(system: str, name: str) -> list[int]:
    _, _, plans = _recorded(system)
    return [
        stage.wait for plan in plans if plan.name == name for stage in plan.stages if stage.streams
    ]


@pytest.mark.parametrize("system", ["cxl", "cxl-b", "cxl-d"])
def test_cxl_ops_leave_no_wait_gem5_would_not_time(system):
    """Every latency of a CXL op is memory or link latency, which gem5 times itself."""
    _, _, plans = _recorded(system)
    waits = [stage.wait for plan in plans for stage in plan.stages if stage.streams]
    assert waits and set(waits) == {0}


@pytest.mark.parametrize("system", ["pmem", "dram"])
def test_host_ops_wait_for_software_only(system):
    board, _, _ = _recorded(system)
    launch, memcpy = board.host.op_overhead, board.cuda.memcpy_overhead
    assert set(_waits(system, "lookup")) == {launch}
    assert _waits(system, "update") == [0, launch] * 2  # read + compute, then write back
    assert set(_waits(system, "pooled_to_gpu")) == {memcpy}
    if system == "pmem":
        assert set(_waits(system, "ckpt_persist")) == {launch}


def test_pcie_copies_wait_for_the_cuda_call():
    board, _, _ = _recorded("pcie")
    memcpy = board.cuda.memcpy_overhead
    assert set(_waits("pcie", "pooled_to_gpu")) == {memcpy}  # card -> host, host -> gpu
    assert len(_waits("pcie", "pooled_to_gpu")) == 4


def test_near_memory_streams_keep_their_tags_per_controller():
    board, _, plans = _recorded("cxl")
    pmem = board.pmem
    lookup = next(plan for plan in plans if plan.name == "lookup")
    streams = lookup.stages[0].streams
    assert len(streams) == pmem.controllers
    rows = board.nmp.window(board.layout.row_bytes)
    for stream in streams:
        assert stream.window == rows // pmem.controllers  # 128 B rows: one packet each
        ctrl = (stream.addr // pmem.interleave) % pmem.controllers
        assert (ctrl == ctrl[0]).all()


def test_host_persists_keep_one_fence_group_per_core_in_flight():
    board, _, plans = _recorded("pmem")
    persist = next(plan for plan in plans if plan.name == "ckpt_persist")
    rows, region_, _ = persist.stages
    entries = max(rows.streams, key=lambda s: s.packets)  # the log entries, fenced
    packets_per_entry = entries.packets / len(persist.trace.stages[0].streams[0].addresses)
    group = board.host.cores * board.host.rows_per_fence
    assert entries.window == round(group * packets_per_entry)
    # one persist of the MLP region, written as head, whole chunks and tail (and the
    # record's header): each stream keeps its own window, no fence group
    recorded = [r for r in persist.trace.stages[1].streams if r.requests]
    assert len(recorded) == len(region_.streams) >= 3
    for stream, record in zip(region_.streams, recorded, strict=True):
        per_request = stream.packets / record.requests
        expected = round(record.outstanding * per_request) if record.outstanding else 0
        assert stream.window == expected


def test_a_stopped_mlp_log_slice_replays_what_it_moved():
    # 68 MB of MLPs, and the embedding log contends with the slices for the PMEM
    board, _, plans = _recorded(
        "cxl", ("--model", "rm1", "--batch-size", "32", "--rows", "1000000")
    )
    slices = [plan for plan in plans if plan.name == "mlp_log_slice"]
    stopped = [p for p in slices if p.trace.stages and p.trace.stages[0].progress < 1]
    assert stopped, "the slices of this run should be cut by the top MLP's window"
    for plan in stopped:
        recorded = plan.trace.stages[0]
        writes = [r for r in recorded.streams if r.kind == "write"]  # head, bursts, tail
        reached = sum(r.requests for r in writes)
        assert 0 < reached < sum(r.addresses.size for r in writes)
        pull = next(s for s in plan.stages[0].streams if isinstance(s, LinearStream))
        assert pull.nbytes == sum(r.requests * r.size for r in writes)
        assert recorded.latency == 0  # stopped: the stage's latency never ran


def test_a_stopped_slices_alone_time_is_what_its_writes_take_on_an_idle_device():
    """The slices start while the embedding log keeps the WPQ full, so none of their
    writes is accepted at once; alone, an empty WPQ takes the first queue-full. The
    recorded alone time must be that of the writes the slice got through, priced again
    on a fresh, idle copy of the device (not its progress times the whole stream's)."""
    _, _, plans = _recorded("cxl", ("--model", "rm1", "--batch-size", "32", "--rows", "1000000"))
    stopped = [
        p.trace.stages[0]
        for p in plans
        if p.name == "mlp_log_slice" and p.trace.stages and p.trace.stages[0].progress < 1
    ]
    assert stopped
    for recorded in stopped:
        writes = [r for r in recorded.streams if r.kind == "write" and r.requests]
        device = writes[0].device
        idle = type(device)(**{key: device._param_raw[key] for key in device._params})
        streams = [idle.write(r.addresses[: r.requests], r.size, r.outstanding) for r in writes]
        fresh = one_stage(concurrent(*streams))
        expected = max(flow.alone_ticks for flow in fresh.flows)
        # the recorded figure scales each controller's writes by the stage's progress (a
        # fluid share); the prefix re-priced here holds whole requests, which spread
        # over the controllers unevenly by up to one request on the busiest: one
        # request's media time bounds the difference
        request = max(r.size for r in writes) * TICKS_PER_SECOND / device.ctrl_write_bandwidth
        assert abs(recorded.alone - expected) <= request


@pytest.mark.parametrize("system", ["cxl", "pmem"])
def test_recorded_dependencies_are_what_the_schedule_obeyed(system):
    _, traces, _ = _recorded(system)
    for trace in traces.values():
        for dep in trace.deps:
            assert traces[dep].record.end <= trace.record.start
        if trace.start_with is not None:
            assert traces[trace.start_with].record.start <= trace.record.start
        if trace.created_after is not None:
            assert trace.record.batch > 0
            assert traces[trace.created_after].record.end <= trace.record.start
