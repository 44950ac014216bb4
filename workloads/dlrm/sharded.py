"""The embedding tables as the CXL-MEMs of a disaggregated system hold them.

Each device's shard is its own array (its tables, or its part of every table, in the
placement's shard-local order), so what a device's image holds is that array; a
lookup pools each device's part of every bag and adds the partial sums, as the GPU
does under row-wise sharding. Tests check it against the unsharded model.
"""

from __future__ import annotations

import numpy as np

from components.boards.sharding import Sharding
from workloads.dlrm import sparse
from workloads.inputs import Batch
from workloads.models import ModelSpec


def shard_tables(table: np.ndarray, placement: Sharding) -> list[np.ndarray]:
    """Each device's rows of ``table`` (total_rows, dim), at their shard-local ids."""
    device, local = placement.locate(np.arange(table.shape[0], dtype=np.int64))
    shards = []
    for d in range(placement.devices):
        shard = np.empty((sum(placement.shard_rows(d)), table.shape[1]), dtype=table.dtype)
        mine = device == d
        shard[local[mine]] = table[mine]
        shards.append(shard)
    return shards


def sharded_lookup(
    shards: list[np.ndarray], batch: Batch, spec: ModelSpec, placement: Sharding
) -> np.ndarray:
    """(T, B, dim) pooled bags: every device's partial sum of each bag, added."""
    pooled = np.zeros((spec.num_tables, batch.batch_size, spec.embedding_dim), np.float32)
    for t, (indices, offsets) in enumerate(zip(batch.indices, batch.offsets, strict=True)):
        rows = indices + spec.table_offsets[t]
        device, local = placement.locate(rows)
        bag = np.repeat(np.arange(batch.batch_size), np.diff(offsets))
        for d in np.unique(device):
            mine = device == d
            lengths = np.bincount(bag[mine], minlength=batch.batch_size)
            pooled[t] += sparse.gather_sum(shards[d], local[mine], lengths)
    return pooled
