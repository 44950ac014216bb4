"""One stretch of training, timed and functional, recorded for the persistence model.

``simulate`` runs batches [start, batches) on a fresh board from given weights and
keeps what the failure model needs: per batch, the rows it updated with their old and
new values and the MLPs before and after (``BatchFacts``, Adagrad state included); per
op, its interval and every device write request it made with the tick it persisted
(observed through the table device's ``write_listeners``, nothing patched). The same
recorded run is the failure-free reference and the source of the run's stats.
``build_journal`` matches the protocol's functional writes to those requests by address.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np

from components.boards.base import TrainingBoard
from components.persistence.cluster import CLUSTER_PROTOCOLS, ClusterImage, ClusterLayout
from components.persistence.image import ImageLayout, PmemImage
from components.persistence.journal import Journal, JournalBuilder, Requests
from components.persistence.protocols import (
    PROTOCOLS,
    BatchFacts,
    OpView,
    Protocol,
)
from components.sim.engine import Engine
from components.sim.schedule import OpRecord, Scheduler
from simulate.run.configure import connected_board, input_generator, prepare, resolve_functional
from simulate.run.host import drive_batches
from simulate.run.options import RunOptions
from workloads.dlrm import DLRM
from workloads.inputs import BatchSource
from workloads.models import ModelSpec
from workloads.training import DEFAULT_LR, FunctionalTrainer


@dataclass
class ModelState:
    """Weights at a batch boundary: what a recovery hands back to training."""

    table: np.ndarray
    mlp: np.ndarray
    row_acc: np.ndarray | None = None
    mlp_acc: np.ndarray | None = None


class RecordingDLRM(DLRM):
    """A DLRM that remembers each batch's row update (old and new values and Adagrad
    accumulators) and its MLP state (in call order: the k-th update belongs to the k-th
    batch of the stretch)."""

    def __init__(self, spec: ModelSpec, **kwargs) -> None:
        super().__init__(spec, **kwargs)
        self.row_updates: list[tuple] = []
        self.mlp_states: list[tuple[np.ndarray, np.ndarray | None]] = []
        self._acc_before: np.ndarray | None = None

    @property
    def adagrad(self) -> bool:
        return self.optimizer == "adagrad"

    def mlp_acc_flat(self) -> np.ndarray | None:
        if not self.adagrad:
            return None
        return np.concatenate([a.reshape(-1) for pair in self._mlp_acc for a in pair])

    def row_acc(self) -> np.ndarray | None:
        return self._row_acc

    def load_state(self, state: ModelState) -> None:
        self.table[...] = state.table
        self.load_mlp_flat(state.mlp)
        if self.adagrad:
            self._row_acc[...] = state.row_acc
            flat, pos = state.mlp_acc, 0
            for pair in self._mlp_acc:
                for a in pair:
                    a[...] = flat[pos : pos + a.size].reshape(a.shape)
                    pos += a.size

    def state(self) -> ModelState:
        acc = self.mlp_acc_flat()
        return ModelState(
            self.table.copy(),
            self.mlp_flat(),
            None if self._row_acc is None else self._row_acc.copy(),
            acc,
        )

    def embedding_update(self, batch, bag_grads):
        before = self._row_acc.copy() if self.adagrad else None
        rows, values = super().embedding_update(batch, bag_grads)
        if before is not None:
            self._acc_before = (before[rows], self._row_acc[rows].copy())
        return rows, values

    def apply_rows(self, rows: np.ndarray, values: np.ndarray) -> None:
        old_acc, new_acc = self._acc_before if self._acc_before is not None else (None, None)
        self.row_updates.append(
            (rows.copy(), self.table[rows].copy(), values.copy(), old_acc, new_acc)
        )
        super().apply_rows(rows, values)

    def _snapshot(self) -> tuple[np.ndarray, np.ndarray | None]:
        """MLP parameters (and accumulators), flat and padded to whole words, copied
        once straight from the layers."""
        params = _flat_padded([p for layer in self.mlp_layers for p in layer])
        if not self.adagrad:
            return params, None
        return params, _flat_padded([a for pair in self._mlp_acc for a in pair])

    def apply_mlp(self, grads) -> None:
        if not self.mlp_states:
            self.mlp_states.append(self._snapshot())
        super().apply_mlp(grads)
        self.mlp_states.append(self._snapshot())


def _flat_padded(arrays: list[np.ndarray]) -> np.ndarray:
    total = sum(a.size for a in arrays)
    out = np.empty(-(-total // 2) * 2, dtype=np.float32)
    out[total:] = 0
    pos = 0
    for a in arrays:
        out[pos : pos + a.size] = a.reshape(-1)
        pos += a.size
    return out


class WriteLog:
    """Observes devices' persisted writes (engine events): per op, its requests, each
    device's addresses moved by its offset in the image (a cluster's devices lie side
    by side, components/persistence/cluster.py)."""

    def __init__(self, device, offset: int = 0) -> None:
        self.events: dict[int, list] = defaultdict(list)
        self.watch(device, offset)

    def watch(self, device, offset: int) -> None:
        def observe(persisted) -> None:
            if persisted.owner is not None and len(persisted.addresses):
                if offset:
                    persisted = replace(persisted, addresses=persisted.addresses + offset)
                self.events[persisted.owner].append(persisted)

        device.write_listeners.append(observe)

    @classmethod
    def of(cls, board: TrainingBoard, layout) -> WriteLog:
        """The table device's writes, or every CXL-MEM's of a cluster."""
        if not isinstance(layout, ClusterLayout):
            return cls(board.table_memory())
        log = cls(board.shards[0].pmem, layout.devices[0].base)
        for shard, device in zip(board.shards[1:], layout.devices[1:], strict=True):
            log.watch(shard.pmem, device.base)
        return log

    def requests(self) -> dict[int, Requests]:
        return {uid: Requests.from_events(events) for uid, events in self.events.items()}


@dataclass
class Stretch:
    """A simulated stretch of training and everything recorded about it."""

    start: int
    board: TrainingBoard
    scheduler: Scheduler
    requests: dict[int, Requests]
    facts: dict[int, BatchFacts]
    model: RecordingDLRM
    end_tick: int
    trainer: FunctionalTrainer
    generator: BatchSource
    layout: ImageLayout | ClusterLayout
    ends: list = field(default_factory=list)
    # op uid -> table rows its read streams fetched from the tables' memory, for a
    # policy whose checkpoints save chosen rows (CPR-MFU, CPR-SSU); else empty
    checkpoint_reads: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def records(self) -> list[OpRecord]:
        return self.scheduler.records

    @property
    def losses(self) -> list[float]:
        return self.trainer.losses

    def running(self, tick: int) -> list[OpRecord]:
        """Ops in progress at ``tick`` (or the next to start when none is)."""
        live = [r for r in self.records if r.start <= tick < r.end and r.resource]
        if live:
            return live
        later = [r for r in self.records if r.start > tick]
        return [min(later, key=lambda r: r.start)] if later else [self.records[-1]]

    def initial_state(self) -> ModelState:
        """The weights the stretch started from, rebuilt from its final model and every
        batch's recorded old values (no second model initialization)."""
        model = self.model
        table = model.table.copy()
        acc = None if model.row_acc() is None else model.row_acc().copy()
        for n in sorted(self.facts, reverse=True):
            f = self.facts[n]
            table[f.rows] = f.old
            if acc is not None:
                acc[f.rows] = f.old_acc
        first = self.facts[min(self.facts)] if self.facts else None
        count = model.spec.mlp_param_count
        if first is None:
            return model.state()
        mlp_acc = None if first.mlp_acc_before is None else first.mlp_acc_before[:count].copy()
        return ModelState(table, first.mlp_before[:count].copy(), acc, mlp_acc)

    def ops(self) -> list[OpView]:
        empty = Requests.empty()
        return [
            OpView(
                r.uid,
                r.name,
                r.batch,
                r.start,
                r.end,
                self.facts.get(r.batch),
                self.requests.get(r.uid, empty),
                r.resource or "",
            )
            for r in self.records
        ]


def run_stretch(
    options: RunOptions,
    start: int = 0,
    weights: ModelState | None = None,
    lr: float = DEFAULT_LR,
    optimizer: str = "sgd",
) -> Stretch:
    """Train batches [start, options.batches) from ``weights``, or from the seeded
    initial weights, timed on a fresh board and recorded."""
    spec, batch_size = resolve_functional(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    layout = image_layout(options, optimizer, board)
    observed = WriteLog.of(board, layout)
    reads = _checkpoint_reads(board, scheduler)
    model = RecordingDLRM(spec, lr=lr, seed=options.seed, optimizer=optimizer)
    if weights is not None:
        model.load_state(weights)
    trainer = FunctionalTrainer(model, relaxed=options.system == "cxl", replicas=board.gpu_count)
    generator = input_generator(options, spec, batch_size)
    ends = drive_batches(
        engine, board, spec, generator, range(start, options.batches), trainer=trainer,
        desc=f"{options.system}/{options.model} recorded", progress=options.progress,
    )  # fmt: skip
    trainer.flush()
    facts = {}
    for k, (rows, old, new, old_acc, new_acc) in enumerate(model.row_updates):
        (before, acc_before), (after, acc_after) = model.mlp_states[k], model.mlp_states[k + 1]
        facts[start + k] = BatchFacts(
            rows, old, new, before, after, old_acc, new_acc, acc_before, acc_after
        )
    return Stretch(
        start,
        board,
        scheduler,
        observed.requests(),
        facts,
        model,
        engine.now,
        trainer,
        generator,
        layout,
        ends,
        {uid: np.unique(np.concatenate(parts)) for uid, parts in reads.items()},
    )


def _checkpoint_reads(board: TrainingBoard, scheduler: Scheduler) -> dict[int, list]:
    """Listen to the reads of the tables' memory, by op, when a policy saves chosen rows
    (the schedule, not the policy's log, then says which rows a checkpoint holds); the
    addresses become row indices of that memory's tables (on several CXL-MEMs, each
    shard's own policy and local rows)."""
    reads: dict[int, list] = defaultdict(list)
    for shard in getattr(board, "shards", None) or [board]:
        ft = getattr(shard, "ft", None)
        if ft is not None and not ft.complete_rows:
            _listen(shard, scheduler, reads)
    return reads


def _listen(board: TrainingBoard, scheduler: Scheduler, reads: dict[int, list]) -> None:
    start, row_bytes = board.layout.regions()["data"][0], board.layout.row_bytes

    def heard(issued) -> None:
        if issued.kind == "read" and scheduler.current is not None:
            rows = (np.asarray(issued.addresses, np.int64) - start) // row_bytes
            reads[scheduler.current].append(rows)

    board.checkpoint_source().stream_listeners.append(heard)


def image_layout(
    options: RunOptions, optimizer: str = "sgd", board: TrainingBoard | None = None
) -> ImageLayout | ClusterLayout:
    """The image's layout; its shared regions sit where the board's timing writes them.
    A cluster's (``board``: a connected multi-device board) is its devices' layouts."""
    if board is not None and hasattr(board, "placement"):
        return cluster_layout(board)
    spec, batch_size = resolve_functional(options)
    max_rows = min(spec.total_rows, batch_size * spec.num_tables * spec.lookups_per_table)
    return ImageLayout(
        spec.total_rows, spec.embedding_dim, spec.mlp_param_count, max_rows, optimizer
    )


def cluster_layout(board) -> ClusterLayout:
    """The devices' layouts as the shards' timing addresses them, every global row's
    device and local id, and each device's MLP stripe."""
    rows = np.arange(board.spec.total_rows, dtype=np.int64)
    owner, local = board.placement.locate(rows)
    layouts = [shard.layout for shard in board.shards]
    stripes = [layout.mlp_count for layout in layouts]
    if sum(stripes) != board.spec.mlp_param_count:
        raise ValueError("a cluster needs at least one MLP parameter per CXL-MEM")
    return ClusterLayout.build(layouts, owner, local, stripes)


def identity(options: RunOptions, optimizer: str = "sgd", lr: float = DEFAULT_LR) -> dict:
    """What an image belongs to: the run's system, model, rows, batch size, seed,
    optimizer and learning rate, and a hash of every resolved board parameter."""
    spec, batch_size = resolve_functional(options)
    _, _, board = prepare(options)
    values = {path: str(getattr(obj, key)) for path, (obj, key) in board.param_paths().items()}
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "system": options.system,
        "model": options.model,
        "rows": max(spec.rows_per_table),
        "total_rows": spec.total_rows,
        "batch_size": batch_size,
        "seed": options.seed,
        "optimizer": optimizer,
        "lr": lr,
        "params": digest,
    }


def initial_image(
    options: RunOptions,
    path: str | None = None,
    optimizer: str = "sgd",
    lr: float = DEFAULT_LR,
    state: ModelState | None = None,
    layout: ImageLayout | ClusterLayout | None = None,
) -> PmemImage | ClusterImage:
    """The image formatted with the seeded initial weights (``state``, when the caller
    has them already) and its identity; a cluster's (``layout``) in memory."""
    if state is None:
        spec, _ = resolve_functional(options)
        model = DLRM(spec, seed=options.seed)
        state = ModelState(model.table, model.mlp_flat())
    if isinstance(layout, ClusterLayout):
        return ClusterImage.create(layout, state.table, state.mlp, identity(options, optimizer, lr))
    layout = image_layout(options, optimizer)
    return PmemImage.create(layout, state.table, state.mlp, path, identity(options, optimizer, lr))


def protocol_for(system: str, layout: ImageLayout | ClusterLayout) -> Protocol:
    """The system's protocol over one device's image, or over a cluster's."""
    if isinstance(layout, ClusterLayout):
        return CLUSTER_PROTOCOLS[system](layout)
    return PROTOCOLS[system](layout)


def persist_domain(board: TrainingBoard) -> str:
    shards = getattr(board, "shards", None)
    device = shards[0].pmem if shards else board.table_memory()
    return getattr(device, "domain", getattr(device, "persist_domain", "adr"))


def build_journal(protocol: Protocol, stretch: Stretch) -> Journal:
    """The stretch's functional writes, epoch by epoch, each piece timed by the device
    request that carried it (matched by address)."""
    ops = stretch.ops()
    protocol.prepare(ops)
    builder = JournalBuilder(stretch.layout, ordered=persist_domain(stretch.board) != "adr")
    for op in ops:
        epochs = protocol.epochs(op)
        if epochs:
            builder.add_op(op.uid, op.start, epochs, op.requests)
    return builder.freeze()
