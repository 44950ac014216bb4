"""Hardware persistence protocols (each system's own: redo, undo, relaxed; a cluster's
coordinated commit) as a failure-tolerance scheme: what a crash keeps is the PMEM image.

One recorded run of the options (failures/recording.py) is both the failure-free
reference and the run whose stats are reported. A failure at global tick T cuts the
current stretch's journal at T (the timing's own persist order: a write spanning
several requests is torn at their boundaries), the system's recovery runs on the
surviving image and is itself timed on the device model (failures/recovery.py); a
failure during recovery keeps what the recovery's own journal made durable by then, and
recovery starts over. With --fail-device one CXL-MEM loses power alone: the others run
on until they wait for it.

The image can also outlive the process: with ``--halt-on-failure`` the run stops at its
first failure and leaves ``--pmem-image`` exactly as the power cut left it; a later run
given an existing image opens it (a corrupt or truncated file, or an image another
configuration wrote, is an error and the file is left untouched), recovers from it,
resumes, and is judged against the same reference. ``--fail-at``/``--fail-random``
together with an existing image is an error: that run recovers, it does not re-run.

Crash exploration walks every persist order the journal allows (failures/persist_states.py),
first in the other orders of concurrent ops the board does not order
(failures/schedules.py).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from components.persistence.cluster import ClusterImage, device_of_resource
from components.persistence.explorer import CrashExplorer, ExploreSettings
from components.persistence.image import WORD, CorruptImage, PmemImage, identity_mismatch
from components.persistence.journal import Journal
from components.persistence.protocols import PROTOCOLS, Protocol, Recovery
from components.sim.units import ticks_to_ms
from simulate.failures.crash_report import CheckSettings, CrashReport
from simulate.failures.oracle import (
    VIOLATION,
    Guarantee,
    Reference,
    expected_for,
    guarantee_for,
    reference_from,
    same_bits,
    verdict,
)
from simulate.failures.persist_states import Checker, estimate_states, walk
from simulate.failures.recording import (
    ModelState,
    Stretch,
    build_journal,
    identity,
    initial_image,
    protocol_for,
    run_stretch,
)
from simulate.failures.recovery import time_protocol_recovery
from simulate.failures.schedules import delayed_commits, late_devices, reordered_schedules
from simulate.failures.tolerance import Failure, FailureTolerance, Resumption
from simulate.run.options import RunOptions, UsageError
from workloads.training import DEFAULT_LR


class Pristine(NamedTuple):
    """A recorded run's start as a crash check walks it: the initial state, the pristine
    image, the protocol over it, the run's journal, the failure-free reference and the
    schedule's absolute bounds."""

    start: ModelState
    base: PmemImage
    protocol: Protocol
    journal: Journal
    reference: Reference
    bounds: Guarantee


class PersistenceProtocol(FailureTolerance):
    """A system's protocol over its PMEM image across failures (``variant``: a Protocol
    subclass recovering instead, for mutants)."""

    def __init__(
        self, options: RunOptions, recorded: Stretch, lr: float, optimizer: str, variant=None
    ) -> None:
        super().__init__(options, recorded, lr, optimizer)
        self.make = variant or functools.partial(protocol_for, options.system)
        self.image: PmemImage | None = None
        self.stretch, self.offset, self.journal, self.protocol = recorded, 0, None, None

    @staticmethod
    def prepare(options: RunOptions, variant=None) -> RunOptions:
        """A variant that also breaks the board's timing (a coordinator that waits for
        the wrong acknowledgements) brings its board: ``variant.board_for(options)``."""
        board_for = getattr(variant, "board_for", None)
        return options if board_for is None else replace(options, board=board_for(options))

    # ----- injection ----------------------------------------------------------------------
    def extend(self, stretch: Stretch, offset: int, until: int | None) -> None:
        if self.image is None:  # the image the run starts with, or the file it names
            start = self.recorded.initial_state()
            options, optimizer, lr = self.options, self.optimizer, self.lr
            layout = self.recorded.layout
            self.image = initial_image(options, options.pmem_image, optimizer, lr, start, layout)
            self.history = reference_from(start)
            self.history.extend(self.recorded.facts)
        elif stretch is not self.stretch:
            self.history.extend(stretch.facts)
        self.protocol = self.make(self.image.layout)
        self.journal = build_journal(self.protocol, stretch)
        self.stretch, self.offset = stretch, offset

    def settle(self) -> None:
        self.journal.image_at(self.image.words, np.iinfo(np.int64).max)

    def fail(self, tick: int, pending: list[int]) -> Failure:
        options, image, journal = self.options, self.image, self.journal
        stretch, offset, protocol = self.stretch, self.offset, self.protocol
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
            return Failure(halted_entry(image, tick, running), halt=True)
        want = expected_for(protocol.system_kind, image)
        crash_batch = min(r.batch for r in running)
        try:
            rec, recovery_ticks, energy, interrupted, phases = recover(
                protocol, options, image, pending, stalled
            )
        except CorruptImage as exc:  # a protocol bug: report it, training cannot resume
            return Failure({"tick": tick, "batch": crash_batch, "verdict": VIOLATION,
                            "detail": str(exc)})  # fmt: skip
        outcome, why = verdict(self.history, rec, want)
        entry = {
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
        if options.fail_device is not None:
            entry["failed_device"] = options.fail_device
            entry["survivors_ran_ms"] = round(ticks_to_ms(stalled - tick), 6)
            entry["failures_while_off"] = absorbed
        if isinstance(image, ClusterImage):  # what each phase of the cluster's recovery took
            entry["recovery_bytes_read"] = rec.bytes_read
            entry["recovery_phases_ms"] = {
                name: round(ticks_to_ms(t), 6) for name, t in phases.items()
            }
        state = ModelState(rec.table, rec.mlp, rec.row_acc, rec.mlp_acc)
        return Failure(entry, rec.batch, state, stalled + recovery_ticks)

    def final_fields(self, final: Stretch | None) -> dict[str, Any]:
        exact = final is not None and _same_model(final.model, self.recorded.model)
        return {"final_model_exact": exact}

    def close(self) -> None:
        if isinstance(self.image.buf, np.memmap):
            self.image.seal()

    # ----- crash exploration --------------------------------------------------------------
    @functools.cached_property
    def pristine(self) -> Pristine:
        """The start of the recorded run a crash check walks from, made once."""
        stretch, options = self.recorded, self.options
        start = stretch.initial_state()
        base = initial_image(options, optimizer=self.optimizer, state=start, layout=stretch.layout)
        protocol = self.make(base.layout)
        journal = build_journal(protocol, stretch)
        reference = reference_from(start)
        reference.extend(stretch.facts)
        reference.cache_all(options.batches)
        bounds = guarantee_for(protocol.system_kind, stretch)
        return Pristine(start, base, protocol, journal, reference, bounds)

    def guarantee(self) -> dict[str, Any]:
        return self.pristine.bounds.describe()

    def explore(
        self,
        settings: CheckSettings,
        report: CrashReport,
        resume: Callable[[Resumption], None],
    ) -> None:
        """The other orders of concurrent ops first (each variant walks a copy of the
        pristine image), then every persist order of the recorded run's journal."""
        start, base, protocol, journal, reference, bounds = self.pristine
        stretch, options = self.recorded, self.options
        report.pieces = len(journal)
        report.unmatched_bytes = journal.unmatched_bytes
        report.unhonoured_fences = list(journal.unhonoured_fences)
        if settings.schedules:
            quiet = CheckSettings(interrupted=0, media=0, metadata=0, resumed=0, schedules=False)
            records = stretch.records
            late = late_devices(journal, records, device_of_resource)
            variants = chain(
                reordered_schedules(journal, records),
                delayed_commits(journal, records),
                late if settings.late_devices else (),
            )
            for variant in variants:
                if variant is None:
                    report.schedules_skipped += 1
                    continue
                report.schedules += 1
                window = variant.window
                walk_settings = replace(
                    settings.explore, window=window, prefix=settings.schedule_prefix
                )
                other = CrashExplorer(variant.journal, base.words, walk_settings)
                held = bounds
                if variant.moved:  # ops persisting later: their bounds move with them
                    held = guarantee_for(protocol.system_kind, stretch, moved=variant.moved)
                family = "schedule" if variant.first is not None else "late_device"
                walk(Checker(other, protocol, reference, report, quiet, held, family))
                del other
        explorer = CrashExplorer(journal, base.words, settings.explore, copy=False)

        def resumed(words: np.ndarray) -> None:
            self._resume(words, settings, resume)

        checker = Checker(explorer, protocol, reference, report, settings, bounds, resume=resumed)
        progress = tqdm(
            total=estimate_states(journal, settings.explore),
            desc=f"crash states {options.system}",
            unit="state",
            file=sys.stderr,
            disable=None if options.progress else True,
            leave=False,
        )
        for state in explorer.walk(checker.watch):
            before = report.states
            checker.check(state)
            progress.update(report.states - before)
        progress.close()
        sampled = [i.pair_coverage for i in explorer.intervals if not i.exhaustive]
        report.intervals = len(explorer.intervals)
        report.exhaustive_intervals = sum(i.exhaustive for i in explorer.intervals)
        if sampled:
            report.pair_coverage = (float(np.mean(sampled)), float(np.min(sampled)))

    def _resume(
        self, words: np.ndarray, settings: CheckSettings, resume: Callable[[Resumption], None]
    ) -> None:
        """Recover a crash image; training resumed from it writes on the recovered image,
        and that stretch's crash states are checked: a recovery that leaves the image
        subtly wrong (stale flags, a base record it did not finish) is caught by the
        failure after it."""
        start, bounds = self.pristine.start, self.pristine.bounds
        first = self.make(self.recorded.layout)
        image = first.image_over(words.view(np.uint8))
        try:
            rec = first.recover(image)
        except CorruptImage:
            return  # already a violation of the walk
        last = min(self.options.batches, rec.batch + settings.resumed_batches)

        def explore(resumed: Stretch, report: CrashReport) -> None:
            history = reference_from(start)
            history.extend(self.recorded.facts)
            history.extend(resumed.facts)
            history.cache_all(last)
            protocol = self.make(image.layout)
            journal = build_journal(protocol, resumed)
            age = rec.batch - rec.mlp_batch
            held = bounds.snapshots or ()
            again = guarantee_for(protocol.system_kind, resumed, rec.batch, held, age)
            seed = settings.explore.seed
            steps = ExploreSettings(prefix=settings.resumed_prefix, budget=4, seed=seed)
            explorer = CrashExplorer(journal, image.words, steps, copy=False)
            sub = CheckSettings(steps, interrupted=20, media=0, metadata=0, resumed=0,
                                schedules=False)  # fmt: skip
            walk(Checker(explorer, protocol, history, report, sub, again, "resumed"))

        state = ModelState(rec.table, rec.mlp, rec.row_acc, rec.mlp_acc)
        resume(Resumption(rec.batch, state, explore))


def recover(
    protocol: Protocol, options: RunOptions, image: PmemImage, pending: list[int], tick: int
) -> tuple[Recovery, int, float, int]:
    """Recover, starting over whenever a pending failure lands during recovery: the
    recovery writes durable by then (its own journal, cut there) stay in the image.
    Returns (recovery, ticks, joules, interruptions, the last attempt's phases)."""
    interrupted, total_ticks, total_energy, now = 0, 0, 0.0, tick
    while True:
        rec = protocol.plan(image)
        run = time_protocol_recovery(options, rec, protocol)
        if pending and pending[0] < now + run.ticks:
            cut = pending.pop(0)
            run.journal.image_at(image.words, cut - now)
            total_ticks += cut - now
            total_energy += run.energy * (cut - now) / run.ticks
            now, interrupted = cut, interrupted + 1
            continue
        done = protocol.finish(image, rec)
        return done, total_ticks + run.ticks, total_energy + run.energy, interrupted, run.phases


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
