"""What CPR's partial recovery costs in accuracy when the tables are sharded over nodes.

Checkpoints every ``interval`` batches (after batches interval - 1, 2 x interval - 1,
...). A failure while batch f trains takes one node down: that node's tables (tables
t with t % shards == node, table-wise round-robin) go back to the last checkpoint, the
other nodes' tables and the trainers' MLPs keep their state, and training resumes at
batch f (CPR: no replay), so the failed shard's updates of the batches since the
checkpoint are lost. Full recovery would replay from the checkpoint and end on the
failure-free model bit for bit (inputs depend only on the seed and the batch).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulate.failures.oracle import StretchHistory
from simulate.failures.recording import ModelState, run_stretch
from simulate.run.configure import resolve_functional
from simulate.run.options import RunOptions


def shard_rows(options: RunOptions, shards: int, node: int) -> np.ndarray:
    """The flat table rows node ``node`` of ``shards`` holds (round-robin by table)."""
    spec, _ = resolve_functional(options)
    starts = np.concatenate([[0], np.cumsum(spec.rows_per_table)])
    held = [np.arange(starts[t], starts[t + 1]) for t in range(len(spec.rows_per_table))
            if t % shards == node]  # fmt: skip
    return np.concatenate(held) if held else np.zeros(0, np.int64)


def partial_recovery_run(
    options: RunOptions, lr: float, shards: int, interval: int, failures: list[int]
) -> tuple[object, int, list[int], list[ModelState]]:
    """Train ``options.batches`` batches through ``failures`` (batch indices, below
    ``options.batches``) under partial recovery; the final model, the failed shard's
    lost batch updates (summed over failures), the node each failure took down (drawn
    from the seed) and the weights each recovery handed back."""
    rng = np.random.default_rng([options.seed, 11])
    state, start, saved, lost, nodes, recovered = None, 0, None, 0, [], []
    for end in [*sorted(failures), options.batches]:
        stretch = run_stretch(replace(options, batches=end), start=start, weights=state, lr=lr)
        history = StretchHistory(stretch)
        if saved is None:
            saved = (-1, stretch.initial_state().table.copy())
        checkpoints = [b for b in range(start, end) if (b + 1) % interval == 0]
        if checkpoints:
            saved = (checkpoints[-1], history.table_after(checkpoints[-1]).copy())
        if end == options.batches:
            return stretch.model, lost, nodes, recovered
        node = int(rng.integers(shards))
        rows = shard_rows(options, shards, node)
        now = stretch.model.state()
        table = now.table.copy()
        table[rows] = saved[1][rows]
        state = replace(now, table=table)
        recovered.append(state)
        lost += end - 1 - saved[0]
        nodes.append(node)
        start = end
    raise AssertionError("unreachable: the last stretch returns")
