"""Seeded synthetic DLRM batches: Criteo-like dense features, power-law sparse indices and
labels from a planted teacher, so that training has something to learn and AUC means
something. Batch i depends only on (seed, i), so a recovered run can replay any batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from components.memory.rowsort import unique_counts
from workloads.models import DEFAULT_BATCH_SIZE, ModelSpec
from workloads.rowgen import affine_rows, row_scores, scale_and_shift

DEFAULT_ZIPF_EXPONENT = 1.05
"""Rank-frequency exponent of row popularity. Criteo's categorical values are heavy-tailed,
close to Zipf's law (exponent about 1); docs/workloads.md gives the reuse this yields."""
MAX_ZIPF_EXPONENT = 5.0
"""Beyond this nearly every lookup hits a table's hottest row: no input data set is so
skewed (Criteo's fields fit exponents near 1), and the inverse CDF loses precision."""
DEFAULT_TEACHER_SCALE = 3.0
"""Teacher logit scale: larger means less label noise (a higher reachable AUC)."""
DEFAULT_TEACHER_BIAS = -2.0
"""Teacher logit offset: 26-28% positives, close to Criteo Kaggle's 25.6%."""


@dataclass(frozen=True, eq=False)
class DistinctRows:
    """A batch's sorted distinct global rows and how often each is looked up, as found
    with ``table_offsets``: runs that share a batch share them too (shared_inputs.py)."""

    table_offsets: tuple[int, ...]
    rows: np.ndarray
    counts: np.ndarray


@dataclass(frozen=True, eq=False)
class Batch:
    """One training batch in DLRM's layout: per-table flat indices and bag offsets."""

    dense: np.ndarray  # (B, dense_features) float32
    indices: list[np.ndarray]  # per table, int64 row ids within the table, bag after bag
    offsets: list[np.ndarray]  # per table, int64, length B+1, offsets[t][-1] == len(indices[t])
    labels: np.ndarray  # (B,) float32 in {0, 1}
    distinct: DistinctRows | None = None  # found already, where another run stored them
    # the global rows with the table offsets they were made with, where the maker had them
    made_rows: tuple[tuple[int, ...], np.ndarray] | None = None

    @property
    def batch_size(self) -> int:
        return int(self.labels.shape[0])

    def global_rows(self, table_offsets: np.ndarray) -> np.ndarray:
        """Global row ids of every lookup, table-major, in issue order."""
        made = self.made_rows
        if made is not None and made[0] == tuple(int(o) for o in table_offsets):
            return made[1]
        return np.concatenate(
            [idx + off for idx, off in zip(self.indices, table_offsets, strict=True)]
        )

    def distinct_rows(
        self, table_offsets: np.ndarray, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The sorted distinct global rows and their lookup counts: those the batch
        carries where they were found with these table offsets, else sorted now (from
        ``rows``, the global rows, where the caller has them)."""
        found = self.distinct
        if found is not None and found.table_offsets == tuple(int(o) for o in table_offsets):
            return found.rows, found.counts
        return unique_counts(self.global_rows(table_offsets) if rows is None else rows)

    def bag_lengths(self) -> np.ndarray:
        """(T, B) number of lookups in every bag."""
        return np.stack([np.diff(off) for off in self.offsets])

    def samples(self, start: int, stop: int) -> Batch:
        """Samples [start, stop): one data-parallel replica's share of the batch."""
        indices = [
            idx[off[start] : off[stop]] for idx, off in zip(self.indices, self.offsets, strict=True)
        ]
        offsets = [off[start : stop + 1] - off[start] for off in self.offsets]
        return Batch(self.dense[start:stop], indices, offsets, self.labels[start:stop])


class BatchSource:
    """What a run draws its batches from: the generator, or a trace (workloads/traces.py).
    Batch i must be the same whenever it is asked for, so recovery can replay it.
    Subclasses set ``batch_size`` and give ``batch``."""

    batch_size: int

    def batch(self, index: int) -> Batch:
        raise NotImplementedError

    def batches(self, count: int, start: int = 0) -> Iterator[Batch]:
        """Batches start .. start + count - 1, in order."""
        for i in range(start, start + count):
            yield self.batch(i)


def power_law_ranks(rng: np.random.Generator, rows: np.ndarray, exponent: float) -> np.ndarray:
    """Popularity ranks (0 = hottest) with P(rank k) ~ (k+1)^-exponent, one per entry of
    rows: power_law_draws rounded to the nearest integer (capped at the last row)."""
    x = power_law_draws(rng, rows, exponent)
    return np.minimum(np.floor(x + 0.5).astype(np.int64) - 1, rows - 1)


def power_law_draws(
    rng: np.random.Generator, rows: np.ndarray, exponent: float, counts: np.ndarray | None = None
) -> np.ndarray:
    """Draws of the continuous power law on [0.5, n+0.5) by inverse CDF, one per entry
    of rows, or with ``counts`` counts[t] for entry t in turn (the table sizes' powers
    are then taken once per table, not once per lookup: the same numbers).

    Rounded to the nearest integer, the midpoint rule makes rank k's mass match k^-s
    within 1% for k >= 2 (rank 1 gets ln 3 instead of 1 at s = 1) and needs no
    per-table CDF array, so tables of tens of millions of rows cost nothing.
    """

    def spread(per_row: np.ndarray) -> np.ndarray:
        return per_row if counts is None else np.repeat(per_row, counts)

    n = rows.astype(np.float64)
    u = rng.random(rows.shape[0] if counts is None else int(counts.sum()))
    lo = 0.5
    hi = n + 0.5
    if abs(exponent - 1.0) < 1e-9:
        return lo * np.power(spread(hi / lo), u)
    e = 1.0 - exponent
    a = lo**e
    if counts is None:
        u *= np.power(hi, e) - a  # in place: a + u * (...) without two temporaries
        u += a  # (IEEE addition commutes: the same numbers)
    else:
        scale_and_shift(u, np.power(hi, e) - a, counts, a)
    return np.power(u, 1.0 / e, out=u)


def _coprime_multipliers(rows: tuple[int, ...], seed: int) -> np.ndarray:
    """Per table a multiplier coprime with its size, near a random fraction of it."""
    rng = np.random.default_rng([seed, 2])
    out = []
    for n in rows:
        a = int(n * rng.uniform(0.3, 0.7)) | 1
        while np.gcd(a, n) != 1:
            a += 1
        out.append(a % n if n > 1 else 0)
    return np.asarray(out, dtype=np.int64)


class InputGenerator(BatchSource):
    """Batches for one model: dense ~ log1p(log-normal counts), indices ~ power law over a
    per-table affine permutation of the rows (hot rows spread across the table), labels ~
    Bernoulli(sigmoid(teacher)) with a fixed linear teacher over dense + row scores."""

    def __init__(
        self,
        spec: ModelSpec,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        zipf_exponent: float = DEFAULT_ZIPF_EXPONENT,
        reuse: float | None = None,
        fixed_pooling: bool = True,
        teacher_scale: float = DEFAULT_TEACHER_SCALE,
        teacher_bias: float = DEFAULT_TEACHER_BIAS,
        seed: int = 0,
    ) -> None:
        if batch_size < 1 or not 0 < zipf_exponent <= MAX_ZIPF_EXPONENT:
            raise ValueError(
                f"need batch_size >= 1 and 0 < exponent <= {MAX_ZIPF_EXPONENT}, "
                f"got {batch_size} and {zipf_exponent}"
            )
        if reuse is not None and not 0.0 <= reuse <= 1.0:
            raise ValueError(f"reuse must be in [0, 1], got {reuse}")
        self.spec = spec
        self.reuse = reuse
        self.batch_size = batch_size
        self.zipf_exponent = zipf_exponent
        self.fixed_pooling = fixed_pooling
        self.teacher_scale = teacher_scale
        self.teacher_bias = teacher_bias
        self.seed = seed
        rng = np.random.default_rng([seed, 0])
        d = spec.dense_features
        self._mu = rng.uniform(0.0, 3.0, d)
        self._sigma = rng.uniform(1.0, 2.0, d)
        v = rng.normal(size=d)
        self._dense_weights = v / np.linalg.norm(v)
        self._rows = np.asarray(spec.rows_per_table, dtype=np.int64)
        self._multipliers = _coprime_multipliers(spec.rows_per_table, seed)
        self._shifts = rng.integers(0, self._rows)
        self._window = self._working_set_sizes() if reuse is not None else None
        self._bag_mean, self._bag_std = self._calibrate_teacher()

    def _working_set_sizes(self) -> np.ndarray:
        """Per table, the distinct rows of a batch drawn by popularity alone (one seeded
        draw): with ``reuse``, every batch touches that many, so moving the reuse moves
        which rows a batch touches, not how many."""
        rng = np.random.default_rng([self.seed, 4])
        distinct = np.unique(self._popular_rows(rng, self._lengths(rng, self.batch_size))[0])
        table = np.searchsorted(self.spec.table_offsets, distinct, side="right") - 1
        return np.bincount(table, minlength=self.spec.num_tables)

    def _calibrate_teacher(self, samples: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Per-table mean and std of bag score sums: hot rows give every bag the same
        offset, which would otherwise swamp the signal and skew the click rate."""
        rng = np.random.default_rng([self.seed, 3])
        lengths = self._lengths(rng, samples)
        sums = self._bag_scores(self._popular_rows(rng, lengths)[0], lengths)
        return sums.mean(axis=1, keepdims=True), sums.std(axis=1, keepdims=True) + 1e-12

    def _lengths(self, rng: np.random.Generator, b: int) -> np.ndarray:
        t, p = self.spec.num_tables, self.spec.lookups_per_table
        if self.fixed_pooling:
            return np.full((t, b), p, dtype=np.int64)
        return rng.integers(1, 2 * p, size=(t, b))

    def _sample_rows(
        self, rng: np.random.Generator, lengths: np.ndarray, index: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Global and table-local row ids of batch ``index``, table-major, for bags of
        (T, B) lengths."""
        if self.reuse is None:
            return self._popular_rows(rng, lengths)
        return self._windowed_rows(rng, lengths, index)

    def _popular_rows(
        self, rng: np.random.Generator, lengths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Global and table-local rows by popularity alone: every lookup a power-law
        rank over the whole table, so consecutive batches share only the rows popular
        enough to be drawn twice."""
        counts = lengths.sum(axis=1)
        draws = power_law_draws(rng, self._rows, self.zipf_exponent, counts)
        offsets = np.asarray(self.spec.table_offsets, dtype=np.int64)
        return affine_rows(draws, counts, self._rows, self._multipliers, self._shifts, offsets)

    def _windowed_rows(
        self, rng: np.random.Generator, lengths: np.ndarray, index: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Global and table-local rows with a set reuse. Per table, batch ``index``
        touches a window of ``size`` consecutive positions of a fixed stream (position j
        is row j mod n through the table's affine permutation: a window holds distinct
        rows), and each window starts round((1 - reuse) * size) positions after the
        previous batch's, so consecutive batches share that fraction of their rows and
        batch i still depends only on (seed, i). Every window row is looked up once; the
        other lookups pick window rows by popularity, a power law over the rows ranked by
        a heat fixed per position (a row keeps its heat while it stays in the windows)."""
        out, local = [], []
        for t, bags in enumerate(lengths):
            total, n = int(bags.sum()), int(self._rows[t])
            size = int(min(self._window[t], total, n))
            step = int(round((1.0 - self.reuse) * size))
            positions = index * step + np.arange(size, dtype=np.int64)
            heat = row_scores(positions * len(lengths) + t, self.seed + 1)
            by_heat = positions[np.argsort(-heat, kind="stable")]
            ranks = power_law_ranks(rng, np.full(total - size, size), self.zipf_exponent)
            picks = rng.permutation(np.concatenate([by_heat, by_heat[ranks]]))
            rows = (picks % n * self._multipliers[t] + self._shifts[t]) % n
            out.append(rows + self.spec.table_offsets[t])
            local.append(rows)
        return np.concatenate(out), np.concatenate(local)

    def _bag_scores(self, global_rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """(T, B) sum of teacher row scores per bag."""
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        sums = np.add.reduceat(row_scores(global_rows, self.seed), starts)
        return sums.reshape(lengths.shape)

    def batch(self, index: int) -> Batch:
        """Batch number index (deterministic in seed and index)."""
        rng = np.random.default_rng([self.seed, 1, index])
        spec, b = self.spec, self.batch_size
        latent = rng.normal(size=(b, spec.dense_features))
        counts = np.floor(np.exp(self._mu + self._sigma * latent))
        dense = np.log1p(counts).astype(np.float32)
        lengths = self._lengths(rng, b)
        global_rows, local = self._sample_rows(rng, lengths, index)
        # whole-batch arrays, split into per-table views: a pass per table would hand
        # the GIL back and forth with the engine's thread 26 times (simulate/run/prefetch.py)
        per_table = lengths.sum(axis=1)
        indices = np.split(local, np.cumsum(per_table)[:-1])
        offsets = np.zeros((lengths.shape[0], b + 1), dtype=np.int64)
        np.cumsum(lengths, axis=1, out=offsets[:, 1:])
        logits = self._teacher(latent, global_rows, lengths)
        labels = (rng.random(b) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
        made = (tuple(int(o) for o in spec.table_offsets), global_rows)
        return Batch(dense, indices, list(offsets), labels, made_rows=made)

    def _teacher(
        self, latent: np.ndarray, global_rows: np.ndarray, lengths: np.ndarray
    ) -> np.ndarray:
        """Planted logit: unit-variance dense and embedding parts, scaled and offset."""
        bags = (self._bag_scores(global_rows, lengths) - self._bag_mean) / self._bag_std
        emb = bags.sum(axis=0) / np.sqrt(lengths.shape[0])
        dense = latent @ self._dense_weights
        return self.teacher_scale * (dense + emb) / np.sqrt(2.0) + self.teacher_bias


def reuse_fraction(previous: Batch, current: Batch, table_offsets: np.ndarray) -> float:
    """Fraction of current's unique rows that previous also touched (the paper's ~80%)."""
    cur = np.unique(current.global_rows(table_offsets))
    prev = np.unique(previous.global_rows(table_offsets))
    return float(np.isin(cur, prev, assume_unique=True).mean())


def lookup_reuse_fraction(previous: Batch, current: Batch, table_offsets: np.ndarray) -> float:
    """Fraction of current's lookups (with repeats) that hit a row previous touched."""
    prev = np.unique(previous.global_rows(table_offsets))
    return float(np.isin(current.global_rows(table_offsets), prev).mean())
