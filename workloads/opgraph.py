"""Per-batch demand (docs/architecture.md, workload -> board contract): GPU kernels with
FLOPs and bytes, and the embedding rows touched, independent of where the batch runs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from components.memory.rowsort import previous_matches
from workloads.inputs import Batch
from workloads.models import FLOAT_BYTES, ModelSpec

OP_NAMES = ("bottom_fwd", "interaction_top_fwd", "top_bwd_interaction", "bottom_bwd")


@dataclass(frozen=True)
class Kernel:
    name: str
    flops: int
    bytes: int


@dataclass(frozen=True, eq=False)
class EmbeddingAccess:
    rows: np.ndarray  # int64 global row ids of every lookup, table-major, issue order
    unique_rows: np.ndarray  # sorted
    counts: np.ndarray  # lookups of each unique row
    row_bytes: int
    tables: int
    lookups: int
    pooled_bytes: int  # B x T x dim x 4, reduced vectors sent to the GPU
    grad_bytes: int  # same size, bag gradients sent back
    reused_rows: int  # unique rows also touched by the previous batch
    previous_rows: np.ndarray | None = None  # the previous batch's unique rows, sorted
    previous_slot: np.ndarray | None = None  # per unique row: its index there, clipped
    previous_shared: np.ndarray | None = None  # per unique row: the previous batch has it

    @cached_property
    def inverse(self) -> np.ndarray:
        """Per lookup, the index of its row in ``unique_rows``: per-row analyses done
        once on the unique rows reach every lookup (only some boards need it, so it is
        computed when first asked for)."""
        order = np.argsort(self.rows, kind="stable")
        ordered = self.rows[order]
        inverse = np.empty(self.rows.size, dtype=np.int64)
        if ordered.size:
            inverse[order] = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
        return inverse

    @cached_property
    def reused_lookups(self) -> int:
        """Lookups of the rows the previous batch also touched (0 without one): the
        lookups a board that corrects reused rows corrects. An exact integer sum:
        build_demand's merge with the previous batch's rows counts it, on the thread
        that builds the demand."""
        if self.previous_shared is None:
            return 0
        return int(self.counts @ self.previous_shared)


@dataclass(frozen=True, eq=False)
class BatchDemand:
    kernels: dict[str, list[Kernel]]
    lookup: EmbeddingAccess
    mlp_param_bytes: int
    bottom_param_bytes: int
    top_param_bytes: int
    batch: int
    batch_size: int
    gpu_kernels: tuple[dict[str, list[Kernel]], ...] = ()
    """Data-parallel runs: each GPU's kernels for its share of the samples (empty: one
    GPU runs ``kernels``)."""

    @property
    def gpu_batch_sizes(self) -> list[int]:
        """Samples per GPU: the batch split as evenly as it goes."""
        return split_samples(self.batch_size, max(len(self.gpu_kernels), 1))


def split_samples(batch_size: int, gpus: int) -> list[int]:
    """A global batch over ``gpus`` replicas, the first ``batch_size % gpus`` one larger."""
    return [batch_size // gpus + (g < batch_size % gpus) for g in range(gpus)]


def batch_kernels(spec: ModelSpec, b: int) -> dict[str, list[Kernel]]:
    """The GPU kernels of one step over ``b`` samples."""
    inter_fwd, inter_bwd = _interaction(spec, b)
    return {
        "bottom_fwd": _fwd("bottom_fc", spec.bottom_mlp, b),
        "interaction_top_fwd": [inter_fwd, *_fwd("top_fc", spec.top_widths, b)],
        "top_bwd_interaction": [*_bwd("top_fc", spec.top_widths, b, True), inter_bwd],
        "bottom_bwd": [*_bwd("bottom_fc", spec.bottom_mlp, b, False), _optimizer_step(spec)],
    }


def gemm(name: str, m: int, n: int, k: int) -> Kernel:
    """C(m, n) = A(m, k) B(k, n): 2mnk FLOPs; reads A and B, writes C once (ReLU/sigmoid
    and bias folded in, they touch C in the same pass)."""
    return Kernel(name, 2 * m * n * k, FLOAT_BYTES * (m * k + k * n + m * n))


def _fwd(prefix: str, widths: tuple[int, ...], b: int) -> list[Kernel]:
    return [
        gemm(f"{prefix}{i}_fwd", b, n_out, n_in)
        for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True))
    ]


def _bwd(prefix: str, widths: tuple[int, ...], b: int, first_data_grad: bool) -> list[Kernel]:
    """Last layer first: data grad dX(B,in) = dZ(B,out) W(out,in), then weight grad
    dW(out,in) = dZ^T(out,B) X(B,in); no data grad into the first bottom layer's input."""
    out = []
    for i in range(len(widths) - 2, -1, -1):
        n_in, n_out = widths[i], widths[i + 1]
        if i > 0 or first_data_grad:
            out.append(gemm(f"{prefix}{i}_bwd_data", b, n_in, n_out))
        out.append(gemm(f"{prefix}{i}_bwd_weight", n_out, n_in, b))
    return out


def _interaction(spec: ModelSpec, b: int) -> tuple[Kernel, Kernel]:
    """Batched T T^T over F features of width d (2BF^2d FLOPs) and its backward
    (G + G^T) T, same FLOPs."""
    f, d = spec.interaction_features, spec.embedding_dim
    flops = 2 * b * f * f * d
    fwd = Kernel("interaction_fwd", flops, FLOAT_BYTES * (b * f * d + b * f * f))
    bwd = Kernel("interaction_bwd", flops, FLOAT_BYTES * (b * f * f + 2 * b * f * d))
    return fwd, bwd


def _optimizer_step(spec: ModelSpec) -> Kernel:
    """SGD on every MLP parameter after backward: w -= lr * g reads w and g and writes
    w (2 FLOPs, 12 bytes per parameter): bandwidth-bound on any GPU."""
    params = spec.mlp_param_count
    return Kernel("mlp_sgd_step", 2 * params, 3 * FLOAT_BYTES * params)


def build_demand(
    spec: ModelSpec,
    batch: Batch,
    batch_index: int,
    previous_batch: Batch | None,
    previous_rows: np.ndarray | None = None,
    gpus: int = 1,
) -> BatchDemand:
    """What batch batch_index asks of the GPU and of the embedding store.
    ``previous_rows``: the previous batch's sorted unique rows where the caller has
    them already (its demand's), so they are not found again; ``gpus``: data-parallel
    replicas, each given its share of the samples."""
    b = batch.batch_size
    kernels = batch_kernels(spec, b)
    gpu_kernels = ()
    if gpus > 1:
        gpu_kernels = tuple(batch_kernels(spec, share) for share in split_samples(b, gpus))
    rows = batch.global_rows(spec.table_offsets)
    unique, counts = batch.distinct_rows(spec.table_offsets, rows)
    reused, lookups, prev, slot, shared = 0, 0, None, None, None
    if previous_batch is not None:
        prev = previous_rows
        if prev is None:
            prev = previous_batch.distinct_rows(spec.table_offsets)[0]
        slot, shared, reused, lookups = previous_matches(prev, unique, counts)
    pooled = b * spec.num_tables * spec.row_bytes
    access = EmbeddingAccess(
        rows=rows,
        unique_rows=unique,
        counts=counts,
        row_bytes=spec.row_bytes,
        tables=spec.num_tables,
        lookups=int(rows.shape[0]),
        pooled_bytes=pooled,
        grad_bytes=pooled,
        reused_rows=reused,
        previous_rows=prev,
        previous_slot=slot,
        previous_shared=shared,
    )
    vars(access)["reused_lookups"] = lookups  # cached_property's own slot: counted above
    return BatchDemand(
        kernels=kernels,
        lookup=access,
        mlp_param_bytes=spec.mlp_param_bytes,
        bottom_param_bytes=spec.bottom_param_count * FLOAT_BYTES,
        top_param_bytes=spec.top_param_count * FLOAT_BYTES,
        batch=batch_index,
        batch_size=b,
        gpu_kernels=gpu_kernels,
    )
