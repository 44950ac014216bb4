"""The op graph's kernels against an independent count: the ATen operators a torch run
of facebookresearch/dlrm's training step (workloads/torch_reference.py: create_mlp, the
dot interaction, MSELoss, SGD) dispatches on the CPU, each mapped to the CUDA kernels
it launches in PyTorch 2 (below), and its GEMMs' FLOPs from the operands' shapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.models import ModelSpec, get_model
from workloads.opgraph import (
    FOREACH_CHUNK,
    FOREACH_MAX_BLOCKS,
    OP_NAMES,
    batch_kernels,
    foreach_launches,
    optimizer_kernels,
)
from workloads.torch_reference import build_step

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

KERNELS_PER_OP = {
    "addmm": 1,  # cuBLASLt GEMM with the bias epilogue
    "mm": 1,
    "bmm": 1,
    "relu": 1,
    "sigmoid": 1,
    "cat": 1,
    "index": 1,  # the triangle gather
    "mse_loss": 2,  # elementwise (p - y)^2, then the mean
    "ones_like": 1,  # autograd's seed
    "mse_loss_backward": 1,
    "sigmoid_backward": 1,
    "threshold_backward": 1,  # ReLU's backward
    "sum": 1,  # a bias gradient
    "new_zeros": 1,
    "index_put": 2,  # accumulate=True on CUDA: sort the pair indices, scatter-add
    "add": 1,  # two gradients of one tensor
}
NO_KERNEL = {
    "t", "detach", "view", "transpose", "slice",  # views
    "_record_function_enter_new", "_record_function_exit",  # profiler marks
}  # fmt: skip
GEMMS = {"addmm", "mm", "bmm"}


class Dispatched(TorchDispatchMode):
    """Every ATen operator a region runs, with its tensor arguments' shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, list[tuple[int, ...]]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        self.ops.append((func.overloadpacket.__name__, shapes))
        return func(*args, **(kwargs or {}))


def reference_step(spec: ModelSpec, b: int) -> tuple[list, list[int]]:
    """The dispatched operators of one reference step and the optimizer's tensor sizes."""
    step = build_step(spec, b)
    with Dispatched() as log:
        step.step()
    return log.ops, [p.numel() for p in (*step.bottom.parameters(), *step.top.parameters())]


def _gemm_flops(op: str, shapes) -> int:
    if op == "addmm":
        (n,), (m, k), _ = shapes
        return 2 * m * n * k + m * n
    if op == "mm":
        (m, k), (_, n) = shapes
        return 2 * m * n * k
    (batch, m, k), (_, _, n) = shapes
    return 2 * batch * m * n * k


def _check(spec: ModelSpec, b: int) -> None:
    ops, sizes = reference_step(spec, b)
    assert [op for op, _ in ops].count("_foreach_add_") == 1
    dense = [(op, s) for op, s in ops if op not in NO_KERNEL]
    unknown = {op for op, _ in dense} - set(KERNELS_PER_OP) - {"_foreach_add_"}
    assert not unknown, f"operators without a kernel count: {unknown}"

    kernels = [k for group in batch_kernels(spec, b).values() for k in group]
    step = [k for k in kernels if k.kind == "optimizer"]
    assert [k.flops // 2 for k in step] == foreach_launches(sizes)
    assert sum(k.flops for k in step) == 2 * sum(sizes) == 2 * spec.mlp_param_count
    expected = sum(KERNELS_PER_OP[op] for op, _ in dense if op != "_foreach_add_")
    assert len(kernels) - len(step) == expected
    traced = sorted(_gemm_flops(op, s) for op, s in dense if op in GEMMS)
    assert sorted(k.flops for k in kernels if k.kind == "gemm") == traced


def test_small_dlrm_step_matches_the_dispatched_operators():
    spec = ModelSpec("tiny", 8, 13, 4, 10, 1, (13, 64, 32, 8), (16, 8, 1), "random", "test", "test")
    _check(spec, 8)


@settings(max_examples=8, deadline=None)
@given(
    st.lists(st.integers(2, 24), min_size=1, max_size=3),
    st.lists(st.integers(2, 24), min_size=0, max_size=2),
    st.integers(1, 5),
    st.integers(2, 8),
    st.integers(1, 9),
)
def test_any_dlrm_shape_matches_the_dispatched_operators(hidden, top_hidden, tables, d, b):
    spec = ModelSpec(
        "any", d, 13, tables, 10, 1, (13, *hidden, d), (*top_hidden, 1), "random", "t", "t"
    )
    _check(spec, b)


def test_rm1_kernel_count_by_hand():
    """RM1 (bottom 13-8192-2048-32, top 242-256-64-1, 20 tables): forward 3 + 3
    bottom (GEMM, ReLU), 4 interaction, 3 + 3 top, 2 loss = 18; backward: seed, loss,
    top 3 x (activation, weight GEMM, bias) + 3 data GEMMs = 12, interaction 7, bottom
    3 x 3 + 2 data GEMMs = 11; SGD: 12 tensors, 268 chunks of 64 Ki: one launch."""
    kernels = batch_kernels(get_model("rm1"), 128)
    counts = {op: len(kernels[op]) for op in OP_NAMES}
    assert counts == {
        "bottom_fwd": 6,
        "interaction_top_fwd": 4 + 6 + 2,
        "top_bwd_interaction": 2 + 12 + 7,
        "bottom_bwd": 11 + 1,
    }


def test_foreach_launches_by_hand():
    chunk = FOREACH_CHUNK
    # 64 one-chunk tensors fill a launch; the 65th starts the next
    assert foreach_launches([10] * 65) == [640, 10]
    # 320 chunks fill a launch mid-tensor; the rest of that tensor goes on
    assert foreach_launches([chunk * 330]) == [chunk * FOREACH_MAX_BLOCKS, chunk * 10]
    assert foreach_launches([chunk * 320 + 5, 7]) == [chunk * 320, 12]


def test_rm3_optimizer_needs_three_launches():
    """RM3: the first layer's weight and bias are 3 + 1 chunks, so the 10240 x 4096
    weight's first 316 chunks close the first launch and its next 320 the second."""
    spec = get_model("rm3")
    launches = [k.flops // 2 for k in optimizer_kernels(spec)]
    assert len(launches) == 3 and sum(launches) == spec.mlp_param_count
    assert launches[:2] == [13 * 10240 + 10240 + 316 * FOREACH_CHUNK, 320 * FOREACH_CHUNK]
