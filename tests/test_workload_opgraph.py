import numpy as np

from workloads.inputs import InputGenerator
from workloads.models import get_model
from workloads.opgraph import OP_NAMES, build_demand


def _demand(name, index=1):
    spec = get_model(name)
    gen = InputGenerator(spec, seed=2)
    prev, cur = gen.batch(index - 1), gen.batch(index)
    return spec, cur, prev, build_demand(spec, cur, index, prev)


def _gemm_flops(kernels):
    return sum(k.flops for k in kernels if k.kind == "gemm")


def test_rm1_kernels_match_analytic_flops():
    spec, _, _, d = _demand("rm1")
    b = 128
    assert set(d.kernels) == set(OP_NAMES)
    bottom = 2 * b * (13 * 8192 + 8192 * 2048 + 2048 * 32)
    bias = b * (8192 + 2048 + 32)  # added in each forward GEMM's epilogue
    assert _gemm_flops(d.kernels["bottom_fwd"]) == bottom + bias
    fc1 = d.kernels["bottom_fwd"][2]
    assert fc1.name == "bottom_fc1_fwd" and fc1.gemm == (1, b, 2048, 8192)
    assert fc1.bytes == 4 * (b * 8192 + 8192 * 2048 + b * 2048 + 2048)
    # backward: weight grads of all 3 layers, data grads of layers 2 and 3 only,
    # then the SGD step over every MLP parameter (2 FLOPs, 12 bytes each)
    grads = _gemm_flops(d.kernels["bottom_bwd"])
    assert grads == bottom + 2 * b * (8192 * 2048 + 2048 * 32)
    (step,) = [k for k in d.kernels["bottom_bwd"] if k.kind == "optimizer"]
    assert (step.flops, step.bytes) == (2 * spec.mlp_param_count, 12 * spec.mlp_param_count)
    f = 21
    inter = [k for k in d.kernels["interaction_top_fwd"] if k.name == "interaction_bmm"]
    assert inter[0].flops == 2 * b * f * f * 32
    top_fwd = _gemm_flops(d.kernels["interaction_top_fwd"]) - inter[0].flops
    top = (f * (f - 1) // 2 + 32) * 256 + 256 * 64 + 64
    assert top_fwd == 2 * b * top + b * (256 + 64 + 1)


def test_rm1_embedding_access():
    spec, cur, prev, d = _demand("rm1")
    acc = d.lookup
    assert acc.lookups == 128 * 20 * 80 == 204_800
    assert acc.pooled_bytes == acc.grad_bytes == 128 * 20 * 32 * 4
    assert acc.row_bytes == 128 and acc.tables == 20
    first_table = cur.indices[0] + spec.table_offsets[0]
    np.testing.assert_array_equal(acc.rows[: first_table.size], first_table)
    assert np.all(np.diff(acc.unique_rows) > 0)
    prev_rows = set(prev.global_rows(spec.table_offsets).tolist())
    assert acc.reused_rows == sum(r in prev_rows for r in acc.unique_rows.tolist())
    assert acc.reused_lookups == sum(r in prev_rows for r in acc.rows.tolist())
    assert d.mlp_param_bytes == d.bottom_param_bytes + d.top_param_bytes == spec.mlp_param_bytes
    assert (d.batch, d.batch_size) == (1, 128)


def test_first_batch_has_no_reuse():
    spec = get_model("rm4")
    batch = InputGenerator(spec).batch(0)
    assert build_demand(spec, batch, 0, None).lookup.reused_rows == 0
    assert build_demand(spec, batch, 0, None).lookup.reused_lookups == 0
