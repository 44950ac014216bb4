"""Software failure tolerance on a host board: the checkpointing industry uses today.

Instead of the paper's per-batch redo log, the host saves the model to a checkpoint
store (an NVMe SSD of its own, ``store``) now and then, and a failure loses the work
since the last complete checkpoint:

- ``CprCheckpoint`` (Maeng et al., "Understanding and Improving Failure Tolerant
  Training for Deep Learning Recommendation with Partial Recovery", MLSys 2021): a full
  checkpoint (every table, the MLPs) every ``interval`` seconds, training paused while
  it is written; the interval follows CPR's rule sqrt(2 x checkpoint time x MTBF)
  (Young's formula) when not given. Recovery is partial: the tables are reloaded and
  training goes on from where the data reader is, without replaying the lost batches.
- ``CheckNRunCheckpoint`` (Eisenman et al., "Check-N-Run", NSDI 2022): the first
  checkpoint is full, later ones hold only the rows modified since the previous one
  (tracked exactly from each batch's unique rows), optionally quantized to 8 or 4 bits
  per element (components/persistence/quantize.py); decoupled: training pauses only
  while the modified rows are snapshotted into host DRAM, and the snapshot is written
  to the store in the background, sharing DRAM, PCIe-attached storage and the host's
  cores with training in the timing core. A new full checkpoint replaces the chain once
  the differentials would outgrow it. Recovery reads the full checkpoint and every
  differential after it, and replays the batches since the last one.

A checkpoint's large sequential copies are bulk flows at the devices' streaming
bandwidth (``bulk``); scattered row reads of a differential go through the memory
model like any other stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from components.boards.base import BatchOps
from components.compute.host import HostCpu
from components.memory.dram import Dram
from components.memory.ssd import Ssd
from components.memory.stages import stage
from components.persistence.quantize import BITS, quantized_row_bytes
from components.sim.flows import Flow
from components.sim.params import Enum, Float
from components.sim.schedule import Op, Stage
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_SECOND

_CPR = "CPR (Maeng et al., MLSys 2021)"
_CNR = "Check-N-Run (Eisenman et al., NSDI 2022)"
SSU_STREAM = 0x55  # CPR-SSU's samples: the generator stream beside the run's seed


@dataclass
class Taken:
    """One checkpoint as the policy took it, for the failure model: the batch whose
    state it holds (after that batch's update), every row (``rows`` None) or the rows
    modified since the previous one, its stored bytes, and the op whose end makes it
    durable (the store write; its commit record is written last)."""

    batch: int
    rows: np.ndarray | None
    stored: int
    write: Op

    @property
    def full(self) -> bool:
        return self.rows is None


class SoftwareCheckpointHooks:
    """The board hooks a software checkpoint policy (``board.ft``) takes over, for the
    boards whose tables the host can checkpoint (the host boards, CXL-D): sizing its
    memories and the batch's checkpoint ops; without a policy, the board's own."""

    def size_memories(self, layout) -> None:
        super().size_memories(layout)
        if self.ft is not None:
            self.ft.size(layout)

    def checkpoint(self, ops: BatchOps, prev: BatchOps | None) -> list:
        if self.ft is None:
            return super().checkpoint(ops, prev)
        return self.ft.checkpoint_ops(self, ops, prev)


class SoftwareCheckpoint(SimObject):
    """A periodic checkpoint of host-resident tables to a store; subclasses say what a
    checkpoint holds and how training waits for it."""

    policy = "none"
    replays = False  # after a failure: the batches since the checkpoint rerun (or lost)
    unit = HostCpu.UNIT  # the host thread that runs a checkpoint's paused part
    store_unit = "ckpt_store"  # the queue of background store writes
    rule_bytes = 0  # bytes CPR's interval rule times (0: this board's full checkpoint)
    complete_rows = True  # a checkpoint holds every row modified since the previous one
    interval = Float(
        0.0,
        "simulated seconds between checkpoints (0: sqrt(2 x estimated checkpoint time x "
        "mtbf), CPR's rule)",
        f"{_CPR}, section 4: the optimal interval after Young (1974)",
        low=0.0,
        unit="s",
    )
    mtbf = Float(
        86400.0,
        "mean time between failures of the training job",
        f"assumption: a day, within the hours-to-days range {_CPR} evaluates",
        low=1.0,
        high=3.2e7,
        unit="s",
    )

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.store = Ssd()
        self.checkpoints = self.scalar("checkpoints", "checkpoints taken", "Count")
        self.checkpointBytes = self.scalar("checkpointBytes", "bytes written to the store", "Byte")
        self.checkpointRows = self.scalar("checkpointRows", "embedding rows checkpointed", "Count")
        object.__setattr__(self, "_last", None)  # tick the last checkpoint was due at
        object.__setattr__(self, "_modified", np.zeros(0, dtype=np.int64))
        object.__setattr__(self, "taken", [])  # Taken, in the order written

    # ----- what the board calls --------------------------------------------------------
    def size(self, layout) -> None:
        """Room for a full checkpoint and the differentials after it, twice over."""
        full = layout.regions()["data"][1] + layout.mlp_bytes
        self.store.capacity = f"{max(4 * full, 1 << 30)}B"

    def checkpoint_ops(self, board, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """This batch's checkpoint ops (the batch's end waits for those returned): one
        is due at the first batch issued ``interval`` after the previous one."""
        self._track(board, ops.demand)
        now = board.engine.now
        if self._last is not None and now - self._last < self.interval_ticks(board.layout):
            return []
        object.__setattr__(self, "_last", now)
        return self.take(board, ops, prev)

    def interval_ticks(self, layout) -> float:
        """The interval in ticks: as given, or CPR's rule from the estimated full
        checkpoint time (its bytes at the store's write bandwidth)."""
        seconds = self.interval
        if seconds == 0:
            full = self.rule_bytes or layout.regions()["data"][1] + layout.mlp_bytes
            seconds = math.sqrt(2 * full / self.store.write_bandwidth * self.mtbf)
        return seconds * TICKS_PER_SECOND

    def recovery(self, board, nbytes: int | None = None, mlps: bool = True) -> Iterator[Stage]:
        """After a failure: ``nbytes`` of checkpoints (default ``recovery_bytes``) read
        back from the store into the tables' memory (in order), then the MLPs copied to
        the GPU (``mlps`` False: the GPUs kept theirs, one device of several failed)."""
        size = board.layout.regions()["data"][1]
        yield bulk_stage(
            ("read", self.store, self.recovery_bytes(board) if nbytes is None else nbytes),
            ("write", board.checkpoint_source(), size),
            latency=board.host.op_overhead,
        )
        if mlps:
            yield from board.mlp_to_gpu(board.layout.mlp_bytes)

    def recovery_bytes(self, board) -> int:
        """Bytes a recovery reads from the store: the last full checkpoint."""
        return board.layout.regions()["data"][1] + board.layout.mlp_bytes

    # ----- subclasses ------------------------------------------------------------------
    def take(self, board, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        raise NotImplementedError

    def _track(self, board, demand) -> None:
        """What the policy remembers of each batch between checkpoints."""

    # ----- shared stages ---------------------------------------------------------------
    def dump(self, board, nbytes: int) -> Stage:
        """Every table read in order from its memory, ``nbytes`` (the tables and the
        MLPs) written in order to the store."""
        size = board.layout.regions()["data"][1]
        self.checkpointBytes += nbytes
        return bulk_stage(
            ("read", board.checkpoint_source(), size),
            ("write", self.store, nbytes),
            latency=board.host.op_overhead,
        )


def bulk(direction: str, device, nbytes: int) -> dict[str, float]:
    """Media needs of a large sequential transfer spread evenly over ``device``'s
    controllers at their streaming bandwidth. Checkpoints move gigabytes in order, so
    every row-buffer or page is used whole: the per-line analysis of scattered streams
    (components/memory/base.py) would give the same rate at 10^8 lines of cost."""
    ctrls = list(device._controllers())
    each = nbytes / len(ctrls)
    for ctrl in ctrls:  # whole pages and bursts: the media moves what was asked
        if direction == "read":
            ctrl.bytesRead += each
            ctrl.mediaBytesRead += each
        else:
            ctrl.bytesWritten += each
            ctrl.mediaBytesWritten += each
    bandwidth = device.ctrl_read_bandwidth if direction == "read" else device.ctrl_write_bandwidth
    return {ctrl.path: each / bandwidth * TICKS_PER_SECOND for ctrl in ctrls}


def bulk_stage(*parts: tuple[str, object, int], latency: int = 0) -> Stage:
    """Bulk transfers that flow together (a copy: its reads and its writes)."""
    needs: dict[str, float] = {}
    for direction, device, nbytes in parts:
        for key, ticks in bulk(direction, device, nbytes).items():
            needs[key] = needs.get(key, 0.0) + ticks
    first = max((d.idle_read_latency if k == "read" else d.idle_write_latency) for k, d, _ in parts)
    return Stage([Flow(needs)], int(first) + latency)


class CprCheckpoint(SoftwareCheckpoint):
    """Full checkpoints, training paused; partial recovery without replay. After a full
    checkpoint, CPR's prioritised ones save only some rows (the rest keep their older
    saved values), until those partial checkpoints would outgrow a full one: with
    ``mfu_share`` < 1 (CPR-MFU) the rows looked up most often since the previous
    checkpoint; with ``ssu_share`` < 1 (CPR-SSU) a seeded uniform sample of the rows
    looked up at all since then (no per-row counters). At most one of them is below 1."""

    policy = "cpr"
    mfu_share = Float(
        1.0,
        "share of the embedding rows a checkpoint after a full one saves: those looked up "
        "most often since the previous checkpoint (CPR-MFU); 1: every checkpoint full",
        f"{_CPR}, section 5: MFU checkpoints save the most frequently used rows more often",
        low=1e-9,
        high=1.0,
    )
    ssu_share = Float(
        1.0,
        "share of the rows looked up since the previous checkpoint that a checkpoint after "
        "a full one saves, a uniform sample seeded from the run's seed (CPR-SSU); 1: every "
        "checkpoint full",
        f"{_CPR}, section 5: SSU checkpoints save a random sub-sample of the rows used "
        "since the last checkpoint, tracked without MFU's access counters",
        low=1e-9,
        high=1.0,
    )

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        object.__setattr__(self, "_uses", None)  # lookups per row since the last checkpoint
        object.__setattr__(self, "_full", 0)  # bytes of the last full checkpoint
        object.__setattr__(self, "_since_full", 0)  # partial bytes stored after it
        object.__setattr__(self, "seed", 0)  # the run's seed: SSU's samples derive from it

    @property
    def prioritised(self) -> str | None:
        """ "mfu", "ssu", or None (every checkpoint full)."""
        if self.mfu_share < 1 and self.ssu_share < 1:
            raise ValueError(
                "board.ft.mfu_share and board.ft.ssu_share are alternatives (CPR-MFU or "
                f"CPR-SSU): set one of them below 1, not both ({self.mfu_share:g}, "
                f"{self.ssu_share:g})"
            )
        return "mfu" if self.mfu_share < 1 else "ssu" if self.ssu_share < 1 else None

    def _track(self, board, demand) -> None:
        if self.prioritised is not None:
            self.count_lookups(demand.lookup.rows, board.layout.total_rows)

    def count_lookups(self, rows, total_rows: int) -> None:
        """Count a batch's lookups (flat rows) towards the next checkpoint's choice."""
        if self._uses is None:
            object.__setattr__(self, "_uses", np.zeros(total_rows, np.int64))
        np.add.at(self._uses, np.asarray(rows, np.int64), 1)

    def most_used(self, total_rows: int) -> np.ndarray:
        """The ceil(share x rows) rows looked up most often (ties: lower row first) that
        were looked up at all, in row order."""
        count = math.ceil(self.mfu_share * total_rows)
        used = np.flatnonzero(self._uses)
        order = np.lexsort((used, -self._uses[used]))
        return np.sort(used[order[:count]])

    def sub_sampled(self, checkpoint: int) -> np.ndarray:
        """CPR-SSU: ceil(share x used) of the rows looked up since the previous
        checkpoint, drawn uniformly without replacement by a generator seeded with the
        run's seed and the checkpoint's index, in row order."""
        used = np.flatnonzero(self._uses)
        count = math.ceil(self.ssu_share * len(used))
        rng = np.random.default_rng([self.seed, SSU_STREAM, checkpoint])
        return np.sort(rng.choice(used, size=count, replace=False))

    def choose(self, data: int, row_bytes: int, mlps: int, index: int) -> np.ndarray | None:
        """The rows checkpoint ``index`` saves (None: every row, a full one), from the
        uses tracked since the previous one (then cleared): prioritised rows after a
        full checkpoint, a new full one once they would outgrow it."""
        rows, kind = None, self.prioritised
        if kind is not None and self._full:
            total = data // row_bytes
            rows = self.most_used(total) if kind == "mfu" else self.sub_sampled(index)
            if self._since_full + len(rows) * row_bytes + mlps > self._full:
                rows = None  # a new baseline: recovery would read more than a full one
        if self._uses is not None:
            self._uses[:] = 0
        stored = self.stored_bytes(rows, data, row_bytes, mlps)
        if rows is None:
            object.__setattr__(self, "_full", stored)
            object.__setattr__(self, "_since_full", 0)
        else:
            object.__setattr__(self, "_since_full", self._since_full + stored)
        return rows

    @staticmethod
    def stored_bytes(rows: np.ndarray | None, data: int, row_bytes: int, mlps: int) -> int:
        """What a checkpoint of ``rows`` (None: all ``data``) and the MLPs stores."""
        return (data if rows is None else len(rows) * row_bytes) + mlps

    def take(self, board, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        n, data = ops.batch, board.layout.regions()["data"][1]
        row_bytes, mlps = board.layout.row_bytes, ops.demand.mlp_param_bytes
        rows = self.choose(data, row_bytes, mlps, len(self.taken))
        stored = self.stored_bytes(rows, data, row_bytes, mlps)
        self.checkpoints += 1
        self.checkpointRows += data // row_bytes if rows is None else len(rows)

        def body(now):
            yield from board.mlp_to_host(mlps)
            if rows is None:
                yield self.dump(board, stored)
                return
            yield from self.save_rows(board, rows, stored)

        deps = [ops.update, ops.bottom_bwd]
        op = board.scheduler.op("cpr_checkpoint", "checkpoint", n, self.unit, body, deps)
        self.taken.append(Taken(n, rows, stored, op))
        return [op]

    def save_rows(self, board, rows: np.ndarray, stored: int) -> Iterator[Stage]:
        """A prioritised checkpoint's copy: ``rows`` (flat row indices) read scattered
        from the tables' memory, then ``stored`` bytes (the rows and the MLPs) written to
        the store."""
        start, row_bytes = board.layout.regions()["data"][0], board.layout.row_bytes
        addresses = start + np.asarray(rows, np.int64) * row_bytes
        read = board.checkpoint_source().read(
            addresses, row_bytes, board.host.outstanding(row_bytes)
        )
        yield stage(read, latency=board.host.op_overhead)
        self.checkpointBytes += stored
        yield bulk_stage(("write", self.store, stored), latency=board.host.op_overhead)

    @property
    def complete_rows(self) -> bool:
        return self.prioritised is None


class CheckNRunCheckpoint(SoftwareCheckpoint):
    """Differential, optionally quantized, decoupled checkpoints."""

    policy = "check-n-run"
    replays = True
    quantize = Enum(
        "none",
        "bits per element of checkpointed rows (none: FP32 as trained)",
        f"{_CNR}, section 4.2: 8-bit and 4-bit uniform quantization",
        choices=("none", *(str(b) for b in BITS)),
    )

    def _track(self, board, demand) -> None:
        """Rows modified since the last checkpoint (Check-N-Run's tracking)."""
        rows = board.unique_addresses(demand)
        object.__setattr__(self, "_modified", np.union1d(self._modified, rows))

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.dram = Dram()  # the snapshot buffer, where the tables are not in DRAM
        object.__setattr__(self, "_full", 0)  # bytes of the last full checkpoint
        object.__setattr__(self, "_since_full", 0)  # differential bytes stored after it
        object.__setattr__(self, "_writing", None)  # the background write in flight

    def recovery_bytes(self, board) -> int:
        """The last full checkpoint and every differential after it."""
        return self._full + self._since_full

    def snapshot_memory(self, board):
        """Host DRAM for the snapshot: the tables' own channels on the DRAM system."""
        tables = getattr(board, "storage", None)
        return tables if isinstance(tables, Dram) else self.dram

    def row_bytes_stored(self, board) -> int:
        """Bytes per checkpointed row on the store (the FP32 row, or its codes + range)."""
        if self.quantize == "none":
            return board.layout.row_bytes
        return quantized_row_bytes(board.spec.embedding_dim, int(self.quantize))

    def snapshot(self, board, rows: np.ndarray | None, mlp_bytes: int) -> Iterator[Stage]:
        """Training waits while the rows (``None``: every row, a full checkpoint, read in
        order) are copied aside into host DRAM and the MLPs pulled off the GPU."""
        yield from board.mlp_to_host(mlp_bytes)
        row_bytes = board.layout.row_bytes
        start, size = board.layout.regions()["data"]
        source, aside = board.checkpoint_source(), self.snapshot_memory(board)
        if rows is None:
            yield bulk_stage(("read", source, size), ("write", aside, size))
            return
        read = source.read(rows, row_bytes, board.host.outstanding(row_bytes))
        yield stage(read, latency=board.host.op_overhead)
        yield bulk_stage(("write", aside, len(rows) * row_bytes))

    def write(self, board, snapshot_bytes: int, stored: int) -> Iterator[Stage]:
        """The background write: the snapshot read from DRAM, ``stored`` bytes (after
        quantization) written to the store."""
        aside = self.snapshot_memory(board)
        yield bulk_stage(("read", aside, snapshot_bytes), ("write", self.store, stored))

    def take(self, board, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        n, s = ops.batch, board.scheduler
        row_bytes, stored_row = board.layout.row_bytes, self.row_bytes_stored(board)
        size = board.layout.regions()["data"][1]
        rows, mlps = self._modified, ops.demand.mlp_param_bytes
        # a new baseline once the differentials would outgrow one (recovery reads both)
        full = self._full == 0 or self._since_full + len(rows) * stored_row + mlps > self._full
        count = size // row_bytes if full else len(rows)
        object.__setattr__(self, "_modified", np.zeros(0, dtype=np.int64))
        self.checkpoints += 1
        self.checkpointRows += count
        stored = count * stored_row + mlps
        if full:
            object.__setattr__(self, "_full", stored)
            object.__setattr__(self, "_since_full", 0)
        else:
            object.__setattr__(self, "_since_full", self._since_full + stored)
        snapshot_bytes = count * row_bytes
        deps = [ops.update, ops.bottom_bwd]
        if self._writing is not None:  # one snapshot buffer: the last write must be out
            deps.append(self._writing)
        snap = s.op(
            "cnr_snapshot", "checkpoint", n, self.unit,
            lambda now: self.snapshot(board, None if full else rows, mlps), deps,
        )  # fmt: skip

        def write(now):
            self.checkpointBytes += stored
            return self.write(board, snapshot_bytes, stored)

        writing = s.op(
            "cnr_write", "checkpoint", n, self.store_unit, write, [snap], background=True
        )
        object.__setattr__(self, "_writing", writing)
        start = board.layout.regions()["data"][0]
        held = None if full else (rows - start) // row_bytes
        self.taken.append(Taken(n, held, stored, writing))
        return [snap]


class NoCheckpoint(SoftwareCheckpoint):
    """Nothing saved: a failure loses the tables (the lower bound on overhead); training
    restarts from the initial weights."""

    policy = "none"
    replays = True

    def checkpoint_ops(self, board, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        return []


POLICIES: dict[str, type[SoftwareCheckpoint]] = {
    cls.policy: cls for cls in (CprCheckpoint, CheckNRunCheckpoint, NoCheckpoint)
}
SOFTWARE_FT_SYSTEMS = ("dram", "pmem", "ssd", "cxl-d")  # the host drives the checkpoint
