"""Long runs under failures (simulate/failures/goodput.py) against hand-worked schedules and
the exponential law."""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
import pytest

from simulate.failures.goodput import Scheme, exponential_gaps, long_run, young_interval

# 1 s batches, a 2 s checkpoint every 3 batches (a 5 s period), 5 s recovery
REPLAY = Scheme("replay", batch_s=1.0, checkpoint_s=2.0, recovery_s=5.0, interval=3, replay=True)
PARTIAL = Scheme("partial", 1.0, 2.0, 5.0, 3, replay=False)


def test_a_failure_during_a_checkpoint_loses_the_interval_it_was_saving():
    """Failure at 8.5 s: one period done (3 batches kept), 3 more batches ran and the
    checkpoint holding them was 0.5 s in. Replay: 10 useful batches take 10 s, 3
    complete checkpoints 6 s, the recovery 5 s and the lost work 3.5 s."""
    run = long_run(REPLAY, 10, 64, [8.5, math.inf])
    assert (run.failures, run.lost_batches, run.useful_batches) == (1, 3, 10)
    assert run.wall_s == pytest.approx(10 + 3 * 2 + 5 + 3.5)
    assert run.goodput == pytest.approx(10 * 64 / run.wall_s)


def test_energy_per_sample_counts_every_batch_checkpoint_and_recovery_run():
    """The 8.5 s failure again, 1 J a batch, 4 J a checkpoint, 10 J a recovery: 13
    batches run (10 kept, 3 rerun), 3 complete checkpoints and a quarter of the one
    cut (0.5 of its 2 s), one recovery, over the 10 x 64 samples kept."""
    scheme = Scheme("replay", 1.0, 2.0, 5.0, 3, True, batch_j=1.0, checkpoint_j=4.0,
                    recovery_j=10.0)  # fmt: skip
    run = long_run(scheme, 10, 64, [8.5, math.inf])
    assert run.checkpoints == pytest.approx(3.25)
    assert run.energy_per_sample == pytest.approx((13 + 3.25 * 4 + 10) / 640)


def test_partial_recovery_gives_the_lost_batches_up_instead_of_rerunning_them():
    """Same failure under CPR's rule: 6 of 10 batches consumed by then, 3 kept; the
    4 left take 4 s and one checkpoint."""
    run = long_run(PARTIAL, 10, 64, [8.5, math.inf])
    assert (run.lost_batches, run.useful_batches) == (3, 7)
    assert run.wall_s == pytest.approx(8.5 + 5 + 4 + 2)


def test_no_failure_costs_only_the_checkpoints():
    run = long_run(REPLAY, 9, 1, [math.inf])
    assert run.wall_s == 9 + 3 * 2
    assert run.overhead == pytest.approx(6 / 15)


def test_running_out_of_gaps_is_an_error_not_a_short_run():
    with pytest.raises(ValueError, match="ran out"):
        long_run(REPLAY, 10, 1, [1.0])


def test_the_number_of_failures_follows_the_mtbf():
    """Memoryless failures with no recovery time: a run of wall time W sees W / MTBF
    failures on average (Poisson); 200 seeds bound the mean within 4 standard errors."""
    scheme = Scheme("every batch", 0.01, 0.0, 0.0, 1, replay=True)
    mtbf = 50.0
    counts, walls = [], []
    for seed in range(200):
        run = long_run(scheme, 100_000, 1, exponential_gaps(mtbf, seed))
        counts.append(run.failures)
        walls.append(run.wall_s)
    expected = np.mean(walls) / mtbf  # ~20 failures
    assert abs(np.mean(counts) - expected) < 4 * math.sqrt(expected / 200)


def test_gaps_are_exponential_with_the_given_mean():
    gaps = np.fromiter(islice(exponential_gaps(3600.0, 1), 20000), float)
    assert gaps.mean() == pytest.approx(3600.0, rel=0.03)
    assert np.median(gaps) == pytest.approx(3600.0 * math.log(2), rel=0.05)


def test_young_interval_minimises_the_expected_overhead():
    """Overhead C/(K T) + K T/(2 M) is least at K T = sqrt(2 C M)."""
    c, m, t = 20.0, 86400.0, 0.01
    best = young_interval(c, m, t)
    assert best == round(math.sqrt(2 * c * m) / t)

    def cost(k: int) -> float:
        return c / (k * t) + k * t / (2 * m)

    assert cost(best) <= min(cost(int(best * 0.8)), cost(int(best * 1.25)))
