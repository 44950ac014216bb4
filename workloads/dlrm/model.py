"""Numpy DLRM with the reference semantics of facebookresearch/dlrm dlrm_s_pytorch.py.

The training step is split into the pieces the timing and failure models interleave:
lookup -> forward_backward -> embedding_update -> apply_rows, and apply_mlp. All embedding
tables live in ONE contiguous (total_rows, dim) float32 array indexed by global row id,
which is exactly what the persistence model images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from workloads.dlrm import dense, sparse
from workloads.inputs import Batch
from workloads.models import ModelSpec

Optimizer = Literal["sgd", "adagrad"]
ADAGRAD_EPS = 1e-10  # dlrm's RowWiseSparseAdagrad default eps


@dataclass(frozen=True, eq=False)
class Grads:
    """Gradients of one batch: MLP (dW, db) per layer (bottom then top) and the
    gradient of every pooled bag (T, B, dim), which is what travels back to CXL-MEM."""

    mlp: list[dense.Layer]
    bags: np.ndarray


class DLRM:
    """Trainable DLRM. Optimizers: 'sgd' (sparse row updates) or 'adagrad', dlrm's
    rwsadagrad: embeddings keep one accumulator per row, acc[r] += mean_j(g[r, j]^2) over
    the coalesced row gradient, w[r] -= lr * g[r] / (sqrt(acc[r]) + eps); MLP parameters
    use plain element-wise Adagrad, acc += g^2, w -= lr * g / (sqrt(acc) + eps)."""

    def __init__(
        self, spec: ModelSpec, *, lr: float = 0.1, optimizer: Optimizer = "sgd", seed: int = 0
    ) -> None:
        if optimizer not in ("sgd", "adagrad"):
            raise ValueError(f"optimizer must be 'sgd' or 'adagrad', got {optimizer!r}")
        self.spec = spec
        self.lr = lr
        self.optimizer = optimizer
        rng = np.random.default_rng(seed)
        self.table = np.empty((spec.total_rows, spec.embedding_dim), dtype=np.float32)
        for off, n, full in zip(
            spec.table_offsets, spec.rows_per_table, spec.init_rows, strict=True
        ):
            bound = np.float32(np.sqrt(1.0 / full))  # the uncapped size (ModelSpec.capped)
            block = rng.random((n, spec.embedding_dim), dtype=np.float32)
            self.table[off : off + n] = block * (2 * bound) - bound
        self.bottom = dense.init_mlp(spec.bottom_mlp, rng)
        self.top = dense.init_mlp(spec.top_widths, rng)
        self._row_acc = (
            np.zeros(spec.total_rows, dtype=np.float32) if optimizer == "adagrad" else None
        )
        self._mlp_acc = [(np.zeros_like(w), np.zeros_like(b)) for w, b in self.mlp_layers]

    @property
    def mlp_layers(self) -> list[dense.Layer]:
        return self.bottom + self.top

    def mlp_flat(self) -> np.ndarray:
        """All MLP parameters as one float32 vector: W0, b0, W1, b1, ... bottom then top."""
        return np.concatenate([p.reshape(-1) for layer in self.mlp_layers for p in layer])

    def load_mlp_flat(self, flat: np.ndarray) -> None:
        if flat.shape != (self.spec.mlp_param_count,):
            raise ValueError(f"expected {self.spec.mlp_param_count} parameters, got {flat.shape}")
        pos = 0
        for w, b in self.mlp_layers:
            for p in (w, b):
                p[...] = flat[pos : pos + p.size].reshape(p.shape)
                pos += p.size

    def lookup(self, batch: Batch, table: int | None = None) -> np.ndarray:
        """Sum-pooled bags: (T, B, dim) for all tables, or (B, dim) for one table. Runs
        table by table: per-table temporaries stay in cache (5x faster than one pass)."""
        offsets = self.spec.table_offsets
        if table is not None:
            rows = batch.indices[table] + offsets[table]
            return sparse.gather_sum(self.table, rows, np.diff(batch.offsets[table]))
        shape = (self.spec.num_tables, batch.batch_size, self.spec.embedding_dim)
        pooled = np.empty(shape, dtype=np.float32)
        for t in range(self.spec.num_tables):
            pooled[t] = self.lookup(batch, t)
        return pooled

    def _forward(self, batch: Batch, pooled: np.ndarray):
        x, bottom_in = dense.mlp_forward(self.bottom, batch.dense, sigmoid_last=False)
        top_x, feats = dense.interact(x, pooled)
        p, top_in = dense.mlp_forward(self.top, top_x, sigmoid_last=True)
        return p[:, 0], (x, bottom_in, feats, top_in)

    def predict(self, batch: Batch) -> np.ndarray:
        """Click probabilities (B,) on the current parameters."""
        return self._forward(batch, self.lookup(batch))[0]

    def forward_backward(self, batch: Batch, pooled: np.ndarray) -> tuple[float, Grads]:
        """Mean BCE loss (log clamped at -100 like torch.nn.BCELoss) and all gradients."""
        p, (x, bottom_in, feats, top_in) = self._forward(batch, pooled)
        y = batch.labels
        with np.errstate(divide="ignore"):
            log_p, log_q = np.maximum(np.log(p), -100), np.maximum(np.log1p(-p), -100)
        loss = -np.mean(y * log_p + (1 - y) * log_q)
        gz = ((p - y) / np.float32(y.shape[0]))[:, None].astype(np.float32)
        top_grads, grad_r = dense.mlp_backward(self.top, top_in, gz, need_input_grad=True)
        grad_x, bag_grads = dense.interact_backward(grad_r, feats)
        bottom_grads, _ = dense.mlp_backward(
            self.bottom, bottom_in, grad_x * (x > 0), need_input_grad=False
        )
        return float(loss), Grads(bottom_grads + top_grads, np.ascontiguousarray(bag_grads))

    def data_parallel_forward_backward(
        self, batch: Batch, pooled: np.ndarray, sizes: list[int]
    ) -> tuple[float, Grads]:
        """Synchronous data parallelism: each replica's gradients of the mean loss over
        its ``sizes[g]`` samples, all-reduced with weights B_g / B (the global batch's
        mean loss, so the step equals one replica's on the whole batch up to float32
        rounding). The bag gradients stay with their samples, scaled alike."""
        loss, mlp, bags, start = 0.0, None, [], 0
        for size in sizes:
            part_loss, grads = self.forward_backward(
                batch.samples(start, start + size), pooled[:, start : start + size]
            )
            weight = np.float32(size / batch.batch_size)
            loss += float(weight) * part_loss
            scaled = [(gw * weight, gb * weight) for gw, gb in grads.mlp]
            mlp = scaled if mlp is None else [
                (aw + gw, ab + gb) for (aw, ab), (gw, gb) in zip(mlp, scaled, strict=True)
            ]  # fmt: skip
            bags.append(grads.bags * weight)
            start += size
        return loss, Grads(mlp, np.ascontiguousarray(np.concatenate(bags, axis=1)))

    def embedding_update(
        self, batch: Batch, bag_grads: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sorted unique global rows the batch updates and their new values. Does not
        write the table (apply_rows does), but advances the Adagrad row accumulators, so
        call it once per batch."""
        per_table = [
            sparse.accumulate_rows(idx + off, np.diff(bag_off), bag_grads[t])
            for t, (idx, off, bag_off) in enumerate(
                zip(batch.indices, self.spec.table_offsets, batch.offsets, strict=True)
            )
        ]  # tables own disjoint, increasing global ranges: concatenation stays sorted
        rows = np.concatenate([r for r, _ in per_table])
        grads = np.concatenate([g for _, g in per_table])
        old = self.table[rows]
        if self._row_acc is None:
            return rows, old - self.lr * grads
        acc = self._row_acc[rows] + np.mean(grads * grads, axis=1)
        self._row_acc[rows] = acc
        return rows, old - grads * (self.lr / (np.sqrt(acc) + ADAGRAD_EPS))[:, None]

    def apply_rows(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.table[rows] = values

    def apply_mlp(self, grads: Grads) -> None:
        for (w, b), (gw, gb), (aw, ab) in zip(
            self.mlp_layers, grads.mlp, self._mlp_acc, strict=True
        ):
            for p, g, acc in ((w, gw, aw), (b, gb, ab)):
                if self.optimizer == "sgd":
                    p -= self.lr * g
                else:
                    acc += g * g
                    p -= self.lr * g / (np.sqrt(acc) + ADAGRAD_EPS)

    def train_step(self, batch: Batch) -> float:
        """One strict step: lookup, forward/backward, embedding and MLP updates."""
        loss, grads = self.forward_backward(batch, self.lookup(batch))
        self.apply_rows(*self.embedding_update(batch, grads.bags))
        self.apply_mlp(grads)
        return loss

    def relaxed_lookup(
        self,
        batch_next: Batch,
        stale_pooled: np.ndarray,
        update_rows: np.ndarray,
        update_deltas: np.ndarray,
    ) -> np.ndarray:
        """Batch N+1's pooled bags from a lookup on batch N's pre-update table
        (stale_pooled, (T, B, dim)) corrected by batch N's update (sorted unique rows and
        deltas = new - old values). Sum and add commute in exact arithmetic, not in float32:
        the result is NOT bit-identical to the strict lookup in general. Per element of a
        bag with P lookups of old values w_k, deltas d_k and new values v_k (float32,
        unit roundoff u = 2^-24, eps = 2u):
            |relaxed - strict| <= (P + 2) * eps * (sum|w_k| + sum|d_k| + sum|v_k|),
        from the sequential-sum error bounds (P-1)u sum|.| of the three sums plus the
        final add and the rounding of d_k = fl(v_k - w_k) (exact when v_k, w_k are
        within a factor of 2, Sterbenz)."""
        pooled = sparse.correct_pooled(
            stale_pooled.reshape(-1, self.spec.embedding_dim),
            batch_next.global_rows(self.spec.table_offsets),
            batch_next.bag_lengths(),
            update_rows,
            update_deltas,
        )
        return pooled.reshape(stale_pooled.shape)
