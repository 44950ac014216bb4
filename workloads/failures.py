"""Power failures injected into a run: cut, recover (timed), resume, judge.

The failure-free run of the same options is simulated and recorded first; it is the
reference. A failure at global tick T cuts the current stretch's journal at T, the
system's recovery runs on the surviving image (itself interruptible: a failure during
recovery keeps the prefix of its writes done by then, and recovery starts over), and
training resumes from the recovered batch on a fresh board until the requested batch
count or the next failure. Ticks are global: a resumed stretch starts at the tick its
recovery finished.

The image can also outlive the process: with ``--halt-on-failure`` the run stops at its
first failure and leaves ``--pmem-image`` exactly as the power cut left it; a later run
given an existing image opens it (a corrupt or truncated file is an error), recovers
from it, resumes, and is judged against the same reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from components.boards.base import TrainingBoard
from components.persistence.image import PmemImage
from components.persistence.protocols import PROTOCOLS, Recovery, RelaxedUndoProtocol
from components.sim.schedule import alone_ticks
from components.sim.units import TICKS_PER_SECOND, parse_time, ticks_to_ms
from workloads.options import RunOptions, UsageError
from workloads.oracle import Reference, mlp_age_bound, same_bits, verdict
from workloads.recording import (
    Stretch,
    build_journal,
    image_layout,
    initial_image,
    simulate,
)
from workloads.training import DEFAULT_LR


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


def recovery_cost(board: TrainingBoard, rec: Recovery) -> tuple[int, float]:
    """Ticks and joules of a recovery: read flags and logs, write the rollback/replay,
    move the MLPs to the GPU over the board's link, the table device at static power."""
    device = board.table_memory()
    media = getattr(device, "ssd", device)
    ticks = device.idle_read_latency + rec.bytes_read * TICKS_PER_SECOND / device.read_bandwidth
    if rec.writes:
        ticks += device.idle_write_latency
        ticks += rec.bytes_written * TICKS_PER_SECOND / device.write_bandwidth
    ticks = int(np.ceil(ticks)) + alone_ticks(board.to_gpu(rec.mlp.nbytes))
    energy = rec.bytes_read * media.read_energy + rec.bytes_written * media.write_energy
    energy += media.static_power * ticks / TICKS_PER_SECOND
    return ticks, float(energy)


def run_with_failures(options: RunOptions) -> list[dict[str, Any]]:
    """Inject the requested failures; one results.json ``failure`` entry per failure.
    An existing --pmem-image is recovered from first (power returning to a cut image)."""
    if options.pmem_image and Path(options.pmem_image).exists():
        return [resume_from_image(options)]
    return inject(options)[0]


def resume_from_image(options: RunOptions, lr: float = DEFAULT_LR) -> dict[str, Any]:
    """Recover the training state from an image left by an earlier process, resume to
    options.batches, and judge the recovery and the final model against the reference."""
    image = PmemImage.open(options.pmem_image)
    if image.layout != image_layout(options):
        raise UsageError(
            f"PMEM image {options.pmem_image} was written by another model or batch size "
            "than these options describe"
        )
    reference_run = simulate(options, lr=lr)
    fresh = initial_image(options)
    history = Reference(fresh.table().copy(), fresh.mlp_record("base")[1])
    history.extend(reference_run.facts)
    protocol = PROTOCOLS[options.system](image)
    rec = protocol.recover(image)
    ticks, energy = recovery_cost(reference_run.board, rec)
    # an earlier process's MLP log history is unknown: any earlier boundary is accepted
    outcome, why = verdict(history, rec, gap_bound=options.batches)
    final = reference_run.model
    if rec.batch < options.batches:
        stretch = simulate(options, rec.batch, (rec.table, rec.mlp), lr)
        journal = build_journal(PROTOCOLS[options.system](image), stretch).frozen()
        image.buf[:] = journal.image_at(image.buf, journal.end)
        final = stretch.model
    image.seal()
    exact_end = same_bits(final.table, reference_run.model.table) and same_bits(
        final.mlp_flat(), reference_run.model.mlp_flat()
    )
    return {
        "resumed_from": str(options.pmem_image),
        "resume_batch": rec.batch,
        "mlp_batch": rec.mlp_batch,
        "recovery_ms": round(ticks_to_ms(ticks), 6),
        "recovery_energy_j": round(energy, 9),
        "verdict": outcome,
        "detail": why,
        "final_model_exact": exact_end,
    }


def inject(options: RunOptions, lr: float = DEFAULT_LR) -> tuple[list[dict[str, Any]], Stretch]:
    """The failure entries and the last stretch (whose model is the final one)."""
    reference_run = simulate(options, lr=lr)
    image = initial_image(options, options.pmem_image)
    reference = Reference(image.table().copy(), image.mlp_record("base")[1])
    reference.extend(reference_run.facts)
    final_reference = (reference_run.model.table.copy(), reference_run.model.mlp_flat())
    history = Reference(*reference.initial)
    history.extend(reference_run.facts)
    pending = failure_ticks(options, reference_run.end_tick)
    stretch, offset, results, mlp_batch = reference_run, 0, [], 0
    while True:
        protocol = PROTOCOLS[options.system](image)
        journal = build_journal(protocol, stretch).frozen()
        bound = _gap_bound(protocol, options, mlp_batch)
        if not pending or pending[0] >= offset + stretch.end_tick:
            image.buf[:] = journal.image_at(image.buf, journal.end)
            break
        tick = pending.pop(0)
        image.buf[:] = journal.image_at(image.buf, tick - offset)
        running = stretch.running(tick - offset)
        if options.halt_on_failure:
            return [halted_entry(image, tick, running)], stretch
        rec, recovery_ticks, energy, interrupted = _recover(
            protocol, stretch.board, image, pending, tick
        )
        outcome, why = verdict(history, rec, bound)
        crash_batch = min(r.batch for r in running)
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
        offset, mlp_batch = tick + recovery_ticks, rec.mlp_batch
        if rec.batch >= options.batches:
            break
        stretch = simulate(options, rec.batch, (rec.table, rec.mlp), lr)
        history.extend(stretch.facts)
    if pending:
        end = ticks_to_ms(offset + stretch.end_tick)
        late = ", ".join(f"{ticks_to_ms(t):g} ms" for t in pending)
        raise UsageError(f"failure instant {late} is after the run ends at {end:g} ms")
    final = stretch.model
    exact_end = same_bits(final.table, final_reference[0]) and same_bits(
        final.mlp_flat(), final_reference[1]
    )
    for entry in results:
        entry["final_model_exact"] = exact_end
    if isinstance(image.buf, np.memmap):
        image.seal()
    return results, stretch


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


def _recover(protocol, board, image: PmemImage, pending: list[int], tick: int):
    """Recover, starting over whenever a pending failure lands during recovery; the
    writes done before that failure (a prefix, in order) stay in the image."""
    interrupted, total_ticks, total_energy, now = 0, 0, 0.0, tick
    while True:
        rec = protocol.plan(image)
        ticks, energy = recovery_cost(board, rec)
        if pending and pending[0] < now + ticks:
            cut = pending.pop(0)
            done = len(rec.writes) * (cut - now) // max(ticks, 1)
            for offset, data in rec.writes[:done]:
                image.write(offset, data)
            total_ticks += cut - now
            total_energy += energy * (cut - now) / max(ticks, 1)
            now, interrupted = cut, interrupted + 1
            continue
        return protocol.finish(image, rec), total_ticks + ticks, total_energy + energy, interrupted


def _gap_bound(protocol, options: RunOptions, first: int) -> int:
    if not isinstance(protocol, RelaxedUndoProtocol):
        return 0
    return mlp_age_bound(protocol.copies, protocol.completed_at, options.batches - 1, first)


def failure_field(options: RunOptions) -> dict[str, Any] | list[dict[str, Any]] | None:
    """results.json ``failure``: one dict for one failure, a list for several."""
    entries = run_with_failures(options)
    if not entries:
        return None
    return entries[0] if len(entries) == 1 else entries
