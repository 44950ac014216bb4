"""Long runs under failures: how much useful training a failure-tolerance scheme buys.

The engine times a scheme's batch, checkpoint and recovery; a long run strings them
together at batch granularity (far more batches than are worth timing in detail):
``interval`` batches, then a checkpoint, over and over; power failures at exponential
inter-arrival times (seeded). A failure costs the recovery, and the batches since the
last complete checkpoint either run again (``replay``: the paper's protocols and
Check-N-Run) or are given up (CPR's partial recovery: training goes on from where the
data reader is, without those batches' updates). Failures during a recovery are not
drawn (the next gap starts when training resumes). Goodput counts the samples whose
updates the final model holds, per second of wall time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scheme:
    """What the engine measured of one scheme (seconds), and its recovery rule."""

    name: str
    batch_s: float  # one batch, its checkpoint's critical-path cost left out
    checkpoint_s: float  # one checkpoint's cost on the critical path
    recovery_s: float  # back to training after a failure
    interval: int  # batches between checkpoints (1: every batch)
    replay: bool  # rerun the batches since the last complete checkpoint
    batch_j: float = 0.0  # joules of one batch (the paper's protocols: with their log)
    checkpoint_j: float = 0.0  # joules of one checkpoint beyond the batches it overlaps
    recovery_j: float = 0.0  # joules of one recovery


@dataclass(frozen=True)
class LongRun:
    scheme: Scheme
    useful_batches: int  # batches whose updates the final model holds
    samples_per_batch: int
    wall_s: float
    failures: int
    recovery_s: float
    lost_batches: int  # batches run again (replay) or whose updates were given up
    checkpoints: float = 0.0  # checkpoints taken (one cut by a failure: its share done)

    @property
    def goodput(self) -> float:
        """Samples whose updates the final model holds, per second of wall time."""
        return self.useful_batches * self.samples_per_batch / self.wall_s

    @property
    def energy_per_sample(self) -> float:
        """Joules per sample whose updates the final model holds: every batch run
        (kept, rerun or given up), every checkpoint taken and every recovery."""
        s = self.scheme
        run = self.useful_batches + self.lost_batches
        joules = run * s.batch_j + self.checkpoints * s.checkpoint_j + self.failures * s.recovery_j
        return joules / (self.useful_batches * self.samples_per_batch)

    @property
    def overhead(self) -> float:
        """Share of wall time not spent on batches whose updates were kept."""
        return 1 - self.useful_batches * self.scheme.batch_s / self.wall_s


def young_interval(checkpoint_s: float, mtbf_s: float, batch_s: float) -> int:
    """CPR's (Young's) optimal checkpoint interval in batches: sqrt(2 C M) / T."""
    return max(1, round(math.sqrt(2 * checkpoint_s * mtbf_s) / batch_s))


def exponential_gaps(mtbf_s: float, seed: int) -> Iterator[float]:
    """Times between failures, exponential with mean ``mtbf_s``, drawn in blocks."""
    rng = np.random.default_rng([seed, 7])
    while True:
        yield from rng.exponential(mtbf_s, size=256).tolist()


def long_run(
    scheme: Scheme, batches: int, samples_per_batch: int, gaps: Iterable[float]
) -> LongRun:
    """Process ``batches`` batches of data; every failure (``gaps`` apart, from the
    start or the end of the last recovery) restarts from a checkpoint boundary."""
    interval, batch_s, ckpt_s = scheme.interval, scheme.batch_s, scheme.checkpoint_s
    period = interval * batch_s + ckpt_s
    wall = recovered = checkpoints = 0.0
    processed = kept_total = lost = failures = 0
    for gap in gaps:
        need = batches - processed
        finish = need * batch_s + need // interval * ckpt_s
        if gap >= finish:
            wall += finish
            processed += need
            kept_total += need
            checkpoints += need // interval
            break
        whole, rest = divmod(gap, period)
        partial = min(int(rest // batch_s), interval)  # since the last complete checkpoint
        cut = max(rest - interval * batch_s, 0.0)  # into the checkpoint that was saving them
        checkpoints += whole + (cut / ckpt_s if ckpt_s > 0 else 0.0)
        kept = int(whole) * interval
        wall += gap + scheme.recovery_s
        recovered += scheme.recovery_s
        failures += 1
        lost += partial
        kept_total += kept
        processed += kept + (0 if scheme.replay else partial)
    else:
        raise ValueError(f"the failure gaps ran out before {batches} batches were processed")
    return LongRun(
        scheme, kept_total, samples_per_batch, wall, failures, recovered, lost, checkpoints
    )
