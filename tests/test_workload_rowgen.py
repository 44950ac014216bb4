"""The compiled lookup rows and teacher scores (workloads/rowgen.py) equal their numpy
definitions bit for bit; without numba they are those definitions (skipped)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_path import numpy_path

from components import compiled
from workloads import rowgen
from workloads.inputs import power_law_draws

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="numba not installed")


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.lists(st.one_of(st.integers(1, 2**26), st.integers(2**26, 10**9)), min_size=1, max_size=6),
    st.sampled_from([0.5, 1.0, 1.05, 2.0]),
)
def test_affine_rows_match_numpy(seed, sizes, exponent):
    rng = np.random.default_rng(seed)
    rows = np.array(sizes, dtype=np.int64)
    counts = rng.integers(0, 50, rows.size)
    draws = power_law_draws(rng, rows, exponent, counts)
    multipliers = rng.integers(0, rows)
    shifts = rng.integers(0, rows)
    offsets = np.concatenate(([0], np.cumsum(rows)[:-1]))
    args = (draws, counts, rows, multipliers, shifts, offsets)
    got = rowgen.affine_rows(*args)
    want = numpy_path(compiled, lambda: rowgen.affine_rows(*args))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[0] - got[1], np.repeat(offsets, counts))


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.lists(st.integers(0, 40), min_size=1, max_size=6),
    st.floats(-(2.0**60), 2.0**60),
)
def test_scale_and_shift_rounds_as_numpy(seed, counts, shift):
    """One pass, two roundings per entry: numpy's multiply pass then add pass, bit for
    bit (a fused multiply-add would differ in the last bit)."""
    rng = np.random.default_rng(seed)
    counts = np.array(counts, dtype=np.int64)
    scales = rng.random(counts.size) * 10.0 ** rng.integers(-8, 9, counts.size)
    u = rng.random(int(counts.sum()))
    want = u.copy()
    numpy_path(compiled, lambda: rowgen.scale_and_shift(want, scales, counts, shift))
    rowgen.scale_and_shift(u, scales, counts, shift)
    assert u.tobytes() == want.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**40), st.integers(1, 500))
def test_row_scores_match_numpy(seed, top, size):
    rows = np.random.default_rng(seed).integers(0, top + 1, size)
    got = rowgen.row_scores(rows, seed)
    assert got.tobytes() == numpy_path(compiled, lambda: rowgen.row_scores(rows, seed)).tobytes()
