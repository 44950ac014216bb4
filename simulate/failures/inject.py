"""Power failures injected into a run, written once for every failure-tolerance scheme
(failures/tolerance.py): cut what the scheme keeps durable, recover (timed), judge,
resume training from what recovery produced, until the run's batches are done.

Ticks are global: a resumed stretch starts when its recovery ended. A scheme may stop a
run early: the power staying off (--halt-on-failure), or an image recovery refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from components.sim.units import parse_time, ticks_to_ms
from simulate.failures.hardware import check_options, resume_from_image
from simulate.failures.recording import Stretch, run_stretch
from simulate.failures.schemes import scheme_for
from simulate.run.options import RunOptions, UsageError
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
    if options.checkpoint == "paper" and options.pmem_image and Path(options.pmem_image).exists():
        return [resume_from_image(options, lr, recorded, optimizer)]
    return inject(options, lr, recorded, optimizer)[0]


def inject(
    options: RunOptions,
    lr: float = DEFAULT_LR,
    recorded: Stretch | None = None,
    optimizer: str = "sgd",
    pending: list[int] | None = None,
) -> tuple[list[dict[str, Any]], Stretch]:
    """The failure entries and the last stretch (whose model is the final one).
    ``pending``: global failure ticks, sorted (default: the options' --fail-at and
    --fail-random instants)."""
    reference_run = recorded or run_stretch(options, lr=lr, optimizer=optimizer)
    scheme = scheme_for(options)(options, reference_run, lr, optimizer)
    if pending is None:
        pending = failure_ticks(options, reference_run.end_tick)
    pending = list(pending)
    stretch, offset, entries = reference_run, 0, []
    while True:
        scheme.extend(stretch, offset, pending[0] if pending else None)
        if not pending or pending[0] >= offset + stretch.end_tick:
            scheme.settle()
            break
        failure = scheme.fail(pending.pop(0), pending)
        entries.append(failure.entry)
        if failure.halt:
            return entries, stretch
        if failure.state is None:  # training cannot resume: nothing left to inject
            pending, stretch = [], None
            break
        offset = failure.resumes_at
        if failure.batch >= options.batches:
            break
        stretch = run_stretch(options, failure.batch, failure.state, lr, optimizer)
    if pending:
        end = ticks_to_ms(offset + stretch.end_tick)
        late = ", ".join(f"{ticks_to_ms(t):g} ms" for t in pending)
        raise UsageError(f"failure instant {late} is after the run ends at {end:g} ms")
    final = scheme.final_fields(stretch)
    for entry in entries:
        entry.update(final)
    scheme.close()
    return entries, stretch or reference_run


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


def failure_field(
    options: RunOptions, recorded: Stretch | None = None
) -> dict[str, Any] | list[dict[str, Any]] | None:
    """results.json ``failure``: one dict for one failure, a list for several."""
    entries = run_with_failures(options, recorded)
    if not entries:
        return None
    return entries[0] if len(entries) == 1 else entries
