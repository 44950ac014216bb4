"""DLRM model presets: the paper's RM1-RM4 and the public models they derive from.

A `ModelSpec` is pure shape data. Timing models use the full table sizes (addresses only);
the functional numpy model needs the tables in memory, so it runs on `spec.capped(rows)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

FLOAT_BYTES = 4
DEFAULT_BATCH_SIZE = 128
"""Samples per batch. The paper does not give one; 128 is DLRM's default
(dlrm_s_pytorch.py --mini-batch-size) and the team's calibration assumes it."""

# Criteo Kaggle (Display Advertising Challenge) categorical cardinalities, C1..C26, as the
# facebookresearch/dlrm preprocessing counts them (also used by torchrec examples).
KAGGLE_ROWS = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip
# Criteo Terabyte cardinalities with dlrm's --max-ind-range=10000000 (dlrm run_and_time).
TERABYTE_10M_ROWS = (
    9980333, 36084, 17217, 7378, 20134, 3, 7112, 1442, 61, 9758201, 1333352, 313829, 10,
    2208, 11156, 122, 4, 970, 14, 9994222, 7267859, 9946608, 415421, 12420, 101, 36,
)  # fmt: skip
# Criteo Terabyte with --max-ind-range=40000000, the MLPerf DLRM reference (v0.7-v2.1).
TERABYTE_40M_ROWS = (
    39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10,
    2208, 11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36,
)  # fmt: skip

PAPER_ROWS_PER_TABLE = 4_000_000
"""Default rows per table for RM1-RM3 (paper gives none): DeepRecSys RMC1's 4M rows, the
largest table of the models RM1-3 derive from (the paper says it enlarged them)."""


class UnknownModelError(ValueError):
    """A model name that is not a preset."""


class ModelSpecError(ValueError):
    """A model shape that cannot form a DLRM."""


@dataclass(frozen=True)
class ModelSpec:
    """Shape of one DLRM: embedding tables, MLP widths and the input kind."""

    name: str
    embedding_dim: int
    dense_features: int
    num_tables: int
    rows_per_table: tuple[int, ...]
    lookups_per_table: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    input_kind: Literal["random", "criteo"]
    description: str
    source: str
    uncapped_rows: tuple[int, ...] | None = None
    """Table sizes before ``capped``: the initial values follow these (None: uncapped)."""

    def __post_init__(self) -> None:
        rows = self.rows_per_table
        if isinstance(rows, int | np.integer):
            rows = (int(rows),) * self.num_tables
        object.__setattr__(self, "rows_per_table", tuple(int(r) for r in rows))
        if self.uncapped_rows is not None:
            object.__setattr__(self, "uncapped_rows", tuple(int(r) for r in self.uncapped_rows))
        object.__setattr__(self, "bottom_mlp", tuple(int(w) for w in self.bottom_mlp))
        object.__setattr__(self, "top_mlp", tuple(int(w) for w in self.top_mlp))
        problem = self._problem()
        if problem:
            raise ModelSpecError(f"model {self.name!r}: {problem}")

    def _problem(self) -> str | None:
        if len(self.rows_per_table) != self.num_tables:
            return f"{len(self.rows_per_table)} table sizes for {self.num_tables} tables"
        if min(self.rows_per_table, default=1) < 1 or self.lookups_per_table < 1:
            return "tables need at least one row and one lookup"
        full = self.init_rows
        if len(full) != self.num_tables:
            return f"{len(full)} uncapped table sizes for {self.num_tables} tables"
        if any(f < r for f, r in zip(full, self.rows_per_table, strict=True)):
            return f"uncapped table sizes {full} do not cover {self.rows_per_table}"
        if len(self.bottom_mlp) < 2 or self.bottom_mlp[0] != self.dense_features:
            return f"bottom MLP {self.bottom_mlp} must start at dense_features"
        if self.bottom_mlp[-1] != self.embedding_dim:
            return (
                f"bottom MLP output {self.bottom_mlp[-1]} != embedding dim "
                f"{self.embedding_dim} (the dot interaction needs equal widths)"
            )
        if not self.top_mlp or self.top_mlp[-1] != 1:
            return f"top MLP {self.top_mlp} must end in one output"
        if self.input_kind not in ("random", "criteo"):
            return f"input kind {self.input_kind!r} is not 'random' or 'criteo'"
        return None

    @property
    def init_rows(self) -> tuple[int, ...]:
        """Per table, the size its initial values are drawn for (dlrm: U(+-sqrt(1/n)))."""
        return self.uncapped_rows or self.rows_per_table

    @property
    def total_rows(self) -> int:
        return sum(self.rows_per_table)

    @property
    def row_bytes(self) -> int:
        return self.embedding_dim * FLOAT_BYTES

    @property
    def table_bytes(self) -> int:
        return self.total_rows * self.row_bytes

    @property
    def interaction_features(self) -> int:
        """F: the bottom-MLP output plus one pooled vector per table."""
        return self.num_tables + 1

    @property
    def top_input_width(self) -> int:
        f = self.interaction_features
        return f * (f - 1) // 2 + self.bottom_mlp[-1]

    @property
    def top_widths(self) -> tuple[int, ...]:
        """Top MLP widths including its input (the interaction output)."""
        return (self.top_input_width, *self.top_mlp)

    @property
    def bottom_param_count(self) -> int:
        return _mlp_params(self.bottom_mlp)

    @property
    def top_param_count(self) -> int:
        return _mlp_params(self.top_widths)

    @property
    def mlp_param_count(self) -> int:
        return self.bottom_param_count + self.top_param_count

    @property
    def mlp_param_bytes(self) -> int:
        return self.mlp_param_count * FLOAT_BYTES

    @property
    def table_offsets(self) -> np.ndarray:
        """Global row id of each table's row 0 (int64, length num_tables)."""
        sizes = np.asarray(self.rows_per_table, dtype=np.int64)
        return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)

    def capped(self, max_rows: int) -> ModelSpec:
        """The same model with every table cut to at most max_rows (for functional runs).

        The rows kept start as the full model's would: initialised for the uncapped
        size, not the capped one. dlrm draws a table of n rows from U(+-sqrt(1/n)), so
        initialising RM1 capped at 64 rows for n = 64 would make its rows 250x larger
        than the real model's 4M-row tables, its pooled bags of 80 lookups O(1) and the
        pairwise dots fed to the top MLP O(10), where the real model starts near zero;
        SGD at the default lr then diverges within a few batches."""
        rows = tuple(min(r, max_rows) for r in self.rows_per_table)
        return dataclasses.replace(self, rows_per_table=rows, uncapped_rows=self.init_rows)


def _mlp_params(widths: tuple[int, ...]) -> int:
    return sum(n_in * n_out + n_out for n_in, n_out in zip(widths[:-1], widths[1:], strict=True))


_DEEPRECSYS = "harvard-acc/DeepRecSys models/configs/dlrm_{}.json (Gupta et al., ISCA'20)"
_PAPER = "Kwon et al., IEEE Micro 2023, Table 3"

PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "rm1", 32, 13, 20, PAPER_ROWS_PER_TABLE, 80, (13, 8192, 2048, 32), (256, 64, 1),
            "random", "paper RM1: embedding-intensive, from DeepRecSys RMC1", _PAPER,
        ),
        ModelSpec(
            "rm2", 32, 13, 80, PAPER_ROWS_PER_TABLE, 80, (13, 8192, 2048, 32), (512, 128, 1),
            "random", "paper RM2: embedding-intensive, bottom MLP printed '323' read as 32",
            _PAPER,
        ),
        ModelSpec(
            "rm3", 32, 13, 20, PAPER_ROWS_PER_TABLE, 20, (13, 10240, 4096, 32), (512, 128, 1),
            "random", "paper RM3: MLP-intensive, from DeepRecSys RMC3", _PAPER,
        ),
        ModelSpec(
            "rm4", 16, 13, 52, KAGGLE_ROWS * 2, 1, (13, 16384, 2048, 512, 16), (512, 128, 1),
            "criteo", "paper RM4: MLP-intensive, from DLRM Kaggle; 52 tables = Kaggle's 26 twice",
            _PAPER + "; table sizes: Kaggle cardinalities repeated (assumption)",
        ),
        ModelSpec(
            "rmc1", 32, 128, 8, 4_000_000, 80, (128, 64, 32), (256, 64, 1),
            "random", "DeepRecSys RMC1 (original uses cat interaction; simulated with dot)",
            _DEEPRECSYS.format("rm1"),
        ),
        ModelSpec(
            "rmc2", 64, 256, 32, 500_000, 120, (256, 128, 64), (128, 64, 1),
            "random", "DeepRecSys RMC2 (original uses cat interaction; simulated with dot)",
            _DEEPRECSYS.format("rm2"),
        ),
        ModelSpec(
            "rmc3", 32, 2560, 10, 2_000_000, 20, (2560, 1024, 256, 32), (512, 256, 1),
            "random", "DeepRecSys RMC3 (original uses cat interaction; simulated with dot)",
            _DEEPRECSYS.format("rm3"),
        ),
        ModelSpec(
            "dlrm_kaggle", 16, 13, 26, KAGGLE_ROWS, 1, (13, 512, 256, 64, 16), (512, 256, 1),
            "criteo", "DLRM on Criteo Kaggle (bench/dlrm_s_criteo_kaggle.sh)",
            "facebookresearch/dlrm bench/dlrm_s_criteo_kaggle.sh",
        ),
        ModelSpec(
            "dlrm_terabyte", 64, 13, 26, TERABYTE_10M_ROWS, 1, (13, 512, 256, 64),
            (512, 512, 256, 1), "criteo", "DLRM on Criteo Terabyte, max-ind-range 10M",
            "facebookresearch/dlrm bench/dlrm_s_criteo_terabyte.sh",
        ),
        ModelSpec(
            "mlperf_dlrm", 128, 13, 26, TERABYTE_40M_ROWS, 1, (13, 512, 256, 128),
            (1024, 1024, 512, 256, 1), "criteo", "MLPerf Training DLRM (v0.7-v2.1 reference)",
            "mlcommons/training recommendation/dlrm (max-ind-range 40M)",
        ),
    )
}  # fmt: skip


def get_model(name: str) -> ModelSpec:
    """The preset called name (case-insensitive)."""
    try:
        return PRESETS[name.lower()]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}; valid models: {', '.join(PRESETS)}"
        ) from None
