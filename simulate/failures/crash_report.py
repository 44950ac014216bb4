"""What a crash check explores (``CheckSettings``) and what it found (``CrashReport``),
shared by every failure-tolerance scheme's exploration."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from components.persistence.explorer import ExploreSettings
from simulate.failures.oracle import VIOLATION


@dataclass(frozen=True)
class CheckSettings:
    """What to explore: ``explore`` (prefix walk and reordering), ``interrupted``
    failures during recovery, ``media`` bit flips in records and ``metadata`` ones in
    headers, flags and the base record (``metadata`` states, every field flipped in
    each), drawn at random (seeded) from the distinct
    recoveries the walk runs; ``resumed`` recoveries whose resumed training is recorded
    and crashed again (its first ``resumed_batches``, ``resumed_prefix`` sampled persist
    ticks of them); ``schedules``:
    the other order of every pair of concurrent unordered ops (``schedule_prefix``
    sampled persist ticks of each window, every crash interval in it reordered), each
    commit persisting as late as what waits for it allows, and (``late_devices``) each
    device slow: its durable ops as late as what waits for them allows."""

    explore: ExploreSettings = ExploreSettings()
    interrupted: int = 400
    media: int = 64
    metadata: int = 24
    resumed: int = 2
    resumed_prefix: int = 200
    resumed_batches: int = 3
    schedules: bool = True
    schedule_prefix: int = 64
    late_devices: bool = True


@dataclass
class CrashReport:
    states: int = 0
    seconds: float = 0.0
    recoveries: int = 0
    modes: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    violations: list[dict] = field(default_factory=list)
    interrupted: int = 0
    media: int = 0
    media_detected: int = 0
    metadata: int = 0
    metadata_detected: int = 0
    resumed_runs: int = 0
    schedules: int = 0
    schedules_skipped: int = 0
    guarantee: dict = field(default_factory=dict)
    intervals: int = 0
    exhaustive_intervals: int = 0
    pair_coverage: tuple[float, float] = (1.0, 1.0)
    pieces: int = 0
    unmatched_bytes: int = 0
    unhonoured_fences: list = field(default_factory=list)
    cross_device: Counter = field(default_factory=Counter)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0

    @property
    def recoveries_per_second(self) -> float:
        return self.recoveries / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict:
        return {
            "states": self.states,
            "states_per_second": round(self.states_per_second, 1),
            "recoveries": self.recoveries,
            "recoveries_per_second": round(self.recoveries_per_second, 1),
            "by_mode": dict(sorted(self.modes.items())),
            "verdicts": dict(sorted(self.verdicts.items())),
            "intervals": self.intervals,
            "exhaustive_intervals": self.exhaustive_intervals,
            "sampled_pair_coverage": {
                "mean": round(self.pair_coverage[0], 4),
                "min": round(self.pair_coverage[1], 4),
            },
            "interrupted_recoveries": self.interrupted,
            "media_faults": self.media,
            "media_faults_detected": self.media_detected,
            "metadata_faults": self.metadata,
            "metadata_faults_detected": self.metadata_detected,
            "resumed_runs": self.resumed_runs,
            "schedules": self.schedules,
            "schedules_skipped": self.schedules_skipped,
            "guarantee": self.guarantee,
            **(
                {"cross_device": dict(sorted(self.cross_device.items()))}
                if self.cross_device
                else {}
            ),
            "violations": len(self.violations),
        }

    def count(
        self, mode: str, outcome: tuple[str, str], states: int = 1, tick: int = 0, regions=()
    ) -> None:
        """``states`` crash states of ``mode`` judged ``outcome`` (verdict, why); a
        violation is kept with where it happened (``tick``, the ``regions`` involved, or
        a function giving them: they are worked out only for a violation)."""
        self.states += states
        self.modes[mode] += states
        self.verdicts[outcome[0]] += states
        if outcome[0] == VIOLATION:
            self.violations.append(
                {
                    "tick": tick,
                    "mode": mode,
                    "regions": list(regions() if callable(regions) else regions),
                    "why": outcome[1],
                }
            )
