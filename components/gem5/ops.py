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

A disaggregated board's ops are planned flow by flow (``_fabric_transfers``): each
CXL-MEM's table streams on its own side (``mem{m}``) and address range, one transfer
per flow of a stage along ``Fabric.path`` (pooled vectors to every GPU, gradients to
every CXL-MEM, the ring all-reduce's peer-to-peer CXL.mem writes).
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
FABRIC_BASE = REGION_BASE + (1 << 42)  # a disaggregated board's endpoints (gpu{g}, mem{m})
FABRIC_CLASSES = (*CLASSES, "memwr")  # memwr: a peer-to-peer CXL.mem write (all-reduce)


def region(side: str, kind: str) -> int:
    """Base address of the memory on ``side`` that ``kind`` transfers target."""
    if side in SIDES and kind in CLASSES:
        return REGION_BASE + (SIDES.index(side) * len(CLASSES) + CLASSES.index(kind)) * REGION_SPAN
    slot = _endpoint_slot(side) * len(FABRIC_CLASSES) + FABRIC_CLASSES.index(kind)
    return FABRIC_BASE + slot * REGION_SPAN


def _endpoint_slot(side: str) -> int:
    """host 0, mem{m} 1 + 2m, gpu{g} 2 + 2g: every fabric endpoint its own regions."""
    if side == "host":
        return 0
    kind, index = side[:3], int(side[3:])
    return (1 if kind == "mem" else 2) + 2 * index


def multi_device(board) -> bool:
    """A disaggregated board (components/boards/disaggregated.py): its CXL-MEMs are shards."""
    return hasattr(board, "shards")


@dataclass(frozen=True)
class ShardedBatch:
    """A disaggregated board's batch: the whole demand and each CXL-MEM's part of it."""

    whole: object
    parts: tuple


def table_devices(board) -> list[tuple[str, object, int]]:
    """(requester side, device, base address) of each memory holding tables: one on a
    single-device board (at 0), one per CXL-MEM on a disaggregated one, each at its own
    base (a power of two at least every device's span, so interleaving bits agree)."""
    if not multi_device(board):
        return [(engine_side(board), board.table_memory(), 0)]
    devices = [shard.table_memory() for shard in board.shards]
    span = max(tr.memory_span(d.capacity, d.controllers, d.interleave) for d in devices)
    if span * len(devices) > REGION_BASE:
        raise Unrealizable(
            f"{len(devices)} CXL-MEMs of {span:,} B do not fit below the transfer regions"
        )
    return [(f"mem{m}", device, m * span) for m, device in enumerate(devices)]


def _device_place(board, device) -> tuple[str, int]:
    """The requester side and base address of a table memory."""
    return next((side, base) for side, d, base in table_devices(board) if d is device)


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
    memory = board.shards[0].table_memory() if multi_device(board) else board.table_memory()
    kind = type(memory).__name__
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
        legs = [] if multi_device(board) else list(_legs(board, trace.record.name))
        plan = OpPlan(trace)
        for stage in trace.stages:
            demand = demands[trace.record.batch]
            transfers = []
            if any(resource in links for resource in stage.needs):
                if multi_device(board):
                    transfers = _fabric_transfers(board, trace, stage, demand)
                elif legs:
                    leg = legs.pop(0)
                    transfers = [(leg, _leg_bytes(board, trace.record.name, stage, demand))]
                else:
                    raise Unrealizable(
                        f"{board.system}: no gem5 realization of the transfer in "
                        f"{trace.record.name}"
                    )
            plan.stages.append(_stage_plan(board, trace.record.name, stage, transfers))
        if not plan.realized:
            plan.stages = []
        plans.append(plan)
    return plans


def _stage_plan(board, op: str, stage: StageRecord, transfers: list[tuple[Leg, int]]) -> StagePlan:
    """A stage's memory streams and transfers; transfers a DCOH runs together share its
    trackers (each gets its share of the bytes), and the stage's latency keeps the
    longest first line, as the built-in engine merges them."""
    streams: list[TraceStream | LinearStream] = []
    compute = _compute_ticks(board, stage)
    for record in stage.streams:
        if record.requests:
            streams += _memory_streams(board, op, stage, record, compute)
    modelled = _memory_latency(stage)
    if transfers:
        issued = {}
        for leg, nbytes in transfers:
            issued[leg.issuer] = issued.get(leg.issuer, 0) + nbytes
        for leg, nbytes in transfers:
            share = nbytes / issued[leg.issuer] if issued[leg.issuer] else 1.0
            streams.append(_transfer(board, leg, nbytes, share))
        modelled += max(transfer_latency(board, leg) for leg, _ in transfers)
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
    side, base = _device_place(board, device)
    if base:
        packets = replace(packets, addr=packets.addr + base)
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


def _fabric_transfers(
    board, trace: OpTrace, stage: StageRecord, batch: ShardedBatch
) -> list[tuple[Leg, int]]:
    """A disaggregated board's transfers of one stage and their bytes, flow by flow as
    components/boards/disaggregated.py issues them: the host's indices to one CXL-MEM,
    its pooled vectors to every GPU, each GPU's gradients to every CXL-MEM, the ring
    all-reduce (each GPU to the next), every CXL-MEM's commit acknowledgement to CXL-MEM
    0 (a posted CXL.io write), and a shard's MLP-log pull from its GPU."""
    op, gpus = trace.record.name, board.gpu_count
    whole, row = batch.whole, board.spec.row_bytes
    sizes = whole.gpu_batch_sizes if gpus > 1 else [whole.batch_size]
    if op == "allreduce":
        chunk = math.ceil(whole.mlp_param_bytes / gpus)
        steps = 2 * (gpus - 1) * chunk
        return [(Leg(f"gpu{g}", f"gpu{(g + 1) % gpus}", "memwr"), steps) for g in range(gpus)]
    if op == "grads_to_mem":
        g = int(trace.record.resource.split(".")[0].removeprefix("cxl_gpu"))
        return [
            (Leg(f"gpu{g}", f"mem{m}", "flush"), sizes[g] * board.placement.pooled_tables(m) * row)
            for m in range(len(board.shards))
        ]
    if op.rpartition(".")[2] in ("commit", "mlp_commit"):  # acknowledgements to CXL-MEM 0
        ack = tr.mmio_bytes(board.commit_ack_bytes)
        return [(Leg(f"mem{m}", "mem0", "mmio"), ack) for m in range(1, len(board.shards))]
    m = _shard_of(board, trace, stage)
    if op == "indices":
        payload = index_payload(batch.parts[m], board.index_bytes)
        return [(Leg("host", f"mem{m}", "mmio"), tr.mmio_bytes(payload))]
    if op == "pooled_to_gpu":
        per_sample = board.placement.pooled_tables(m) * row
        return [(Leg(f"mem{m}", f"gpu{g}", "flush"), n * per_sample) for g, n in enumerate(sizes)]
    source = f"gpu{m % gpus}"  # a log pulls its stripe of the MLPs (a CXL.cache read)
    return [(Leg(f"mem{m}", source, "read"), _mlp_log_bytes(board.shards[m], stage))]


def _shard_of(board, trace: OpTrace, stage: StageRecord) -> int:
    """The CXL-MEM an op belongs to: its unit (``cxl_mem{m}.*``), else the links it uses."""
    unit = trace.record.resource or ""
    for m, shard in enumerate(board.shards):
        if unit.startswith(f"cxl_mem{m}.") or any(
            resource.startswith(f"{shard.path}.") for resource in stage.needs
        ):
            return m
    raise Unrealizable(f"no CXL-MEM owns the transfer in {trace.record.name}")


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


def _transfer(board, leg: Leg, nbytes: int, share: float = 1.0) -> LinearStream:
    """A leg as a LinearGen: a DCOH stream gets ``share`` of its trackers (those it
    shares with the issuer's other legs of the stage), a CXL.mem write its own."""
    window, period, delay = 0, 0, 0
    if leg.kind in ("flush", "read"):
        window = max(round(_dcoh(board, leg).max_outstanding * share), 1)
    elif leg.kind == "memwr":
        window = _dcoh(board, leg).max_outstanding
    if leg.kind == "flush":  # DirtyEvict out, GO_WritePull back, then the data
        delay = _path(board, leg.issuer, leg.target).one_way_ticks(_header("D2H Req"))
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
    if multi_device(board):
        index = int(leg.issuer[3:])
        device = board.shards[index].cxl_mem if leg.issuer[:3] == "mem" else board.cxl_gpus[index]
        return device.dcoh
    return (board.cxl_mem if leg.issuer == "mem" else board.cxl_gpu).dcoh


def _path(board, issuer: str, target: str):
    """The CXL path between two sides (a disaggregated board's: through its fabric)."""
    if multi_device(board):
        return board.fabric.path(issuer, target)
    return board.cxl_path(issuer, target)


def gpu_of(board, side: str):
    """The GPU on a side (``gpu`` or ``gpu{g}``)."""
    return board.gpus[int(side[3:])] if multi_device(board) else board.gpu


def transfer_latency(board, leg: Leg) -> int:
    """The first line's latency the built-in engine adds for a transfer (mirrors
    components/interconnect/cxl.py and pcie.py): a DCOH stream's first round trip less
    its own tracker share, a posted CXL.io write's one-way latency, a copy's propagation."""
    if leg.kind == "copy":
        return hops(board, leg.issuer, leg.target)[0][0].propagation_latency
    path = _path(board, leg.issuer, leg.target)
    if leg.kind == "mmio":
        return path.one_way_ticks(0)
    if leg.kind == "memwr":  # a peer's own window: the first line's whole round trip
        return path.round_trip_ticks(_header("M2S RwD") + LINE_BYTES, _header("S2M NDR"))
    req = _header("D2H Req")
    if leg.kind == "flush":
        data = _header("D2H Data") + LINE_BYTES
        first = path.round_trip_ticks(req, _header("H2D Rsp")) + path.one_way_ticks(data)
    else:
        first = path.round_trip_ticks(req, _header("H2D Data") + LINE_BYTES)
    return math.ceil(first - first / _dcoh(board, leg).max_outstanding)


def hops(board, issuer: str, target: str) -> list[tuple[SerialLink, str]]:
    """The links (and directions) from one side to another."""
    if multi_device(board):
        return list(board.fabric.path(issuer, target).hops)
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


def switches(board, issuer: str, target: str) -> tuple:
    """The switches a transfer crosses, in order (none on the PCIe and host systems)."""
    if multi_device(board) or hasattr(board, "cxl_switch"):
        return tuple(_path(board, issuer, target).switches)
    return ()


def _memory_resources(board) -> set[str]:
    return {
        device.resource(c)
        for _, device, _ in table_devices(board)
        for c in range(device.controllers)
    }
