"""Recoveries timed on the device model: the reads and writes a recovery makes run as
streams on a fresh board's devices, its MLPs go to the GPU over the board's links, and
the engine decides how long that takes (and the energy it costs).

A hardware protocol's recovery reads its logs and writes each epoch back in place (a
fence between epochs), on one PMEM or on every CXL-MEM of a cluster at once; a software
policy's reads its checkpoints back from the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.boards.disaggregated import merged
from components.energy import EnergyReport
from components.interconnect.cxl import mmio_write
from components.memory.stages import stage
from components.persistence.cluster import ClusterLayout
from components.persistence.image import COMMIT_NAMES, WORD
from components.persistence.journal import Journal, JournalBuilder, Requests
from components.persistence.protocols import Protocol, Recovery
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from simulate.failures.recording import WriteLog, persist_domain
from simulate.run.configure import connected_board, resolve_functional
from simulate.run.options import RunOptions

REQUEST = 4096  # bytes per request of a large recovery read or write (one DMA burst)


@dataclass
class RecoveryRun:
    """A recovery as the device model ran it: duration, energy, its writes' journal."""

    ticks: int
    energy: float
    journal: Journal
    phases: dict[str, int] = field(default_factory=dict)
    """Ticks each op of the recovery took (its phases, by op name)."""


def requests_covering(offsets: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Addresses of fixed-size requests covering each [offset, offset + size)."""
    if size <= REQUEST:
        return np.asarray(offsets, dtype=np.int64), size
    parts = np.arange(-(-size // REQUEST), dtype=np.int64) * REQUEST
    return (np.asarray(offsets, dtype=np.int64)[:, None] + parts).reshape(-1), REQUEST


def time_protocol_recovery(options: RunOptions, rec: Recovery, protocol: Protocol) -> RecoveryRun:
    """Run one recovery's reads, then each epoch's writes (a fence between epochs), on a
    fresh board's table device, then move the MLPs to the GPU: a small engine run."""
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    if isinstance(protocol.layout, ClusterLayout):
        return time_cluster_recovery(board, engine, scheduler, rec, protocol)
    device = board.table_memory()
    log = WriteLog(device)

    def body(now: int):
        reads = [device.read(*requests_covering(o, s)) for o, s in rec.reads if len(o) and s]
        if reads:
            yield stage(*reads)
        for epoch in rec.epochs:
            writes = [device.write(*requests_covering(g.offsets, g.size)) for g in epoch if g.count]
            if writes:
                yield stage(*writes)

    op = scheduler.op("recovery", "recovery", -1, None, body)
    mlp_bytes = int(rec.mlp.size * 4 * (2 if rec.mlp_acc is not None else 1))
    scheduler.op(
        "recovery_mlp_to_gpu",
        "transfer",
        -1,
        board.to_gpu_resource,
        lambda now: board.to_gpu(mlp_bytes),
        deps=[op],
    )
    engine.run()
    builder = JournalBuilder(protocol.layout, ordered=persist_domain(board) != "adr")
    requests = log.requests()
    builder.add_op(op.record.uid, 0, rec.epochs, requests.get(op.record.uid, Requests.empty()))
    ticks = max(engine.now, 1)
    return RecoveryRun(ticks, EnergyReport.build(board, ticks).total, builder.freeze())


def time_cluster_recovery(board, engine, scheduler, rec: Recovery, protocol) -> RecoveryRun:
    """A cluster's recovery, one op a phase: the coordinator reads its commit words and
    tells every other CXL-MEM over CXL.io what to recover to; every device reads its
    own logs, then writes each epoch, on its own PMEM, all devices at once (an epoch's
    fence waits for every device); then each device's MLP stripe goes to every GPU."""
    layout, shards = protocol.layout, board.shards
    log = WriteLog.of(board, layout)

    def on_device(offsets: np.ndarray, size: int, write: bool):
        m = int(layout.device_at(int(offsets[0])))
        pmem = shards[m].pmem
        base = layout.devices[m].base
        return (pmem.write if write else pmem.read)(*requests_covering(offsets - base, size))

    def notices(now: int):
        words = np.array([layout.commit_offset(COMMIT_NAMES[0])], dtype=np.int64)
        yield stage(shards[0].pmem.read(words, WORD * len(COMMIT_NAMES)))
        told = [
            mmio_write(board.fabric.path("mem0", f"mem{m}"), board.commit_ack_bytes)
            for m in range(1, len(shards))
        ]
        if told:
            yield merged(told)

    op = scheduler.op("recovery_commit", "recovery", -1, None, notices)
    reads = [(o, s) for o, s in rec.reads if len(o) and s]
    op = scheduler.op(
        "recovery_read", "recovery", -1, None,
        lambda now: stage(*[on_device(o, s, False) for o, s in reads]) if reads else 0,
        deps=[op],
    )  # fmt: skip
    epochs = []
    for k, epoch in enumerate(rec.epochs):
        groups = [g for g in epoch if g.count]
        op = scheduler.op(
            f"recovery_epoch{k}", "recovery", -1, None,
            lambda now, gs=groups: stage(*[on_device(g.offsets, g.size, True) for g in gs])
            if gs else 0,
            deps=[op],
        )  # fmt: skip
        epochs.append(op)

    def stripes_to_gpus(now: int):
        return merged(
            shard.cxl_mem.dcoh.flush(board.fabric.path(f"mem{m}", f"gpu{g}"), 4 * count)
            for m, (shard, count) in enumerate(zip(shards, layout.stripes, strict=True))
            for g in board.jobs[0].gpus
        )

    scheduler.op("recovery_mlp_to_gpu", "transfer", -1, None, stripes_to_gpus, deps=[op])
    engine.run()
    builder = JournalBuilder(layout, ordered=persist_domain(board) != "adr")
    requests = log.requests()
    for epoch, op in zip(rec.epochs, epochs, strict=True):
        uid = op.record.uid
        builder.add_op(uid, op.record.start, [epoch], requests.get(uid, Requests.empty()))
    ticks = max(engine.now, 1)
    phases = {r.name: r.end - r.start for r in scheduler.records}
    return RecoveryRun(ticks, EnergyReport.build(board, ticks).total, builder.freeze(), phases)


def time_store_recovery(options: RunOptions, nbytes: int) -> tuple[int, float]:
    """(ticks, joules) of reading ``nbytes`` of checkpoints back on a fresh board
    (nothing to read: nothing to time, the job restarts from its initial weights)."""
    if nbytes == 0:
        return 0, 0.0
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    scheduler.op("recovery", "recovery", -1, None, lambda now: board.ft.recovery(board, nbytes))
    engine.run()
    ticks = max(engine.now, 1)
    return ticks, EnergyReport.build(board, ticks).total
