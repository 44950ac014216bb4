"""Crash-state exploration, written once for every failure-tolerance scheme: one recorded
run, the crash states the scheme's durability allows, a recovery and a verdict for each,
and training resumed after some of those recoveries, crashed again.

A hardware protocol's states are persist orders of its journal (failures/hardware.py,
failures/persist_states.py: the timing's own order, reorderings and torn subsets of the
writes in flight, the other orders of concurrent ops, failures during recovery, media
and metadata faults); a software policy's are instants around its checkpoints
(failures/software.py). Each is judged by the oracle (failures/oracle.py) against what
the scheme guarantees.
"""

from __future__ import annotations

import time
from dataclasses import replace

from components.persistence.explorer import ExploreSettings
from simulate.failures.crash_report import CheckSettings, CrashReport
from simulate.failures.recording import Stretch, run_stretch
from simulate.failures.schemes import scheme_for
from simulate.failures.tolerance import Resumption
from simulate.run.options import RunOptions
from workloads.training import DEFAULT_LR

__all__ = ["CheckSettings", "CrashReport", "crashcheck"]


def crashcheck(
    options: RunOptions,
    settings: CheckSettings | None = None,
    protocol_class: type | None = None,
    optimizer: str = "sgd",
    stretch: Stretch | None = None,
) -> CrashReport:
    """Check recovery at every crash state the settings select (one recorded run, or
    ``stretch``) and in the runs resumed after recoveries. ``protocol_class``: a
    variant of one part of the scheme (a protocol, a policy or a chain recovery
    subclass: a mutant the check must catch)."""
    settings = settings or CheckSettings(explore=ExploreSettings(seed=options.seed))
    started = time.perf_counter()
    scheme_class = scheme_for(options)
    options = scheme_class.prepare(options, protocol_class)
    stretch = stretch or run_stretch(options, lr=DEFAULT_LR, optimizer=optimizer)
    scheme = scheme_class(options, stretch, DEFAULT_LR, optimizer, protocol_class)
    report = CrashReport(guarantee=scheme.guarantee())

    def resume(resumption: Resumption) -> None:
        """Training resumed from a recovery: a fresh recorded stretch of its next
        ``resumed_batches`` batches, whose crash states are explored in turn."""
        if resumption.batch >= options.batches:
            return
        last = min(options.batches, resumption.batch + settings.resumed_batches)
        ahead = replace(options, batches=last)
        again = run_stretch(ahead, resumption.batch, resumption.state, DEFAULT_LR, optimizer)
        resumption.explore(again, report)
        report.resumed_runs += 1

    scheme.explore(settings, report, resume)
    report.seconds = time.perf_counter() - started
    return report
