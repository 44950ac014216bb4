"""What CPR's partial recovery costs in accuracy when the tables are sharded over nodes.

Checkpoints every ``interval`` batches (after batches interval - 1, 2 x interval - 1,
...). A failure while batch f trains takes one node down: that node's tables (tables
t with t % shards == node, table-wise round-robin) go back to the last checkpoint, the
other nodes' tables and the trainers' MLPs keep their state, and training resumes at
batch f (CPR: no replay), so the failed shard's updates of the batches since the
checkpoint are lost. Full recovery would replay from the checkpoint and end on the
failure-free model bit for bit (inputs depend only on the seed and the batch).

With CPR's prioritised checkpoints (``prioritised``: ("mfu" or "ssu", share)), the
first checkpoint is full and later ones save only the rows CprCheckpoint chooses from
the lookups since the previous one (the most used, or a seeded sample of the used),
until they would outgrow a full one (counted on the tables' bytes: one node saves the
MLPs, which partial recovery keeps); the failed node's rows go back to the value of
the newest checkpoint that saved each.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from components.boards.software_ft import CprCheckpoint
from simulate.failures.oracle import StretchHistory
from simulate.failures.recording import ModelState, run_stretch
from simulate.run.configure import input_generator, resolve_functional
from simulate.run.options import RunOptions
from workloads.opgraph import build_demand


def shard_rows(options: RunOptions, shards: int, node: int) -> np.ndarray:
    """The flat table rows node ``node`` of ``shards`` holds (round-robin by table)."""
    spec, _ = resolve_functional(options)
    starts = np.concatenate([[0], np.cumsum(spec.rows_per_table)])
    held = [np.arange(starts[t], starts[t + 1]) for t in range(len(spec.rows_per_table))
            if t % shards == node]  # fmt: skip
    return np.concatenate(held) if held else np.zeros(0, np.int64)


def prioritised_policy(options: RunOptions, prioritised: tuple[str, float] | None):
    """The CprCheckpoint choosing a prioritised checkpoint's rows, the call that counts
    batch n's lookups towards it, and a row's bytes; None without prioritised
    checkpoints."""
    if prioritised is None:
        return None
    kind, share = prioritised
    policy = CprCheckpoint(**{f"{kind}_share": share})
    object.__setattr__(policy, "seed", options.seed)
    spec, batch_size = resolve_functional(options)
    generator = input_generator(options, spec, batch_size)

    def count(n: int) -> None:
        prev = generator.batch(n - 1) if n else None
        rows = build_demand(spec, generator.batch(n), n, prev).lookup.rows
        policy.count_lookups(rows, spec.total_rows)

    return policy, count, spec.embedding_dim * 4


def partial_recovery_run(
    options: RunOptions, lr: float, shards: int, interval: int, failures: list[int],
    prioritised: tuple[str, float] | None = None,
) -> tuple[object, int, list[int], list[ModelState]]:  # fmt: skip
    """Train ``options.batches`` batches through ``failures`` (batch indices, below
    ``options.batches``) under partial recovery; the final model, the failed shard's
    lost batch updates since the newest checkpoint (summed over failures), the node
    each failure took down (drawn from the seed) and the weights each recovery handed
    back."""
    rng = np.random.default_rng([options.seed, 11])
    state, start, saved, lost, nodes, recovered = None, 0, None, 0, [], []
    chooser = prioritised_policy(options, prioritised)
    for end in [*sorted(failures), options.batches]:
        stretch = run_stretch(replace(options, batches=end), start=start, weights=state, lr=lr)
        history = StretchHistory(stretch)
        if saved is None:
            saved = (-1, stretch.initial_state().table.copy())
        for b in range(start, end):
            if chooser is not None:
                chooser[1](b)
            if (b + 1) % interval:
                continue
            table = history.table_after(b)
            rows = None
            if chooser is not None:
                row_bytes = chooser[2]
                rows = chooser[0].choose(table.shape[0] * row_bytes, row_bytes, 0, b)
            if rows is None:
                saved = (b, table.copy())
            else:
                saved[1][rows] = table[rows]
                saved = (b, saved[1])
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
