"""Partial recovery of one shard in the functional model (simulate/failures/shard_accuracy.py):
after a failure the failed node's tables hold the checkpoint's values and every other
row the values training had reached, against a separate failure-free run; with a
checkpoint every batch nothing is lost and training ends on the failure-free model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.failures.oracle import StretchHistory
from simulate.failures.recording import run_stretch
from simulate.failures.shard_accuracy import partial_recovery_run, shard_rows
from simulate.run.configure import resolve_functional
from simulate.run.options import RunOptions
from workloads.training import default_lr

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def small(batches: int) -> RunOptions:
    return RunOptions(system="dram", model="rmc1", rows=64, batch_size=8, batches=batches,
                      progress=False)  # fmt: skip


LR = default_lr(resolve_functional(small(1))[0])


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8))
def test_the_nodes_hold_every_row_once(shards):
    rows = np.concatenate([shard_rows(small(1), shards, k) for k in range(shards)])
    assert np.array_equal(np.sort(rows), np.arange(len(rows)))


def test_a_checkpoint_every_batch_loses_nothing():
    warnings.simplefilter("ignore", RuntimeWarning)
    clean = run_stretch(small(8), lr=LR).model
    model, lost, _, _ = partial_recovery_run(small(8), LR, 4, 1, [3, 6])
    assert lost == 0
    assert np.array_equal(model.table, clean.table)
    assert np.array_equal(model.mlp_flat(), clean.mlp_flat())


@pytest.mark.parametrize("shards", [1, 2, 4])
def test_only_the_failed_nodes_tables_go_back_to_the_checkpoint(shards):
    """Failure in batch 7, checkpoints after batches 3 and 7 - 1 = 6 not yet (every 4):
    right after recovery (no batch trained since) the failed node's rows are the
    failure-free run's after batch 3, the others' after batch 6; the MLPs after 6."""
    warnings.simplefilter("ignore", RuntimeWarning)
    clean = run_stretch(small(7), lr=LR)
    history = StretchHistory(clean)
    _, lost, (node,), (state,) = partial_recovery_run(small(8), LR, shards, 4, [7])
    assert lost == 3  # batches 4, 5 and 6, on the failed node
    failed = np.zeros(len(state.table), bool)
    failed[shard_rows(small(7), shards, node)] = True
    checkpoint = history.table_after(3).copy()  # a working copy, valid until the next call
    now = history.table_after(6)
    assert np.array_equal(state.table[failed], checkpoint[failed])
    assert np.array_equal(state.table[~failed], now[~failed])
    assert np.array_equal(state.mlp, history.mlp_after(6))
    # not vacuous: the rolled-back rows did change after the checkpoint, so restoring
    # every node (or none) would break one of the equalities above
    assert not np.array_equal(checkpoint[failed], now[failed])
