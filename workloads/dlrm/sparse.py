"""Vectorized embedding-bag kernels over one contiguous table (no per-row Python loops).

np.add.at is slow; pooling uses np.add.reduceat over bag starts, and gradient
accumulation sorts the lookups by row once and reduces equal-row runs.
"""

from __future__ import annotations

import numpy as np


def bag_starts(lengths: np.ndarray) -> np.ndarray:
    """Start of every bag in the flat lookup stream, for bag lengths in issue order."""
    flat = lengths.reshape(-1)
    return np.concatenate(([0], np.cumsum(flat)[:-1])).astype(np.int64)


def segment_sum(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sum consecutive runs of values (rows) of the given lengths; empty runs give zeros."""
    flat = lengths.reshape(-1)
    out_shape = (flat.shape[0], *values.shape[1:])
    if values.shape[0] == 0:
        return np.zeros(out_shape, dtype=values.dtype)
    starts = bag_starts(flat)
    sums = np.add.reduceat(values, np.minimum(starts, values.shape[0] - 1), axis=0)
    if np.any(flat == 0):
        sums[flat == 0] = 0
    return sums


def gather_sum(table: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sum-pooled embedding bags: (bags, dim) for global rows grouped in bags of lengths."""
    return segment_sum(np.take(table, rows, axis=0), lengths)


def accumulate_rows(
    rows: np.ndarray, lengths: np.ndarray, bag_grads: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per unique row, the sum of the gradients of every bag that looked it up (once per
    lookup, so duplicates inside a bag count twice). Returns (sorted unique rows, grads)."""
    dim = bag_grads.shape[-1]
    if rows.shape[0] == 0:
        return rows.copy(), np.zeros((0, dim), dtype=bag_grads.dtype)
    bag_of = np.repeat(np.arange(lengths.size), lengths.reshape(-1))
    order = np.argsort(rows)
    sorted_rows = rows[order]
    first = np.flatnonzero(np.concatenate(([True], sorted_rows[1:] != sorted_rows[:-1])))
    per_lookup = np.take(bag_grads.reshape(-1, dim), bag_of[order], axis=0)
    return sorted_rows[first], np.add.reduceat(per_lookup, first, axis=0)


def correct_pooled(
    stale: np.ndarray,
    rows: np.ndarray,
    lengths: np.ndarray,
    update_rows: np.ndarray,
    deltas: np.ndarray,
) -> np.ndarray:
    """stale pooled bags (bags, dim) plus, for every lookup of a row in update_rows
    (sorted, unique), that row's delta: the pooled bags of the updated table."""
    if update_rows.shape[0] == 0 or rows.shape[0] == 0:
        return stale.copy()
    pos = np.minimum(np.searchsorted(update_rows, rows), update_rows.shape[0] - 1)
    hit = update_rows[pos] == rows
    bag_of = np.repeat(np.arange(lengths.size), lengths.reshape(-1))
    hit_bags = bag_of[hit]  # nondecreasing: lookups are in bag order
    if hit_bags.shape[0] == 0:
        return stale.copy()
    first = np.flatnonzero(np.concatenate(([True], hit_bags[1:] != hit_bags[:-1])))
    out = stale.copy()
    out[hit_bags[first]] += np.add.reduceat(deltas[pos[hit]], first, axis=0)
    return out
