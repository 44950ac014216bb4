"""Generated lookups' row ids and teacher scores, compiled.

A batch draws one power-law rank per lookup and maps it through its table's affine
permutation; the teacher hashes every row id. In numpy each step is a pass over the
10^5-10^6 lookups with a gather of per-table values; here one pass per table segment
scales the uniform draws, one does the integer arithmetic and one the hash. The
floating-point power stays numpy's.
Results are the numpy definitions' bit for bit (tests/test_workload_rowgen.py).
"""

from __future__ import annotations

import numpy as np

from components import compiled

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_SQRT3 = float(np.sqrt(3.0))
EXACT_ROWS = 1 << 26
"""Tables up to this many rows have rank * multiplier + shift < 2**53: exact as a
float, so its quotient by the rows is within one of the true one (an integer
division costs ~3x the whole rest of the loop)."""


@compiled.kernel
def _affine_rows(draws, counts, rows, multipliers, shifts, offsets):  # pragma: no cover
    out = np.empty(draws.size, dtype=np.int64)
    local = np.empty(draws.size, dtype=np.int64)
    i = 0
    for t in range(counts.size):
        n, a, b, base = rows[t], multipliers[t], shifts[t], offsets[t]
        exact = n <= EXACT_ROWS
        for _ in range(counts[t]):
            rank = min(np.int64(np.floor(draws[i] + 0.5)) - 1, n - 1)
            v = rank * a + b
            if exact:  # v % n by a float quotient, off by at most one, corrected
                r = v - np.int64(v / n) * n
                if r < 0:
                    r += n
                elif r >= n:
                    r -= n
            else:
                r = v % n
            local[i] = r
            out[i] = r + base
            i += 1
    return out, local


def affine_rows(
    draws: np.ndarray,
    counts: np.ndarray,
    rows: np.ndarray,
    multipliers: np.ndarray,
    shifts: np.ndarray,
    offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Global and table-local row ids of continuous power-law ``draws``, ``counts[t]``
    of table t in turn: each rounded to a rank (0 = hottest) below the table's
    ``rows``, through the table's permutation rank * multiplier + shift (mod rows);
    a global id adds its table's offset. Both come from one pass: a batch keeps the
    local ids as its per-table indices."""
    if compiled.COMPILED:
        return _affine_rows(draws, counts, rows, multipliers, shifts, offsets)
    n = np.repeat(rows, counts)
    ranks = np.minimum(np.floor(draws + 0.5).astype(np.int64) - 1, n - 1)
    spread = np.repeat(multipliers, counts), np.repeat(shifts, counts)
    local = (ranks * spread[0] + spread[1]) % n
    return local + np.repeat(offsets, counts), local


@compiled.kernel
def _scaled_shifted(u, scales, counts, shift):  # pragma: no cover - compiled
    i = 0
    for t in range(counts.size):
        scale = scales[t]
        for _ in range(counts[t]):
            u[i] = u[i] * scale + shift  # two roundings: numba emits no fused multiply-add
            i += 1


def scale_and_shift(u: np.ndarray, scales: np.ndarray, counts: np.ndarray, shift: float) -> None:
    """u = u * scales[t] + shift in place, for ``counts[t]`` entries of table t in turn:
    numpy's two passes over a per-entry copy of the scales, the same numbers."""
    if compiled.COMPILED and u.dtype == scales.dtype == np.float64:
        _scaled_shifted(u, scales, counts, shift)
        return
    u *= np.repeat(scales, counts)
    u += shift


@compiled.kernel
def _hashed_scores(global_rows, salt):  # pragma: no cover - compiled
    out = np.empty(global_rows.size)
    golden, mix1, mix2 = np.uint64(_GOLDEN), np.uint64(_MIX1), np.uint64(_MIX2)
    s30, s27, s31, s11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
    for i in range(global_rows.size):
        z = np.uint64(global_rows[i]) + salt
        z = z + golden
        z = (z ^ (z >> s30)) * mix1
        z = (z ^ (z >> s27)) * mix2
        z = z ^ (z >> s31)
        u = np.float64(z >> s11) * 2.0**-53
        out[i] = (u * 2.0 - 1.0) * _SQRT3
    return out


def row_scores(global_rows: np.ndarray, seed: int) -> np.ndarray:
    """Teacher weight of each row: a hashed uniform value with unit variance (splitmix64),
    so the teacher needs no per-row table even for billions of rows."""
    salt = np.uint64((seed * _GOLDEN) % 2**64)
    if compiled.COMPILED and global_rows.dtype == np.int64:
        return _hashed_scores(global_rows, salt)
    z = global_rows.astype(np.uint64) + salt
    z = z + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return (u * 2.0 - 1.0) * np.sqrt(3.0)
