"""One stretch of training, timed and functional, recorded for the persistence model.

``simulate`` runs batches [start, batches) on a fresh board from given weights and
keeps what the failure model needs: per batch, the rows it updated with their old and
new values and the MLPs before and after (``BatchFacts``); per op, its interval and
the persist ticks of every device write it made (a tap on the table device).
``build_journal`` turns that into timed PMEM writes through the system's protocol.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from components.boards.base import TrainingBoard
from components.persistence.image import ImageLayout, PmemImage
from components.persistence.journal import Journal, Phase
from components.persistence.protocols import PROTOCOLS, BatchFacts, Protocol
from components.sim.engine import Engine
from components.sim.schedule import OpRecord, Scheduler
from workloads.configure import connected_board, resolve_functional
from workloads.dlrm import DLRM
from workloads.inputs import InputGenerator
from workloads.models import ModelSpec
from workloads.opgraph import build_demand
from workloads.options import RunOptions
from workloads.training import DEFAULT_LR, FunctionalTrainer


class RecordingDLRM(DLRM):
    """A DLRM that remembers each batch's row update and MLP parameters (in call order:
    the k-th update belongs to the k-th batch of the stretch)."""

    def __init__(self, spec: ModelSpec, **kwargs) -> None:
        super().__init__(spec, **kwargs)
        self.row_updates: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.mlp_states: list[np.ndarray] = []

    def apply_rows(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.row_updates.append((rows.copy(), self.table[rows].copy(), values.copy()))
        super().apply_rows(rows, values)

    def apply_mlp(self, grads) -> None:
        if not self.mlp_states:
            self.mlp_states.append(self.mlp_flat())
        super().apply_mlp(grads)
        self.mlp_states.append(self.mlp_flat())


class WriteLog:
    """Observes the table device's persisted writes (engine events, nothing patched):
    per op, one entry per stage that wrote, (issue tick, persist ticks)."""

    def __init__(self, device) -> None:
        self.writes: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
        device.write_listeners.append(self.observe)

    def observe(self, persisted) -> None:
        if persisted.owner is None or persisted.ticks.size == 0:
            return
        entries = self.writes[persisted.owner]
        end = int(persisted.ticks.max())
        if entries and entries[-1][2] == end:  # another stream of the same stage
            start, ticks, _ = entries[-1]
            entries[-1] = (start, np.concatenate([ticks, persisted.ticks]), end)
            return
        entries.append((persisted.issued, persisted.ticks, end))

    def by_op(self) -> dict[int, list[tuple[int, np.ndarray]]]:
        return {
            uid: [(start, ticks) for start, ticks, _ in items] for uid, items in self.writes.items()
        }


@dataclass
class Stretch:
    """A simulated stretch of training and everything recorded about it."""

    start: int
    board: TrainingBoard
    records: list[OpRecord]
    writes: dict[int, list[tuple[int, np.ndarray]]]
    facts: dict[int, BatchFacts]
    model: RecordingDLRM
    end_tick: int
    losses: list[float] = field(default_factory=list)

    def running(self, tick: int) -> list[OpRecord]:
        """Ops in progress at ``tick`` (or the next to start when none is)."""
        live = [r for r in self.records if r.start <= tick < r.end and r.resource]
        if live:
            return live
        later = [r for r in self.records if r.start > tick]
        return [min(later, key=lambda r: r.start)] if later else [self.records[-1]]


def simulate(
    options: RunOptions,
    start: int = 0,
    weights: tuple[np.ndarray, np.ndarray] | None = None,
    lr: float = DEFAULT_LR,
) -> Stretch:
    """Train batches [start, options.batches) from ``weights`` (table, MLPs), or from the
    seeded initial weights, timed on a fresh board and recorded."""
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    observed = WriteLog(board.table_memory())
    model = RecordingDLRM(spec, lr=lr, seed=options.seed)
    if weights is not None:
        model.table[...] = weights[0]
        model.load_mlp_flat(weights[1])
    trainer = FunctionalTrainer(model, relaxed=options.system == "cxl")
    generator = InputGenerator(spec, batch_size, seed=options.seed)

    def host():
        previous = generator.batch(start - 1) if start > 0 else None
        for n in range(start, options.batches):
            batch = generator.batch(n)
            trainer.step(batch)
            ops = board.issue_batch(build_demand(spec, batch, n, previous))
            previous = batch
            yield ops.lookup.done

    engine.process(host())
    engine.run()
    trainer.flush()
    facts = {
        start + k: BatchFacts(rows, old, new, model.mlp_states[k], model.mlp_states[k + 1])
        for k, (rows, old, new) in enumerate(model.row_updates)
    }
    records = scheduler.records
    return Stretch(
        start, board, records, observed.by_op(), facts, model, engine.now, trainer.losses
    )


def image_layout(options: RunOptions) -> ImageLayout:
    spec, batch_size = resolve_functional(options)
    max_rows = min(spec.total_rows, batch_size * spec.num_tables * spec.lookups_per_table)
    return ImageLayout(spec.total_rows, spec.embedding_dim, spec.mlp_param_count, max_rows)


def initial_image(options: RunOptions, path: str | None = None) -> PmemImage:
    """The image formatted with the seeded initial weights."""
    spec, _ = resolve_functional(options)
    model = DLRM(spec, seed=options.seed)
    return PmemImage.create(image_layout(options), model.table, model.mlp_flat(), path)


def protocol_for(system: str, image: PmemImage) -> Protocol:
    return PROTOCOLS[system](image)


def build_journal(protocol: Protocol, stretch: Stretch, atomic: int | None = None) -> Journal:
    """Timed PMEM writes of a stretch: each op's phases placed on its device writes when
    they correspond one to one, otherwise spread over the op in issue order."""
    journal = Journal() if atomic is None else Journal(atomic=atomic)
    ops = [(r.name, r.batch, len(stretch.writes.get(r.uid, ()))) for r in stretch.records]
    protocol.prepare(ops, stretch.facts)
    for record in stretch.records:
        facts = stretch.facts.get(record.batch)
        if facts is None:
            continue
        accesses = stretch.writes.get(record.uid, [])
        phases = protocol.phases(record.name, record.batch, facts, len(accesses))
        if not phases:
            continue
        if len(accesses) == len(phases):
            for phase, (now, persist) in zip(phases, accesses, strict=True):
                journal.add_phase(phase, now, int(persist.max()), persist)
        else:
            merged = Phase([w for phase in phases for w in phase.writes])
            journal.add_phase(merged, record.start, record.end, None)
    return journal
