"""The training board: one batch's op graph mapped onto devices.

Every system in the paper runs the same batch (bottom-MLP forward, embedding lookup,
pooled vectors to the GPU, interaction + top MLP, gradients back, bottom-MLP backward,
embedding update); systems differ only in where the embedding ops run, how data moves
and how they checkpoint. ``TrainingBoard.issue_batch`` is that skeleton; subclasses
override the small template methods below it, the way gem5's HighBandwidthMemory
overrides two methods of ChanneledMemory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from components.compute.gpu import Gpu
from components.compute.host import HostCpu
from components.memory.base import MemoryDevice
from components.persistence.image import ImageLayout
from components.sim.engine import Engine
from components.sim.params import ConfigError, Int
from components.sim.schedule import Op, Scheduler, Stage
from components.sim.simobject import SimObject


@dataclass
class BatchOps:
    """The ops of one batch that later batches and the checkpoint policy refer to."""

    batch: int
    demand: object
    lookup: Op
    top_deps: list[Op]
    top: Op
    bottom_bwd: Op | None = None
    update: Op | None = None
    end: Op | None = None
    extra: dict[str, Op] = field(default_factory=dict)
    grads: Op | None = None


class TrainingBoard(SimObject):
    """Base of every system's board. Subclasses build their devices in __init__."""

    system = "base"
    index_bytes = Int(
        4,
        "bytes per sparse index sent each batch",
        "assumption: int32 indices cover every table of RM1-RM4 (<= 2^31 rows)",
        low=1,
        high=8,
    )

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.rename("board")
        self.gpu = Gpu()
        self.host = HostCpu()
        self.addresses = AddressCache()
        self.batchTicks = self.average("batchTicks", "mean time per batch", "Tick")
        self.batches = self.scalar("batches", "batches completed", "Count")
        self.lookupsPerBatch = self.average("lookupsPerBatch", "embedding lookups", "Count")
        self.uniqueRows = self.average("uniqueRows", "distinct rows a batch touches", "Count")
        self.reusedRows = self.average(
            "reusedRows", "distinct rows also touched by the previous batch", "Count"
        )
        self.reuseFraction = self.formula(
            "reuseFraction",
            "share of a batch's distinct rows the previous batch touched (RAW candidates)",
            "Ratio",
            lambda: self.reusedRows.total / max(self.uniqueRows.total, 1),
        )
        self.intraBatchReuse = self.average(
            "intraBatchReuse",
            "share of a batch's lookups that repeat a row the batch already looked up",
            "Ratio",
        )

    # ----- wiring ---------------------------------------------------------------
    def connect(
        self, engine: Engine, scheduler: Scheduler, spec, batch_size: int,
        mlp_count: int | None = None,
    ) -> None:  # fmt: skip
        """Attach to an engine and lay out the model's tables and logs (the persistence
        image's layout: timing and recovery see the same addresses). ``mlp_count``: the
        MLP parameters this board logs (None: all of them; a shard logs its stripe)."""
        object.__setattr__(self, "engine", engine)
        object.__setattr__(self, "scheduler", scheduler)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "_history", [])
        max_unique = min(spec.total_rows, batch_size * spec.num_tables * spec.lookups_per_table)
        mlp_count = spec.mlp_param_count if mlp_count is None else mlp_count
        layout = ImageLayout(spec.total_rows, spec.embedding_dim, mlp_count, max_unique)
        object.__setattr__(self, "layout", layout)
        self._check_index_width(spec)
        self.size_memories(layout)
        for device in self.descendants():
            if isinstance(device, MemoryDevice):
                device.check_modules()
        for device in self.descendants():
            if isinstance(device, MemoryDevice):
                device.bind(engine.event)
        for name in self.resources():
            scheduler.resource(name)

    def _check_index_width(self, spec) -> None:
        """An index of index_bytes must name every row of the largest table."""
        rows = max(spec.rows_per_table)
        if rows > 256**self.index_bytes:
            raise ConfigError(
                f"{self.path}.index_bytes: bad value {self.index_bytes}: {rows:,} rows in "
                f"the largest table need at least {-(-(rows - 1).bit_length() // 8)} bytes "
                "per index"
            )

    def absorb(self, scheduler: Scheduler) -> None:
        """Copy what the flow network and the units saw into the components' stats."""
        use, units = scheduler.network.use, scheduler.resources
        for obj in self.descendants():
            if hasattr(obj, "absorb_use"):
                obj.absorb_use(use, units)

    def size_memories(self, layout: ImageLayout) -> None:
        """Give the table-holding device enough modules for the tables (and logs)."""
        device = self.table_memory()
        device.capacity = f"{layout.size}B"

    def resources(self) -> tuple[str, ...]:
        return (
            self.gpu_resource,
            self.embedding_resource,
            self.to_gpu_resource,
            self.to_mem_resource,
        )

    # ----- the batch skeleton ---------------------------------------------------------
    def issue_batch(self, demand) -> BatchOps:
        """Create every op of one batch; returns the handles later batches depend on."""
        s = self.scheduler
        n = demand.batch
        prev = self._history[-1] if self._history else None
        self.sample_reuse(demand, prev)
        gate = self.next_batch_gate(prev)
        kernels = demand.kernels
        indices = s.op(
            "indices",
            "transfer",
            n,
            self.indices_resource,
            lambda now: self.send_indices(demand),
            deps=gate,
        )
        bottom_deps = list(gate) + ([prev.bottom_bwd] if prev else [])
        bottom_deps += self.bottom_deps(n, demand, prev)
        bottom = s.op(
            "bottom_fwd",
            "bottom_mlp",
            n,
            self.gpu_resource,
            lambda now: self.gpu.run(kernels["bottom_fwd"]),
            deps=bottom_deps,
        )
        lookup = s.op(
            "lookup",
            "embedding",
            n,
            self.lookup_resource,
            lambda now: self.lookup(demand),
            deps=[indices, *self.lookup_deps(prev)],
            start_with=self.lookup_start(prev),
        )
        pooled_ready = self.pooled_ready(demand, lookup, prev)
        to_gpu = s.op(
            "pooled_to_gpu",
            "transfer",
            n,
            self.to_gpu_resource,
            lambda now: self.to_gpu(demand.lookup.pooled_bytes),
            deps=[pooled_ready],
        )
        top_kernels = kernels["interaction_top_fwd"] + kernels["top_bwd_interaction"]
        top = s.op(
            "interaction_top",
            "top_mlp",
            n,
            self.gpu_resource,
            lambda now: self.gpu.run(top_kernels),
            deps=[bottom, to_gpu],
        )
        grads = s.op(
            "grads_to_mem",
            "transfer",
            n,
            self.to_mem_resource,
            lambda now: self.to_mem(demand.lookup.grad_bytes),
            deps=[top],
        )
        ops = BatchOps(n, demand, lookup, [bottom, to_gpu], top, grads=grads)
        bottom_bwd = s.op(
            "bottom_bwd",
            "bottom_mlp",
            n,
            self.gpu_resource,
            lambda now: self.gpu.run(kernels["bottom_bwd"]),
            deps=[top, *self.mlp_update_deps(ops, prev)],
        )
        ops.bottom_bwd = bottom_bwd
        update = s.op(
            "update",
            "embedding",
            n,
            self.embedding_resource,
            lambda now: self.update(demand),
            deps=[grads, *self.update_deps(ops, prev)],
        )
        ops.update = update
        closing = [update, bottom_bwd, *self.checkpoint(ops, prev)]
        ops.end = s.op("batch_end", "idle", n, None, lambda now: 0, deps=closing)
        self._history.append(ops)
        if len(self._history) > 3:
            self._history.pop(0)
        return ops

    def sample_reuse(self, demand, prev: BatchOps | None) -> None:
        """The batch's lookups, distinct rows and their reuse, into the board's stats."""
        self.lookupsPerBatch.sample(demand.lookup.lookups)
        lookups = max(int(demand.lookup.lookups), 1)
        self.intraBatchReuse.sample(1 - len(demand.lookup.unique_rows) / lookups)
        if prev is not None:
            self.uniqueRows.sample(len(demand.lookup.unique_rows))
            self.reusedRows.sample(demand.lookup.reused_rows)

    # ----- template methods: placement and data movement ------------------------------
    gpu_count = 1  # data-parallel replicas (components/boards/disaggregated.py has more)
    gpu_resource = "gpu"  # the GPU's command stream
    embedding_resource = "embedding"
    to_gpu_resource = "link_to_gpu"
    to_mem_resource = "link_to_mem"

    @property
    def indices_resource(self) -> str | None:
        return self.to_mem_resource

    @property
    def lookup_resource(self) -> str:
        """The unit that runs the lookup: the embedding unit, unless a board gives the
        lookup a pipeline of its own (to run beside the previous batch's update)."""
        return self.embedding_resource

    def table_memory(self):
        raise NotImplementedError

    def send_indices(self, demand) -> int | Stage:
        """Host sends the batch's sparse indices to whoever runs the lookup."""
        return 0

    def lookup(self, demand) -> Stage | Iterator[Stage]:
        raise NotImplementedError

    def update(self, demand) -> Stage | Iterator[Stage]:
        raise NotImplementedError

    def to_gpu(self, nbytes: int) -> Stage | Iterator[Stage]:
        raise NotImplementedError

    def to_mem(self, nbytes: int) -> Stage | Iterator[Stage]:
        raise NotImplementedError

    # ----- template methods: ordering and checkpointing ---------------------------------
    def next_batch_gate(self, prev: BatchOps | None) -> list[Op]:
        """Ops the next batch must wait for before it starts (a redo checkpoint)."""
        return [prev.end] if prev is not None and prev.end is not None else []

    def bottom_deps(self, batch: int, demand, prev: BatchOps | None) -> list[Op]:
        """Extra ops the batch's bottom-MLP forward waits for (an MLP snapshot)."""
        return []

    def lookup_deps(self, prev: BatchOps | None) -> list[Op]:
        """Strict ordering: a lookup reads the table after the previous update."""
        return [prev.update] if prev is not None else []

    def lookup_start(self, prev: BatchOps | None) -> Op | None:
        """An op the lookup may start with (it then waits for that op's start, not
        its end, besides ``lookup_deps``); None: none."""
        return None

    def pooled_ready(self, demand, lookup: Op, prev: BatchOps | None) -> Op:
        return lookup

    def mlp_update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        return []

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        return []

    def checkpoint(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Ops that persist this batch's state; the batch ends when they all have."""
        return []

    # ----- state that outlives a batch (sampled simulation) ----------------------------
    def carried_state(self) -> dict:
        """What of this board outlives a batch that a few detailed warm-up batches do not
        rebuild (a log copy spanning hundreds of batches, a large cache): a sampled run
        carries it from one detailed unit to the next. Buffers and queues that one batch
        refills are left to the warm-up."""
        return {}

    def restore_carried(self, state: dict, first: int, skipped: int, rates: dict) -> None:
        """Take ``state`` as it was ``skipped`` batches before batch ``first`` and advance
        it over them functionally (``rates``: per-batch progress measured in detail)."""

    def warm(self, demand) -> None:
        """Advance address-dependent state over a batch that is not timed."""

    warms_functionally = False  # whether skipped batches must be generated and warmed

    # ----- helpers for subclasses ------------------------------------------------------
    def unique_addresses(self, demand) -> np.ndarray:
        """The batch's distinct rows' addresses, found once per batch and read-only: the
        update and the log copy read the same array, so a device digests it once
        (components/memory/memo.py)."""
        rows = demand.lookup.unique_rows
        return self.addresses.of(rows, "rows", lambda: self.layout.row_offset(rows))

    def lookup_addresses(self, demand) -> np.ndarray:
        """The batch's looked-up rows' addresses, found once per batch and read-only (so
        a digest made ahead of the lookup is found: foresee)."""
        rows = demand.lookup.rows
        return self.addresses.of(rows, "rows", lambda: self.layout.row_offset(rows))

    def foresight(self, demand) -> list[Callable[[], None]]:
        """Pieces of work that digest this batch's embedding streams that depend on its
        rows alone, for the thread that makes the batches to do while it waits
        (simulate/run/prefetch.py): the engine's thread then finds them done. Boards whose
        streams are known here list them; the rest digest them when issued."""
        return []

    def record_batch(self, ticks: int) -> None:
        self.batchTicks.sample(ticks)
        self.batches += 1


class AddressCache:
    """The addresses made from the last few row arrays asked for, each made once and
    read-only, so that a digest of them made ahead is found (components/memory/memo.py).
    Batch N+1's lookup (which the device tells the distinct rows) may come before batch
    N's update and log copy, and the batch maker's thread asks for batch N+2's while
    the engine's asks for batch N's: a lock makes each once."""

    # looked-up rows, distinct rows and log entries of six batches. The batch maker may
    # find a batch's distinct rows (foresight) five batches' worth of addresses before
    # that batch's update asks for them last: under load a trace had 13 made between
    # (the test of each batch finding its addresses once failed 2-5 times in 8 at 12)
    DEPTH = 18

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[np.ndarray, object, np.ndarray]] = []

    def __reduce__(self):
        """A copy (a board copied to explore crashes) starts empty: addresses are made
        again on demand, the same values."""
        return (type(self), ())

    def of(self, rows: np.ndarray, tag: object, make: Callable[[], np.ndarray]) -> np.ndarray:
        """The addresses ``make()`` gives for ``rows`` (the very array) and ``tag``."""
        with self._lock:
            for held_rows, held_tag, addresses in self._held:
                if held_rows is rows and held_tag == tag:
                    return addresses
            addresses = make()
            addresses.flags.writeable = False
            self._held = [(rows, tag, addresses), *self._held[: self.DEPTH - 1]]
            return addresses


def index_payload(demand, index_bytes: int) -> int:
    return int(demand.lookup.lookups) * index_bytes
