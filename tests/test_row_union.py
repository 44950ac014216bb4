"""The expected union of rows over K batches (workloads/row_union.py) against the
generator's own batches."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.inputs import DEFAULT_ZIPF_EXPONENT, InputGenerator
from workloads.models import get_model
from workloads.opgraph import build_demand
from workloads.row_union import expected_distinct_rows, rank_probabilities


@pytest.mark.parametrize("exponent", [0.8, 1.0, 1.05, 1.5])
def test_rank_probabilities_sum_to_one_and_fall_with_rank(exponent):
    q = rank_probabilities(1000, exponent)
    assert q.sum() == pytest.approx(1.0)
    assert np.all(np.diff(q) < 0)


@pytest.mark.parametrize("exponent", [0.8, DEFAULT_ZIPF_EXPONENT, 1.3])
def test_the_expected_union_matches_the_generators_batches(exponent):
    spec = get_model("rmc1")
    generator = InputGenerator(spec, 64, seed=3, zipf_exponent=exponent)
    union, previous, measured = np.zeros(0, dtype=np.int64), None, {}
    for n in range(20):
        batch = generator.batch(n)
        union = np.union1d(union, build_demand(spec, batch, n, previous).lookup.unique_rows)
        previous = batch
        measured[n + 1] = len(union)
    counts = np.array([1, 5, 20])
    expected = expected_distinct_rows(spec, 64, exponent, counts)
    for k, value in zip(counts, expected, strict=True):
        assert measured[k] == pytest.approx(value, rel=0.01)


def test_the_union_saturates_at_the_table_size():
    spec = get_model("rmc1").capped(50)
    (value,) = expected_distinct_rows(spec, 64, 1.05, np.array([10_000]))
    assert value == pytest.approx(spec.total_rows, rel=1e-6)
