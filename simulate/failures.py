"""Power failures injected into a run: cut, recover (timed), resume, judge.

One recorded run of the options (simulate/recording.py) is both the failure-free
reference and the run whose stats are reported. A failure at global tick T cuts the
current stretch's journal at T (the timing's own persist order: a write spanning
several requests is torn at their boundaries), the system's recovery runs on the
surviving image and is itself timed on the device model (its reads and writes are
streams on a fresh board's table device, its MLPs go to the GPU over the board's link,
the engine decides how long that takes); a failure during recovery keeps what the
recovery's own journal made durable by then, and recovery starts over. Training
resumes from the recovered batch on a fresh board until the requested batch count or
the next failure. Ticks are global: a resumed stretch starts when its recovery ended.

The image can also outlive the process: with ``--halt-on-failure`` the run stops at its
first failure and leaves ``--pmem-image`` exactly as the power cut left it; a later run
given an existing image opens it (a corrupt or truncated file, or an image another
configuration wrote, is an error and the file is left untouched), recovers from it,
resumes, and is judged against the same reference. ``--fail-at``/``--fail-random``
together with an existing image is an error: that run recovers, it does not re-run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from components.boards.disaggregated import merged
from components.energy import EnergyReport
from components.interconnect.cxl import mmio_write
from components.memory.base import stage
from components.persistence.cluster import ClusterImage, ClusterLayout, device_of_resource
from components.persistence.image import (
    COMMIT_NAMES,
    WORD,
    CorruptImage,
    PmemImage,
    identity_mismatch,
)
from components.persistence.journal import Journal, JournalBuilder, Requests
from components.persistence.protocols import PROTOCOLS, Protocol, Recovery
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import parse_time, ticks_to_ms
from simulate.configure import connected_board, resolve_functional
from simulate.ft_failures import software_failures
from simulate.options import RunOptions, UsageError
from simulate.oracle import VIOLATION, expected_for, reference_from, same_bits, verdict
from simulate.recording import (
    ModelState,
    Stretch,
    WriteLog,
    build_journal,
    identity,
    initial_image,
    persist_domain,
    protocol_for,
    run_stretch,
)
from workloads.training import DEFAULT_LR

REQUEST = 4096  # bytes per request of a large recovery read or write (one DMA burst)


def failure_ticks(options: RunOptions, horizon: int) -> list[int]:
    """--fail-at instants (times or ticks) plus --fail-random K seeded ones in [0, horizon)."""
    ticks = []
    for text in options.fail_at:
        try:
            ticks.append(parse_time(text))
        except ValueError as exc:
            raise UsageError(f"--fail-at {text!r}: {exc}") from None
    rng = np.random.default_rng([options.seed, 6])
    ticks += rng.integers(1, max(horizon, 2), size=options.fail_random).tolist()
    return sorted(int(t) for t in ticks)


# ----- recovery on the device model -------------------------------------------------------
@dataclass
class RecoveryRun:
    """A recovery as the device model ran it: duration, energy, its writes' journal."""

    ticks: int
    energy: float
    journal: Journal
    phases: dict[str, int] = field(default_factory=dict)
    """Ticks each op of the recovery took (its phases, by op name)."""


def _requests(offsets: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Addresses of fixed-size requests covering each [offset, offset + size)."""
    if size <= REQUEST:
        return np.asarray(offsets, dtype=np.int64), size
    parts = np.arange(-(-size // REQUEST), dtype=np.int64) * REQUEST
    return (np.asarray(offsets, dtype=np.int64)[:, None] + parts).reshape(-1), REQUEST


def time_recovery(options: RunOptions, rec: Recovery, protocol: Protocol) -> RecoveryRun:
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
        reads = [device.read(*_requests(o, s)) for o, s in rec.reads if len(o) and s]
        if reads:
            yield stage(*reads)
        for epoch in rec.epochs:
            writes = [device.write(*_requests(g.offsets, g.size)) for g in epoch if g.count]
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
        return (pmem.write if write else pmem.read)(*_requests(offsets - base, size))

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


def recover(
    protocol: Protocol, options: RunOptions, image: PmemImage, pending: list[int], tick: int
) -> tuple[Recovery, int, float, int]:
    """Recover, starting over whenever a pending failure lands during recovery: the
    recovery writes durable by then (its own journal, cut there) stay in the image.
    Returns (recovery, ticks, joules, interruptions, the last attempt's phases)."""
    interrupted, total_ticks, total_energy, now = 0, 0, 0.0, tick
    while True:
        rec = protocol.plan(image)
        run = time_recovery(options, rec, protocol)
        if pending and pending[0] < now + run.ticks:
            cut = pending.pop(0)
            run.journal.image_at(image.words, cut - now)
            total_ticks += cut - now
            total_energy += run.energy * (cut - now) / run.ticks
            now, interrupted = cut, interrupted + 1
            continue
        done = protocol.finish(image, rec)
        return done, total_ticks + run.ticks, total_energy + run.energy, interrupted, run.phases


# ----- the failure runs ------------------------------------------------------------------
def check_options(options: RunOptions, optimizer: str = "sgd") -> None:
    """Refuse, before any work, what a failure run cannot honour (new failures on an
    existing image are refused earlier, by preflight.check_pmem_image)."""
    if options.pmem_image and Path(options.pmem_image).exists():
        check_image_identity(options, optimizer)


def check_image_identity(options: RunOptions, optimizer: str = "sgd") -> None:
    """An image written by another configuration, with a flag failing its check, or cut
    at a batch this run does not reach is refused, and left unmodified."""
    image = PmemImage.open(options.pmem_image, writable=False)
    differences = identity_mismatch(image.identity, identity(options, optimizer))
    if differences:
        raise UsageError(
            f"PMEM image {options.pmem_image} was written by another configuration: "
            + "; ".join(differences)
        )
    image.flag_values()  # a flag word failing its check: a corrupt image
    cut = expected_for(PROTOCOLS[options.system].system_kind, image).batch
    if cut > options.batches:
        raise UsageError(
            f"PMEM image {options.pmem_image} was cut at batch {cut}, beyond the "
            f"--batches {options.batches} this run reaches"
        )


def record_run(options: RunOptions, lr: float = DEFAULT_LR, optimizer: str = "sgd") -> Stretch:
    """The one recorded run a failure run needs (checked first)."""
    check_options(options, optimizer)
    return run_stretch(options, lr=lr, optimizer=optimizer)


def run_with_failures(
    options: RunOptions,
    recorded: Stretch | None = None,
    lr: float = DEFAULT_LR,
    optimizer: str = "sgd",
) -> list[dict[str, Any]]:
    """Inject the requested failures; one results.json ``failure`` entry per failure.
    An existing --pmem-image is recovered from instead (power returning to a cut image)."""
    check_options(options, optimizer)
    if options.checkpoint != "paper":  # a software policy: its store, its oracle
        recorded = recorded or run_stretch(options, lr=lr, optimizer=optimizer)
        pending = failure_ticks(options, recorded.end_tick)
        return software_failures(options, recorded, pending, lr, optimizer)
    if options.pmem_image and Path(options.pmem_image).exists():
        return [resume_from_image(options, lr, recorded, optimizer)]
    return inject(options, lr, recorded, optimizer)[0]


def resume_from_image(
    options: RunOptions,
    lr: float = DEFAULT_LR,
    recorded: Stretch | None = None,
    optimizer: str = "sgd",
) -> dict[str, Any]:
    """Recover the training state from an image left by an earlier process, resume to
    options.batches, and judge the recovery and the final model against the reference."""
    check_image_identity(options, optimizer)
    reference_run = recorded or run_stretch(options, lr=lr, optimizer=optimizer)
    image = PmemImage.open(options.pmem_image)
    history = reference_from(reference_run.initial_state())
    history.extend(reference_run.facts)
    protocol = PROTOCOLS[options.system](image.layout)
    want = expected_for(protocol.system_kind, image)
    rec, ticks, energy, _, _ = recover(protocol, options, image, [], 0)
    outcome, why = verdict(history, rec, want)
    final = reference_run.model
    if rec.batch < options.batches:
        state = ModelState(rec.table, rec.mlp, rec.row_acc, rec.mlp_acc)
        stretch = run_stretch(options, rec.batch, state, lr, optimizer)
        build_journal(PROTOCOLS[options.system](image.layout), stretch).image_at(
            image.words, np.iinfo(np.int64).max
        )
        final = stretch.model
    image.seal()
    return {
        "resumed_from": str(options.pmem_image),
        "resume_batch": rec.batch,
        "mlp_batch": rec.mlp_batch,
        "recovery_ms": round(ticks_to_ms(ticks), 6),
        "recovery_energy_j": round(energy, 9),
        "verdict": outcome,
        "detail": why,
        "final_model_exact": _same_model(final, reference_run.model),
    }


def _same_model(a, b) -> bool:
    same = same_bits(a.table, b.table) and same_bits(a.mlp_flat(), b.mlp_flat())
    if same and a.row_acc() is not None:
        same = same_bits(a.row_acc(), b.row_acc()) and same_bits(a.mlp_acc_flat(), b.mlp_acc_flat())
    return same


def inject(
    options: RunOptions,
    lr: float = DEFAULT_LR,
    recorded: Stretch | None = None,
    optimizer: str = "sgd",
) -> tuple[list[dict[str, Any]], Stretch]:
    """The failure entries and the last stretch (whose model is the final one)."""
    reference_run = recorded or run_stretch(options, lr=lr, optimizer=optimizer)
    start = reference_run.initial_state()
    image = initial_image(options, options.pmem_image, optimizer, lr, start, reference_run.layout)
    history = reference_from(start)
    history.extend(reference_run.facts)
    pending = failure_ticks(options, reference_run.end_tick)
    stretch, offset, results = reference_run, 0, []
    while True:
        protocol = protocol_for(options.system, image.layout)
        journal = build_journal(protocol, stretch)
        if not pending or pending[0] >= offset + stretch.end_tick:
            journal.image_at(image.words, np.iinfo(np.int64).max)
            break
        tick = pending.pop(0)
        running = stretch.running(tick - offset)
        stalled, absorbed = tick, 0  # recovery starts once a one-device cut's survivors stall
        if options.fail_device is None:
            journal.image_at(image.words, tick - offset)
        else:
            pieces, ran = one_device_cut(journal, stretch, options.fail_device, tick - offset)
            journal.apply(image.words, pieces)
            stalled = offset + ran
            while pending and pending[0] <= stalled:  # that device is off already
                pending.pop(0)
                absorbed += 1
        if options.halt_on_failure:
            return [halted_entry(image, tick, running)], stretch
        want = expected_for(protocol.system_kind, image)
        crash_batch = min(r.batch for r in running)
        try:
            rec, recovery_ticks, energy, interrupted, phases = recover(
                protocol, options, image, pending, stalled
            )
        except CorruptImage as exc:  # a protocol bug: report it, training cannot resume
            results.append({"tick": tick, "batch": crash_batch, "verdict": VIOLATION,
                            "detail": str(exc)})  # fmt: skip
            pending, stretch = [], None
            break
        outcome, why = verdict(history, rec, want)
        results.append(
            {
                "tick": tick,
                "time_ms": round(ticks_to_ms(tick), 6),
                "batch": crash_batch,
                "phase": ", ".join(sorted({f"{r.name}@{r.batch}" for r in running})),
                "resume_batch": rec.batch,
                "mlp_batch": rec.mlp_batch,
                "batches_redone": max(crash_batch - rec.batch, 0),
                "recovery_ms": round(ticks_to_ms(recovery_ticks), 6),
                "recovery_energy_j": round(energy, 9),
                "interrupted_recoveries": interrupted,
                "verdict": outcome,
                "detail": why,
            }
        )
        if options.fail_device is not None:
            results[-1]["failed_device"] = options.fail_device
            results[-1]["survivors_ran_ms"] = round(ticks_to_ms(stalled - tick), 6)
            results[-1]["failures_while_off"], absorbed = absorbed, 0
        if isinstance(image, ClusterImage):  # what each phase of the cluster's recovery took
            results[-1]["recovery_bytes_read"] = rec.bytes_read
            results[-1]["recovery_phases_ms"] = {
                name: round(ticks_to_ms(t), 6) for name, t in phases.items()
            }
        offset = stalled + recovery_ticks
        if rec.batch >= options.batches:
            break
        state = ModelState(rec.table, rec.mlp, rec.row_acc, rec.mlp_acc)
        stretch = run_stretch(options, rec.batch, state, lr, optimizer)
        history.extend(stretch.facts)
    if pending:
        end = ticks_to_ms(offset + stretch.end_tick)
        late = ", ".join(f"{ticks_to_ms(t):g} ms" for t in pending)
        raise UsageError(f"failure instant {late} is after the run ends at {end:g} ms")
    exact_end = stretch is not None and _same_model(stretch.model, reference_run.model)
    for entry in results:
        entry["final_model_exact"] = exact_end
    if isinstance(image.buf, np.memmap):
        image.seal()
    return results, stretch or reference_run


def one_device_cut(
    journal: Journal, stretch: Stretch, device: int, tick: int
) -> tuple[np.ndarray, int]:
    """CXL-MEM ``device`` loses power at ``tick``; the others run on. Its own writes
    persisted by then survive (the timing's order); every op that needs its work (its
    ops not ended by then, and everything downstream of them in the board's
    dependencies: the next all-to-all, the commit waiting for its acknowledgement) never
    runs; every other op completes, as the survivors run until they wait for the lost
    device. Returns the pieces durable in that state and the tick the survivors stall."""
    layout = stretch.layout
    blocked = {
        r.uid for r in stretch.records if r.end > tick and device_of_resource(r.resource) == device
    }
    for r in sorted(stretch.records, key=lambda r: r.uid):  # dependencies come first
        if r.uid not in blocked and any(d in blocked for d in r.deps):
            blocked.add(r.uid)
    lost = layout.device_at(journal.dst * WORD) == device
    runs = ~np.isin(journal.op, np.fromiter(blocked, dtype=np.int64, count=len(blocked)))
    keep = np.where(lost, journal.p <= tick, runs)
    ends = [r.end for r in stretch.records if r.uid not in blocked and r.end > tick]
    return np.flatnonzero(keep), max(ends, default=tick)


def recovery_cost(options: RunOptions, batch: int = 1) -> dict[str, Any]:
    """The failure entry of a power cut one tick before batch ``batch``'s last in-place
    update ends (a device mid-update, its logs of ``batch`` written): what a recovery
    reads and how long it takes, per system and topology (scripts/scaling.py)."""
    stretch = run_stretch(options)
    updates = [r.end for r in stretch.records if r.name == "update" and r.batch == batch]
    if not updates:
        raise UsageError(f"the recovery cost needs batch {batch}: run at least {batch + 1}")
    entries, _ = inject(replace(options, fail_at=[str(max(updates) - 1)]), recorded=stretch)
    return entries[0]


def halted_entry(image: PmemImage, tick: int, running) -> dict[str, Any]:
    """The power stays off: the image keeps the cut state for a later process."""
    if isinstance(image.buf, np.memmap):
        image.buf.flush()
    return {
        "tick": tick,
        "time_ms": round(ticks_to_ms(tick), 6),
        "batch": min(r.batch for r in running),
        "phase": ", ".join(sorted({f"{r.name}@{r.batch}" for r in running})),
        "halted": True,
        "image": image.path,
        "verdict": None,
    }


def failure_field(
    options: RunOptions, recorded: Stretch | None = None
) -> dict[str, Any] | list[dict[str, Any]] | None:
    """results.json ``failure``: one dict for one failure, a list for several."""
    entries = run_with_failures(options, recorded)
    if not entries:
        return None
    return entries[0] if len(entries) == 1 else entries
