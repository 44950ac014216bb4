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
    """One GPU kernel: its FLOPs and device-memory bytes; ``kind`` says what bounds it
    (``gemm``: a cuBLAS GEMM of shape ``gemm`` = (batch, m, n, k); ``optimizer``: the
    parameter update a data-parallel step runs after its all-reduce; otherwise a
    bandwidth-bound elementwise, reduction, copy, fill, sort or gather kernel)."""

    name: str
    flops: int
    bytes: int
    kind: str = "elementwise"
    gemm: tuple[int, int, int, int] | None = None


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
    """The GPU kernels of one training step over ``b`` samples, as PyTorch 2 runs
    facebookresearch/dlrm's ``dlrm_s_pytorch.py`` in eager mode on CUDA (FP32; the
    embedding bags run on the CXL-MEM, so their kernels are not here). What each
    PyTorch op launches (docs/gpu.md lists the mapping, tests/test_opgraph_kernels.py
    checks it against the operators a torch run of the same step dispatches):
    ``nn.Linear`` one cuBLASLt GEMM with the bias in its epilogue; ``ReLU`` and
    ``Sigmoid`` one elementwise kernel each; the dot interaction a concatenation,
    a batched GEMM, the lower-triangle gather and a second concatenation; ``MSELoss``
    an elementwise kernel and a mean; autograd seeds the backward with a fill; each
    ``Linear``'s backward is a data-gradient GEMM (not into the dense input), a
    weight-gradient GEMM and a bias reduction; the gather's backward zero-fills,
    sorts the pair indices and scatter-adds; two gradients meeting one tensor are
    added; SGD updates every parameter with multi-tensor ``_foreach_add_`` launches."""
    bottom, top = spec.bottom_mlp, spec.top_widths
    return {
        "bottom_fwd": _mlp_fwd("bottom_fc", bottom, b, sigmoid_last=False),
        "interaction_top_fwd": [
            *_interaction_fwd(spec, b),
            *_mlp_fwd("top_fc", top, b, sigmoid_last=True),
            *_loss_fwd(b),
        ],
        "top_bwd_interaction": [
            *_loss_bwd(b),
            *_mlp_bwd("top_fc", top, b, sigmoid_last=True, input_grad=True),
            *_interaction_bwd(spec, b),
        ],
        "bottom_bwd": [
            *_mlp_bwd("bottom_fc", bottom, b, sigmoid_last=False, input_grad=False),
            *optimizer_kernels(spec),
        ],
    }


def gemm(name: str, m: int, n: int, k: int, batch: int = 1, bias: bool = False) -> Kernel:
    """C(m, n) = A(m, k) B(k, n) (``batch`` of them): 2mnk FLOPs; reads A and B and
    writes C once; ``bias`` adds a broadcast row in the epilogue (m n FLOPs, n reads)."""
    flops = batch * 2 * m * n * k + (m * n if bias else 0)
    elements = batch * (m * k + k * n + m * n) + (n if bias else 0)
    return Kernel(name, flops, FLOAT_BYTES * elements, "gemm", (batch, m, n, k))


def elementwise(name: str, elements: int, reads: int, kind: str = "elementwise") -> Kernel:
    """One pass over ``elements`` outputs reading ``reads`` inputs of the same size."""
    return Kernel(name, elements * reads, FLOAT_BYTES * elements * (reads + 1), kind)


def reduction(name: str, elements: int, outputs: int) -> Kernel:
    """A sum of ``elements`` inputs into ``outputs`` values."""
    return Kernel(name, elements, FLOAT_BYTES * (elements + outputs), "reduce")


def _mlp_fwd(prefix: str, widths: tuple[int, ...], b: int, sigmoid_last: bool) -> list[Kernel]:
    """dlrm's create_mlp: Linear then ReLU per layer, Sigmoid after the top's last."""
    out = []
    layers = len(widths) - 1
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        out.append(gemm(f"{prefix}{i}_fwd", b, n_out, n_in, bias=True))
        act = "sigmoid" if sigmoid_last and i == layers - 1 else "relu"
        out.append(elementwise(f"{prefix}{i}_{act}", b * n_out, 1))
    return out


def _mlp_bwd(
    prefix: str, widths: tuple[int, ...], b: int, sigmoid_last: bool, input_grad: bool
) -> list[Kernel]:
    """Last layer first: the activation's backward (reads the gradient and the output),
    then dX(B,in) = dZ(B,out) W(out,in) (none into the dense input of the bottom
    MLP), dW(out,in) = dZ^T(out,B) X(B,in) and db = sum over the batch of dZ."""
    out = []
    layers = len(widths) - 1
    for i in range(layers - 1, -1, -1):
        n_in, n_out = widths[i], widths[i + 1]
        act = "sigmoid" if sigmoid_last and i == layers - 1 else "relu"
        out.append(elementwise(f"{prefix}{i}_{act}_bwd", b * n_out, 2))
        if i > 0 or input_grad:
            out.append(gemm(f"{prefix}{i}_bwd_data", b, n_in, n_out))
        out.append(gemm(f"{prefix}{i}_bwd_weight", n_out, n_in, b))
        out.append(reduction(f"{prefix}{i}_bwd_bias", b * n_out, n_out))
    return out


def _interaction_fwd(spec: ModelSpec, b: int) -> list[Kernel]:
    """T = cat([x] + ly).view(B, F, d); Z = bmm(T, T^T); Zflat = Z[:, li, lj] (the
    P = F(F-1)/2 pairs below the diagonal); R = cat([x, Zflat])."""
    f, d = spec.interaction_features, spec.embedding_dim
    pairs = f * (f - 1) // 2
    return [
        elementwise("interaction_cat_features", b * f * d, 1, "copy"),
        gemm("interaction_bmm", f, f, d, batch=b),
        Kernel("interaction_gather", 0, FLOAT_BYTES * 2 * b * pairs + 16 * pairs, "gather"),
        elementwise("interaction_cat_output", b * (d + pairs), 1, "copy"),
    ]


def _interaction_bwd(spec: ModelSpec, b: int) -> list[Kernel]:
    """The gather's backward (zeros, then index_put_ with accumulate: PyTorch sorts the
    P linear indices, then scatter-adds), the batched product's two GEMMs
    (dZ T and T^T dZ), the sum of T's two gradients, and the sum of the bottom
    output's two gradients (it feeds both concatenations)."""
    f, d = spec.interaction_features, spec.embedding_dim
    pairs = f * (f - 1) // 2
    return [
        Kernel("interaction_gather_bwd_zeros", 0, FLOAT_BYTES * b * f * f, "fill"),
        Kernel("interaction_gather_bwd_sort", 0, 4 * 8 * pairs, "sort"),
        Kernel("interaction_gather_bwd_scatter", b * pairs, 8 * b * pairs + 16 * pairs, "gather"),
        gemm("interaction_bmm_bwd_a", f, d, f, batch=b),
        gemm("interaction_bmm_bwd_b", d, f, f, batch=b),
        elementwise("interaction_grad_sum", b * f * d, 2),
        elementwise("bottom_output_grad_sum", b * d, 2),
    ]


def _loss_fwd(b: int) -> list[Kernel]:
    """MSELoss(reduction="mean"), dlrm's default --loss-function: (p - y)^2, then the mean."""
    return [elementwise("loss_fwd", b, 2), reduction("loss_mean", b, 1)]


def _loss_bwd(b: int) -> list[Kernel]:
    """loss.backward() seeds a one, then 2 (p - y) / B."""
    return [Kernel("loss_grad_seed", 0, FLOAT_BYTES, "fill"), elementwise("loss_bwd", b, 2)]


FOREACH_CHUNK = 65536
"""Elements per block of PyTorch's multi_tensor_apply (ATen MultiTensorApply.cuh)."""
FOREACH_MAX_TENSORS = 64
"""Tensors one launch takes with two tensor lists (depth_to_max_tensors[1])."""
FOREACH_MAX_BLOCKS = 320
"""Blocks (chunks) one launch takes (depth_to_max_blocks)."""


def optimizer_kernels(spec: ModelSpec) -> list[Kernel]:
    """torch.optim.SGD's step on every MLP parameter (bottom then top, weight then bias
    per layer, as dlrm registers them): ``_foreach_add_(params, grads, alpha=-lr)``,
    launched by multi_tensor_apply's rule: a launch when 64 tensors or 320 chunks of
    65536 elements are gathered, or at the last chunk. w -= lr g reads w and g and
    writes w: 2 FLOPs and 12 bytes per parameter."""
    sizes = [
        size
        for widths in (spec.bottom_mlp, spec.top_widths)
        for n_in, n_out in zip(widths[:-1], widths[1:], strict=True)
        for size in (n_in * n_out, n_out)
    ]
    return [
        Kernel(f"mlp_sgd_step{i}", 2 * n, 3 * FLOAT_BYTES * n, "optimizer")
        for i, n in enumerate(foreach_launches(sizes))
    ]


def foreach_launches(sizes: list[int]) -> list[int]:
    """Elements each multi_tensor_apply launch updates, for tensors of ``sizes``."""
    launches, elements, tensors, blocks = [], 0, 0, 0
    for t, size in enumerate(sizes):
        tensors += 1
        chunks = -(-size // FOREACH_CHUNK)
        for c in range(chunks):
            blocks += 1
            elements += min(FOREACH_CHUNK, size - c * FOREACH_CHUNK)
            last_chunk = c == chunks - 1
            full = (tensors == FOREACH_MAX_TENSORS and last_chunk) or blocks == FOREACH_MAX_BLOCKS
            if full or (t == len(sizes) - 1 and last_chunk):
                launches.append(elements)
                elements, blocks = 0, 0
                tensors = 0 if last_chunk else 1
    return launches


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
