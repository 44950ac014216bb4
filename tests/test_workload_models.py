import dataclasses

import pytest

from workloads.models import PRESETS, ModelSpecError, UnknownModelError, get_model


@pytest.mark.parametrize(
    ("name", "dim", "tables", "pooling", "bottom", "top"),
    [
        ("rm1", 32, 20, 80, (13, 8192, 2048, 32), (256, 64, 1)),
        ("rm2", 32, 80, 80, (13, 8192, 2048, 32), (512, 128, 1)),
        ("rm3", 32, 20, 20, (13, 10240, 4096, 32), (512, 128, 1)),
        ("rm4", 16, 52, 1, (13, 16384, 2048, 512, 16), (512, 128, 1)),
    ],
)
def test_paper_models_follow_table_3(name, dim, tables, pooling, bottom, top):
    spec = get_model(name)
    assert (spec.embedding_dim, spec.dense_features, spec.num_tables) == (dim, 13, tables)
    assert (spec.lookups_per_table, spec.bottom_mlp, spec.top_mlp) == (pooling, bottom, top)
    assert len(spec.rows_per_table) == tables


def test_derived_sizes_of_rm1():
    spec = get_model("RM1")
    assert spec.interaction_features == 21
    assert spec.top_input_width == 21 * 20 // 2 + 32
    bottom = 13 * 8192 + 8192 + 8192 * 2048 + 2048 + 2048 * 32 + 32
    top = 242 * 256 + 256 + 256 * 64 + 64 + 64 + 1
    assert spec.mlp_param_count == bottom + top
    assert spec.mlp_param_bytes == 4 * (bottom + top)
    assert spec.table_offsets[:3].tolist() == [0, 4_000_000, 8_000_000]
    assert spec.capped(1000).total_rows == 20 * 1000


def test_kaggle_model_has_real_cardinalities():
    spec = get_model("dlrm_kaggle")
    assert spec.total_rows == 33_762_577
    assert spec.top_input_width == 27 * 26 // 2 + 16


def test_unknown_model_lists_valid_names():
    with pytest.raises(ValueError, match="unknown model 'rm9'; valid models: rm1, rm2") as err:
        get_model("rm9")
    assert isinstance(err.value, UnknownModelError)
    assert "\n" not in str(err.value) and all(n in str(err.value) for n in PRESETS)


def test_bottom_output_must_equal_embedding_dim():
    with pytest.raises(ModelSpecError, match="bottom MLP output 64 != embedding dim 32"):
        dataclasses.replace(get_model("rm1"), bottom_mlp=(13, 64))
