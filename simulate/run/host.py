"""The host side of a run: each batch's inputs, numerics and ops, one batch ahead.

Batch N+1 is trained on (with real numerics) and issued once batch N's lookup is
done, as the training framework would hand the next batch to the devices; its inputs
and demand are made ahead, on a second thread where a CPU is free for it
(simulate/run/prefetch.py). Memory stays bounded by a few batches whatever the run's
length. The plain run, the recorded runs of the failure model and the gem5 replay all
drive a board this way.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

from components.boards.base import BatchOps, TrainingBoard
from components.sim.engine import Engine
from simulate.run.cli import raise_received
from simulate.run.heap import freed_memory_kept
from simulate.run.prefetch import made_ahead
from workloads.inputs import Batch
from workloads.models import ModelSpec
from workloads.opgraph import BatchDemand, build_demand


def drive_batches(
    engine: Engine,
    board: TrainingBoard,
    spec: ModelSpec,
    generator,
    batches: range,
    *,
    trainer=None,
    desc: str = "",
    progress: bool = False,
    issued: Callable[[int, BatchDemand, BatchOps], None] | None = None,
    pool: list[tuple[object, list]] = (),
) -> list:
    """Run ``batches`` on ``board`` to the end of the simulation; returns each batch's
    end op. ``trainer`` steps the numerics of each batch before its ops are issued;
    ``issued`` hears each batch's demand and ops once its lookup is done. ``pool``: for a
    pooled board's other jobs, each one's input source and the list its end ops go to;
    each job has a host of its own (the jobs' batches are independent)."""
    ends = []
    bar = tqdm(
        total=len(batches) * (1 + len(pool)), desc=desc, unit="batch",
        disable=None if progress else True, file=sys.stderr, leave=False,
    )  # fmt: skip

    made = []  # each host's batches, made ahead: stopped when the run ends

    def host(generator=generator, job: int = 0, ends=ends, trainer=trainer, issued=issued):
        demands = made_ahead(
            prepared(spec, generator, batches, board.gpu_count),
            foresight=lambda item: board.foresight(item[2]),
        )
        made.append(demands)
        for n, batch, demand in demands:
            raise_received()  # a Ctrl-C or SIGTERM that a finalizer dropped stops here
            if trainer is not None:
                trainer.step(batch)
            ops = board.issue_batch(demand, job=job) if job else board.issue_batch(demand)
            ends.append(ops.end)
            yield ops.lookup.done
            if issued is not None:
                issued(n, demand, ops)
            bar.update(1)

    engine.process(host())
    for job, (source, job_ends) in enumerate(pool, start=1):
        engine.process(host(source, job, job_ends, None, None))
    try:
        with long_lived_frozen(), freed_memory_kept():
            engine.run()
    finally:
        for demands in made:
            demands.close()
    bar.close()
    return ends


def prepared(
    spec: ModelSpec, generator, batches: range, gpus: int
) -> Iterator[tuple[int, Batch, BatchDemand]]:
    """Each batch of ``batches`` with its demand; the previous batch's distinct rows
    are handed on, not found again."""
    previous = generator.batch(batches.start - 1) if batches.start > 0 else None
    previous_rows = None
    for n in batches:
        batch = generator.batch(n)
        demand = build_demand(spec, batch, n, previous, previous_rows, gpus=gpus)
        yield n, batch, demand
        previous, previous_rows = batch, demand.lookup.unique_rows


@contextmanager
def long_lived_frozen():
    """Keep the cyclic garbage collector off what exists before the batches (modules,
    compiled kernels, the board): its full passes over those ~10^5 objects took ~50 ms
    every few dozen RM1 batches, ~7% of a run. Only what the batches create is scanned;
    everything is handed back to the collector afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
