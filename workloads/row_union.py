"""How many distinct rows K batches touch: the size of a differential checkpoint.

A differential checkpoint (Check-N-Run) taken every K batches writes the union of the
rows those batches updated. Generating millions of batches to count it is out of the
question, but the generator's popularity law is known exactly: every lookup draws rank
k of a table of n rows with probability q_k (the continuous power law on [0.5, n+0.5)
rounded to the nearest rank, as ``inputs.power_law_ranks`` draws it), independently. So
after D draws the expected number of distinct rows is sum_k 1 - (1 - q_k)^D.
"""

from __future__ import annotations

import numpy as np

from workloads.models import ModelSpec


def rank_probabilities(n: int, exponent: float) -> np.ndarray:
    """q_k for ranks 0..n-1: the power law's mass between k + 0.5 and k + 1.5."""
    edges = np.arange(n + 1, dtype=np.float64) + 0.5
    if abs(exponent - 1.0) < 1e-9:
        cdf = np.log(edges / 0.5)
    else:
        e = 1.0 - exponent
        cdf = (np.power(edges, e) - 0.5**e) / e
    mass = np.diff(cdf)
    return mass / (cdf[-1] - cdf[0])


def expected_distinct_rows(
    spec: ModelSpec, batch_size: int, exponent: float, batches: np.ndarray
) -> np.ndarray:
    """Expected rows of all tables that ``batches`` consecutive batches touch (popularity
    inputs, the default), for each count in ``batches``. Draws per table and batch are
    the mean bag length (the generator's lengths are uniform on 1 .. 2p - 1) times the
    batch size."""
    counts = np.atleast_1d(np.asarray(batches, dtype=np.float64))
    total = np.zeros(counts.shape)
    per_batch = batch_size * spec.lookups_per_table
    for n in sorted(set(spec.rows_per_table)):
        tables = spec.rows_per_table.count(n)
        log_miss = np.log1p(-rank_probabilities(n, exponent))
        for i, k in enumerate(counts):
            total[i] += tables * float(np.sum(-np.expm1(k * per_batch * log_miss)))
    return total
