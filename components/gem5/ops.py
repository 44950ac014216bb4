"""A recorded run's memory ops as gem5 replay plans (pure: no m5).

Each op the built-in engine ran (components/gem5/record.py) becomes a list of stages;
each stage a set of streams that gem5 runs side by side, then a wait:

- memory streams: the requests a memory device was asked to time, replayed packet by
  packet (TraceGen): the same addresses, sizes and order, split at the device's line
  boundaries (as its controller splits them), the requester's window in packets, and
  paced by the stage's arithmetic when that is slower than the memory (the engine
  streams rows through its adders). Writes are issued through a crossbar that delays
  their acknowledgement to our write latency (translate.py).
- transfers: the op's bytes over its links (LinearGen), by message class: a DCOH
  flush or read over CXL.cache (window: the DCOH's trackers), a CXL.io write, or a
  cudaMemcpy leg over PCIe (paced at the copy engine's rate).
- wait: what the stage spends outside the memory system (software: a framework op
  launch, a cudaMemcpy call, a synchronization), i.e. its latency minus the latency
  of the traffic gem5 itself times.

Ops without memory traffic (GPU kernels, bookkeeping) keep no stages: the concurrent
replay gives them their built-in duration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from components.boards.base import index_payload
from components.gem5 import translate as tr
from components.gem5.record import OpTrace, StageRecord, StreamRecord
from components.gem5.trace import split_lines
from components.interconnect.cxl import HEADER_BITS, LINE_BYTES
from components.interconnect.link import SerialLink
from components.persistence.image import RECORD_HEADER
from components.sim.params import ConfigError
from components.sim.units import TICKS_PER_SECOND

REGION_BASE = 1 << 44  # transfer targets: one region per (side, message class)
REGION_SPAN = 1 << 36
SIDES = ("mem", "gpu", "host")
CLASSES = ("flush", "read", "mmio", "copy")


def region(side: str, kind: str) -> int:
    """Base address of the memory on ``side`` that ``kind`` transfers target."""
    return REGION_BASE + (SIDES.index(side) * len(CLASSES) + CLASSES.index(kind)) * REGION_SPAN


@dataclass(frozen=True)
class TraceStream:
    """A memory stream replayed packet by packet (``ticks``: earliest issue of each
    packet after the stream starts)."""

    side: str
    write: bool
    window: int  # packets in flight; 0: unlimited
    addr: np.ndarray
    size: np.ndarray
    ticks: np.ndarray

    @property
    def packets(self) -> int:
        return int(self.addr.size)


@dataclass(frozen=True)
class LinearStream:
    """A transfer: ``nbytes`` swept in 64 B packets from ``start``."""

    side: str
    write: bool
    window: int
    start: int
    nbytes: int
    period: int  # ticks between packets (0: back to back)
    route: tuple[str, str, str]  # (issuer side, target side, message class)
    delay: int = 0  # ticks before the first packet (a handshake gem5's write lacks)

    @property
    def packets(self) -> int:
        return -(-self.nbytes // LINE_BYTES)


@dataclass
class StagePlan:
    streams: list[TraceStream | LinearStream]
    wait: int  # ticks after the traffic (software), or the whole stage without traffic
    builtin_alone: int


@dataclass
class OpPlan:
    """One op: its built-in record and its stages in gem5 terms."""

    trace: OpTrace
    stages: list[StagePlan] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.trace.record.name

    @property
    def batch(self) -> int:
        return self.trace.record.batch

    @property
    def realized(self) -> bool:
        """Whether gem5 runs it (it has memory traffic); the rest keep their built-in time."""
        return any(stage.streams for stage in self.stages)


@dataclass(frozen=True)
class Leg:
    """One transfer of an op: who issues it, where to, which message class."""

    issuer: str
    target: str
    kind: str


class Unrealizable(ConfigError):
    """A configuration gem5's stock SimObjects cannot model (said in one line)."""


def check_realizable(board) -> None:
    """Refuse, in one line, what this realization cannot model."""
    kind = type(board.table_memory()).__name__
    if kind not in ("Pmem", "Dram"):
        raise Unrealizable(
            f"--system {board.system}: gem5 has no stock SimObject for its tables' {kind} "
            "(its memory controllers model DRAM and NVM only); this system runs on the "
            "built-in engine only"
        )


def engine_side(board) -> str:
    """Where the requests to the tables come from: the device's engine or the host CPU."""
    return "mem" if hasattr(board, "nmp") else "host"


# ----- the plan --------------------------------------------------------------------------
def plan_ops(board, traces: dict[int, OpTrace], demands: dict[int, object]) -> list[OpPlan]:
    """Replay plans of every op, in creation order (those without memory traffic keep
    no stages: gem5 gives them their built-in duration)."""
    check_realizable(board)
    links = _link_resources(board)
    plans = []
    for trace in sorted(traces.values(), key=lambda t: t.record.uid):
        legs = list(_legs(board, trace.record.name))
        plan = OpPlan(trace)
        for stage in trace.stages:
            uses_links = any(resource in links for resource in stage.needs)
            leg = None
            if uses_links:
                if not legs:
                    raise Unrealizable(
                        f"{board.system}: no gem5 realization of the transfer in "
                        f"{trace.record.name}"
                    )
                leg = legs.pop(0)
            demand = demands[trace.record.batch]
            plan.stages.append(_stage_plan(board, trace.record.name, stage, leg, demand))
        if not plan.realized:
            plan.stages = []
        plans.append(plan)
    return plans


def _stage_plan(board, op: str, stage: StageRecord, leg: Leg | None, demand) -> StagePlan:
    streams: list[TraceStream | LinearStream] = []
    compute = _compute_ticks(board, stage)
    for record in stage.streams:
        if record.requests:
            streams += _memory_streams(board, op, stage, record, compute)
    modelled = _memory_latency(stage)
    if leg is not None:
        transfer = _transfer(board, leg, _leg_bytes(board, op, stage, demand))
        streams.append(transfer)
        modelled += transfer_latency(board, leg)
    if not streams:  # a software step (a synchronization) or arithmetic alone
        return StagePlan([], stage.alone, stage.alone)
    return StagePlan(streams, max(stage.latency - modelled, 0), stage.alone)


def _memory_streams(
    board, op: str, stage: StageRecord, record: StreamRecord, compute: float
) -> list[TraceStream]:
    """A device stream as packets. The near-memory engine keeps its tags per controller
    (64 each), so its streams split into one per controller and a full controller
    queue holds up only its own requests; the host's fill buffers are one pool, so its
    streams stay whole, with a fence group's rows as the window of a fenced persist."""
    device = record.device
    addresses = record.addresses[: record.requests]
    packets = split_lines(addresses, record.size, device.access_unit)
    per_request = len(packets) / addresses.size
    ticks = np.zeros(len(packets), dtype=np.int64)
    if compute > 0:
        ticks = np.floor(packets.request * (compute / addresses.size)).astype(np.int64)
    write = record.kind == "write"
    side = engine_side(board)
    if side == "host":
        rows = _fence_group(board, stage, record) or record.outstanding or 0
        window = max(round(rows * per_request), 1) if rows else 0
        return [TraceStream(side, write, window, packets.addr, packets.size, ticks)]
    ctrls = device.controllers
    window = math.ceil(record.outstanding * per_request / ctrls) if record.outstanding else 0
    ctrl = (packets.addr // device.interleave) % ctrls
    return [
        TraceStream(side, write, window, packets.addr[mine], packets.size[mine], ticks[mine])
        for mine in (ctrl == c for c in range(ctrls))
        if mine.any()
    ]


def _fence_group(board, stage: StageRecord, record: StreamRecord) -> int:
    """Requests a host write stream keeps in flight when it is persisted by a chain of
    fences, each waiting for its rows' acknowledgement (components/compute/host.py):
    one fence group per core. The chain shows as a bound on the stage beyond what the
    windows of all its streams impose (a region written as head, bursts and tail is
    three streams); 0 when there is none."""
    if record.kind != "write" or not record.outstanding:
        return 0
    windows = [_window_bound(other) for other in stage.streams]
    if stage.min_ticks <= max(windows, default=0.0) * (1 + 1e-9) + 1:
        return 0
    return board.host.cores * board.host.rows_per_fence


def _window_bound(record: StreamRecord) -> float:
    """The bound a stream's own window puts on its stage (MemoryDevice._window_ticks)."""
    if not record.outstanding or not record.requests:
        return 0.0
    device = record.device
    latency = device.write_latency if record.kind == "write" else device.read_latency
    return device._window_ticks(record.requests, latency, record.outstanding)


def _compute_ticks(board, stage: StageRecord) -> float:
    """The stage's arithmetic alone (its compute resource's need), which paces its
    requests: anything that is neither a memory controller, a link nor a DCOH."""
    memory = _memory_resources(board)
    links = _link_resources(board)
    dcohs = {obj.path for obj in board.descendants() if type(obj).__name__ == "Dcoh"}
    compute = [
        need
        for resource, need in stage.needs.items()
        if resource not in memory and resource not in links and resource not in dcohs
    ]
    return max(compute, default=0.0)


def _memory_latency(stage: StageRecord) -> int:
    """The first request's latency the built-in engine adds for the stage's memory
    streams (components/memory/base.py: a read's latency less one line's service, a
    write's until its acceptance; a stage's read and write groups in sequence)."""
    total = 0
    kinds = {}
    for record in stage.streams:
        if record.requests:
            kinds.setdefault(record.kind, record.device)
    if "read" in kinds:
        device = kinds["read"]
        service = device.access_unit * TICKS_PER_SECOND / device.ctrl_read_bandwidth
        total += max(math.floor(device.read_latency - service), 0)
    if "write" in kinds:
        total += kinds["write"].write_latency
    return total


def sampled(plans: list[OpPlan], packets: int) -> list[OpPlan]:
    """The same plans with every stream thinned to at most ``packets`` evenly spaced
    packets: a run that exercises every op, device and route of a configuration in
    gem5 at a fraction of the cost (its durations mean nothing)."""
    out = []
    for plan in plans:
        stages = []
        for stage in plan.stages:
            streams = []
            for stream in stage.streams:
                if isinstance(stream, TraceStream) and stream.packets > packets:
                    keep = np.linspace(0, stream.packets - 1, packets).astype(np.int64)
                    stream = replace(
                        stream,
                        addr=stream.addr[keep],
                        size=stream.size[keep],
                        ticks=stream.ticks[keep] * 0,
                    )
                elif isinstance(stream, LinearStream):
                    stream = replace(stream, nbytes=min(stream.nbytes, packets * LINE_BYTES))
                streams.append(stream)
            stages.append(replace(stage, streams=streams))
        out.append(replace(plan, stages=stages))
    return out


# ----- transfers -------------------------------------------------------------------------
def _legs(board, op: str) -> list[Leg]:
    """The transfers of an op, one per stage that uses a link, in order."""
    if hasattr(board, "cxl_switch"):
        table = {
            "indices": [Leg("host", "mem", "mmio")],
            "pooled_to_gpu": [Leg("mem", "gpu", "flush")],
            "grads_to_mem": [Leg("gpu", "mem", "flush")],
        }
        return table.get(op, [Leg("mem", "gpu", "read")])  # a log pulls the MLPs
    if board.system == "pcie":
        table = {
            "indices": [Leg("host", "mem", "copy")],
            "pooled_to_gpu": [Leg("mem", "host", "copy"), Leg("host", "gpu", "copy")],
            "grads_to_mem": [Leg("gpu", "host", "copy"), Leg("host", "mem", "copy")],
            "ckpt_mlp_pull": [Leg("gpu", "host", "copy")],
        }
        return table.get(op, [Leg("host", "mem", "copy")])  # the redo log's inbound MLPs
    table = {
        "pooled_to_gpu": [Leg("host", "gpu", "copy")],
        "grads_to_mem": [Leg("gpu", "host", "copy")],
        "ckpt_mlp_pull": [Leg("gpu", "host", "copy")],
    }
    return table.get(op, [])


def _leg_bytes(board, op: str, stage: StageRecord, demand) -> int:
    """Bytes an op's transfer moves: the batch's indices, pooled vectors, gradients or
    MLP parameters; a log's pull moves what the stage writes into the MLP log."""
    lookup = demand.lookup
    if op == "indices":
        payload = index_payload(demand, board.index_bytes)
        return tr.mmio_bytes(payload) if hasattr(board, "cxl_switch") else payload
    sizes = {
        "pooled_to_gpu": lookup.pooled_bytes,
        "grads_to_mem": lookup.grad_bytes,
        "ckpt_mlp_pull": demand.mlp_param_bytes,
    }
    if op in sizes:
        return sizes[op]
    return _mlp_log_bytes(board, stage)


def _mlp_log_bytes(board, stage: StageRecord) -> int:
    layout = board.layout
    total = 0
    for record in stage.streams:
        if record.kind != "write":
            continue
        addresses = record.addresses[: record.requests]
        for slot in (0, 1):
            start = layout.mlp_offset(slot)
            end = start - RECORD_HEADER + layout.regions()[f"mlp{slot}"][1]
            inside = (addresses >= start) & (addresses < end)
            total += int(inside.sum()) * record.size
    if total == 0:
        raise Unrealizable("a stage moves data over a link but writes no MLP log")
    return total


def _transfer(board, leg: Leg, nbytes: int) -> LinearStream:
    window, period, delay = 0, 0, 0
    if leg.kind in ("flush", "read"):
        window = _dcoh(board, leg).max_outstanding
    if leg.kind == "flush":  # DirtyEvict out, GO_WritePull back, then the data
        delay = board.cxl_path(leg.issuer, leg.target).one_way_ticks(_header("D2H Req"))
    elif leg.kind == "copy":
        link = hops(board, leg.issuer, leg.target)[0][0]
        period = tr.period_for(link.effective_bandwidth * board.cuda.dma_efficiency)
    return LinearStream(
        leg.issuer,
        leg.kind != "read",
        window,
        region(leg.target, leg.kind),
        nbytes,
        period,
        (leg.issuer, leg.target, leg.kind),
        delay,
    )


def _header(message: str) -> int:
    return math.ceil(HEADER_BITS[message] / 8)


def _dcoh(board, leg: Leg):
    return (board.cxl_mem if leg.issuer == "mem" else board.cxl_gpu).dcoh


def transfer_latency(board, leg: Leg) -> int:
    """The first line's latency the built-in engine adds for a transfer (mirrors
    components/interconnect/cxl.py and pcie.py): a DCOH stream's first round trip less
    its own tracker share, a posted CXL.io write's one-way latency, a copy's propagation."""
    if leg.kind == "copy":
        return hops(board, leg.issuer, leg.target)[0][0].propagation_latency
    path = board.cxl_path(leg.issuer, leg.target)
    if leg.kind == "mmio":
        return path.one_way_ticks(0)
    req = _header("D2H Req")
    if leg.kind == "flush":
        data = _header("D2H Data") + LINE_BYTES
        first = path.round_trip_ticks(req, _header("H2D Rsp")) + path.one_way_ticks(data)
    else:
        first = path.round_trip_ticks(req, _header("H2D Data") + LINE_BYTES)
    return math.ceil(first - first / _dcoh(board, leg).max_outstanding)


def hops(board, issuer: str, target: str) -> list[tuple[SerialLink, str]]:
    """The links (and directions) from one side to another."""
    if hasattr(board, "cxl_switch"):
        return list(board.cxl_path(issuer, target).hops)
    if board.system == "pcie":
        pairs = {
            ("mem", "host"): (board.card_link, "up"),
            ("host", "mem"): (board.card_link, "down"),
            ("host", "gpu"): (board.pcie, "down"),
            ("gpu", "host"): (board.pcie, "up"),
        }
    else:
        pairs = {("host", "gpu"): (board.pcie, "down"), ("gpu", "host"): (board.pcie, "up")}
    return [pairs[(issuer, target)]]


def _link_resources(board) -> set[str]:
    return {
        link.resource(direction)
        for link in board.descendants()
        if isinstance(link, SerialLink)
        for direction in ("up", "down")
    }


def _memory_resources(board) -> set[str]:
    device = board.table_memory()
    return {device.resource(c) for c in range(device.controllers)}
