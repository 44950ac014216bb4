"""Crash-state exploration: one recorded run, every (or a sample of) crash instants.

The run is simulated once; its journal of persisted writes is cut at each crash tick
in increasing order (the image is advanced incrementally, torn writes applied to a
copy), the system's recovery runs on the surviving bytes, and the oracle compares
the result with the failure-free reference states.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from components.persistence.image import CorruptImage, PmemImage
from components.persistence.protocols import PROTOCOLS, Protocol, RelaxedUndoProtocol
from workloads.options import RunOptions
from workloads.oracle import VIOLATION, Reference, mlp_age_bound, verdict
from workloads.recording import build_journal, initial_image, simulate


@dataclass
class CrashReport:
    states: int = 0
    seconds: float = 0.0
    verdicts: dict[str, int] = field(default_factory=dict)
    violations: list[dict] = field(default_factory=list)
    gap_bound: int = 0

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict:
        return {
            "states": self.states,
            "states_per_second": round(self.states_per_second, 1),
            "violations": len(self.violations),
        }


def crashcheck(
    options: RunOptions,
    sample: int = 0,
    protocol_class: type[Protocol] | None = None,
) -> CrashReport:
    """Check recovery at every persist event of one run (or ``sample`` random ones)."""
    stretch = simulate(options)
    base = initial_image(options)
    protocol = (protocol_class or PROTOCOLS[options.system])(base)
    journal = build_journal(protocol, stretch).frozen()
    table, mlp = base.table().copy(), base.mlp_record("base")[1]
    reference = Reference(table, mlp)
    reference.extend(stretch.facts)
    reference.cache_all(options.batches)
    report = CrashReport()
    if isinstance(protocol, RelaxedUndoProtocol):
        report.gap_bound = mlp_age_bound(
            protocol.copies, protocol.completed_at, options.batches - 1
        )
    points = journal.crash_points()
    if sample and sample < points.size:
        rng = np.random.default_rng(options.seed)
        points = np.sort(rng.choice(points, size=sample, replace=False))
    started = time.perf_counter()
    running, applied = base.buf.copy(), 0
    progress = tqdm(
        points.tolist(),
        desc=f"crash states {options.system}",
        unit="state",
        file=sys.stderr,
        disable=not options.progress,
        leave=False,
    )
    for tick in progress:
        count = journal.durable_count(tick)
        journal.apply_range(running, applied, count)
        applied = count
        buf = running.copy()
        torn = journal.apply_torn(buf, tick, count)
        image = PmemImage(base.layout, buf)
        try:
            outcome, why = verdict(reference, protocol.recover(image), report.gap_bound)
        except CorruptImage as exc:
            outcome, why = VIOLATION, str(exc)
        report.verdicts[outcome] = report.verdicts.get(outcome, 0) + 1
        if outcome == VIOLATION:
            last = [count - 1] if count else []
            regions = sorted({base.layout.region_of(int(journal.offsets[i])) for i in last + torn})
            report.violations.append({"tick": tick, "regions": regions, "why": why})
        report.states += 1
    report.seconds = time.perf_counter() - started
    return report
