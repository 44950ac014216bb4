"""The CXL systems: CXL-GPU and CXL-MEM as Type-2 devices behind one CXL switch.

CXL-D moves data automatically (each producer's DCOH flushes lines into the consumer's
memory over CXL.cache) and keeps a redo checkpoint at the end of every batch. CXL-B
replaces it with the batch-aware undo log, written in the background. CXL adds the
relaxed embedding lookup and the relaxed MLP log. Each is the previous board with a
few template methods overridden.

The checkpointing logic is a DMA engine with one channel per log (``cxl_mem.ckpt`` for
the embedding log, ``cxl_mem.ckpt_mlp`` for the MLP log, each driven by its counter), so
the two logs, the computing logic and the transfers all share CXL-MEM's PMEM and links
through the flow network.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from components.boards.base import BatchOps, index_payload
from components.boards.near_memory import NearMemoryBoard
from components.boards.software_ft import SoftwareCheckpointHooks
from components.compute.nmp import NearMemoryEngine
from components.interconnect.cxl import CxlLink, CxlPath, CxlSwitch, Type2Device, mmio_write
from components.memory.pmem import Pmem
from components.memory.rowsort import previous_matches
from components.persistence.image import log_slot
from components.sim.params import Enum, Int
from components.sim.schedule import Op, Stage
from components.sim.units import TICKS_PER_SECOND


class CxlDBoard(SoftwareCheckpointHooks, NearMemoryBoard):
    """CXL-D: near-memory embedding ops, automatic data movement, redo checkpoint."""

    system = "cxl-d"
    embedding_resource = "cxl_mem.nmp"
    checkpoint_resource = "cxl_mem.ckpt"
    mlp_log_resource = "cxl_mem.ckpt_mlp"
    to_gpu_resource = "cxl_mem.dcoh"
    to_mem_resource = "cxl_gpu.dcoh"
    indices_resource = None  # a posted MMIO write from the host; nothing else waits on it
    log_gate: tuple[Op, ...] = ()
    """Ops a batch's logs wait for before they overwrite slot N % 2, which holds batch
    N-2's log: on one device nothing (its own batch N-1 orders them); a shard of a
    cluster waits for the cluster's commit of batch N-1 (set by DisaggregatedBoard),
    since until then batch N-2 may be the newest batch every device holds."""

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.host_link = CxlLink()
        self.cxl_switch = CxlSwitch()
        self.cxl_gpu = Type2Device()
        self.cxl_mem = Type2Device(memory=Pmem(), memory_name="pmem")
        self.cxl_mem.nmp = NearMemoryEngine()
        self.ft = None  # CXL-D only: a host-driven SoftwareCheckpoint in place of the redo log

    @property
    def pmem(self) -> Pmem:
        return self.cxl_mem.pmem

    @property
    def nmp(self) -> NearMemoryEngine:
        return self.cxl_mem.nmp

    def resources(self) -> tuple[str, ...]:
        return (*super().resources(), self.checkpoint_resource, self.mlp_log_resource)

    def cxl_path(self, source: str, target: str) -> CxlPath:
        """Links and the switch between two of host, gpu and mem, in that direction."""
        port = {"host": self.host_link, "gpu": self.cxl_gpu.link, "mem": self.cxl_mem.link}
        return CxlPath([(port[source], "up"), (port[target], "down")], [self.cxl_switch])

    # ----- placement and movement ------------------------------------------------------
    def send_indices(self, demand) -> Stage:
        """The host writes the batch's indices into CXL-MEM over CXL.io (MMIO)."""
        return mmio_write(self.cxl_path("host", "mem"), index_payload(demand, self.index_bytes))

    def to_gpu(self, nbytes: int) -> Stage:
        """CXL-MEM's DCOH flushes the reduced vectors into GPU memory."""
        return self.cxl_mem.dcoh.flush(self.cxl_path("mem", "gpu"), nbytes)

    def to_mem(self, nbytes: int) -> Stage:
        """The GPU's DCOH flushes the embedding gradients into CXL-MEM."""
        return self.cxl_gpu.dcoh.flush(self.cxl_path("gpu", "mem"), nbytes)

    def mlp_log(self, slot: int, start: int, nbytes: int, header: bool) -> Stage:
        """Pull MLP bytes out of GPU memory over CXL.cache (CXL-MEM's DCOH) and stream
        them into MLP-log slot ``slot``: one pipelined flow over the links and PMEM."""
        pull = self.cxl_mem.dcoh.read(self.cxl_path("mem", "gpu"), nbytes)
        return self.mlp_log_writes(slot, start, nbytes, header, along=pull)

    # ----- a software checkpoint instead (CXL-D only): the host copies CXL-MEM's tables --
    def checkpoint_source(self) -> Pmem:
        """The memory a software checkpoint reads the tables from: CXL-MEM's PMEM, read
        by the host over CXL.mem (a checkpoint's copy is bound by PMEM and the store)."""
        return self.pmem

    def mlp_to_host(self, nbytes: int) -> Iterator[Stage]:
        """The MLP parameters flushed to the host by the GPU's DCOH, for a checkpoint."""
        yield self.cxl_gpu.dcoh.flush(self.cxl_path("gpu", "host"), nbytes)

    def mlp_to_gpu(self, nbytes: int) -> Iterator[Stage]:
        """Recovered MLP parameters read into GPU memory by its DCOH from the host."""
        yield self.cxl_gpu.dcoh.read(self.cxl_path("gpu", "host"), nbytes)

    # ----- the redo checkpoint -----------------------------------------------------------
    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Redo: log the batch's rows, then the MLPs pulled over CXL.cache, set the flag,
        then update in place (log before apply). None under a software checkpoint."""
        if self.ft is not None:
            return []
        n, demand = ops.batch, ops.demand
        slot, nbytes = log_slot(n), demand.mlp_param_bytes

        def log() -> Iterator[Stage]:
            self.nmp.start_mlp_log(nbytes)
            yield self.copy_rows(demand, slot)
            self.nmp.count_mlp(nbytes)
            yield self.mlp_log(slot, 0, nbytes, header=True)
            yield self.set_flag(f"emb{slot}")

        ops.extra["ckpt_log"] = self.scheduler.op(
            "ckpt_log",
            "checkpoint",
            n,
            self.checkpoint_resource,
            lambda now: log(),
            deps=[ops.grads, ops.bottom_bwd, *self.log_gate],
        )
        return [ops.extra["ckpt_log"]]


class CxlBBoard(CxlDBoard):
    """CXL-B: batch-aware undo logging in the background.

    The rows batch N will update are known from its indices, so the checkpointing logic
    copies them into the embedding log while the GPU computes; the update waits only
    for that log's persistent flag. The MLP log of batch N (the parameters before its
    update) is pulled over CXL.cache in the background, and the GPU may not overwrite
    the parameters until it is durable. Nothing runs at the end of the batch.
    """

    system = "cxl-b"
    lookup_resource = "cxl_mem.gather"

    def next_batch_gate(self, prev: BatchOps | None) -> list[Op]:
        return []

    def resources(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*super().resources(), self.lookup_resource)))

    # ----- line-level read-after-write --------------------------------------------------
    def lookup_deps(self, prev: BatchOps | None) -> list[Op]:
        """Lookup N+1 waits for the update before batch N's, whose rows it may read."""
        before = self._history[-2] if prev is not None and len(self._history) >= 2 else None
        return [before.update] if before is not None else []

    def lookup_start(self, prev: BatchOps | None) -> Op | None:
        """Strict, line by line: the engine issues lookup N+1 right after batch N's update
        (on a gather pipeline of its own, sharing the lanes and the PMEM through the flow
        network). Reads of lines the update has not written and drained wait for those
        writes (the device's read-after-write gates); reads of other lines go ahead."""
        return prev.update if prev is not None else None

    def mlp_update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Start both undo logs once the lookup has read the batch's indices: the update
        waits for the embedding log, the GPU's own MLP update for the MLP log."""
        ops.extra["emb_log"] = self.embedding_log(ops, prev)
        return self.mlp_log_ops(ops, prev)

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        return [ops.extra["emb_log"]]

    def embedding_log(self, ops: BatchOps, prev: BatchOps | None) -> Op:
        """Slot N % 2 is reused only once batch N-1's checkpoint (both logs) is complete."""
        deps = [ops.lookup] + ([prev.update] if prev else []) + list(self.log_gate)
        if prev is not None and "mlp_log" in prev.extra:
            deps.append(prev.extra["mlp_log"])
        slot = log_slot(ops.batch)

        def log() -> Iterator[Stage]:
            yield self.copy_rows(ops.demand, slot)
            yield self.set_flag(f"emb{slot}")

        return self.scheduler.op(
            "emb_log",
            "checkpoint",
            ops.batch,
            self.checkpoint_resource,
            lambda now: log(),
            deps=deps,
            background=True,
        )

    def mlp_log_ops(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Pull the parameters batch N starts from and log them before the GPU updates."""
        nbytes, slot = ops.demand.mlp_param_bytes, ops.batch % 2

        def log() -> Iterator[Stage]:
            self.nmp.start_mlp_log(nbytes)
            self.nmp.count_mlp(nbytes)
            yield self.mlp_log(slot, 0, nbytes, header=True)
            yield self.set_flag(f"mlp{slot}")

        deps = [ops.lookup] + ([prev.bottom_bwd] if prev else []) + list(self.log_gate)
        op = self.scheduler.op(
            "mlp_log",
            "checkpoint",
            ops.batch,
            self.mlp_log_resource,
            lambda now: log(),
            deps=deps,
            background=True,
        )
        ops.extra["mlp_log"] = op
        return [op]


class CxlBoard(CxlBBoard):
    """CXL: CXL-B + relaxed embedding lookup + relaxed MLP logging.

    Lookup N runs on the table as batch N-1 left it before its update (sum and add
    commute), so it no longer waits for the update. Its pooled vectors stay in the
    engine's bag buffer, and batch N-1's update, as it applies each row's gradient, adds
    the row's delta into every held bag that looked the row up; the corrected vectors
    then go to the GPU. Bags that do not fit the buffer (or ``correction=delta_region``)
    fall back to deltas written beside the table and read back by a correction op.

    The MLP log is pulled only while the GPU runs interaction + top MLP: a slice per
    batch moves what the shared links and PMEM let it move in that window, and stops
    when the window closes. A new copy starts every ``mlp_log_gap`` batches once the
    previous one is complete, from a snapshot the GPU takes of its MLPs (a device-memory
    copy, kept until the copy is logged): training never stalls on the log, and
    recovered MLPs may be up to one copy period behind the embeddings.
    """

    system = "cxl"
    mlp_log_gap = Int(
        1,
        "batches between the starts of two MLP log copies",
        "TrainingCXL relaxed batch-aware checkpoint (Figure 9a sweeps 0..10^4)",
        low=1,
    )
    correction = Enum(
        "gradient",
        "how the relaxed lookup is corrected: gradient (batch N's update adds each delta "
        "into batch N+1's held bags; the bags must fit nmp.bag_buffer, else delta_region) "
        "or delta_region (the update writes each row's delta to PMEM, a correction op "
        "reads them back: what holding no bags costs)",
        "paper: the reduced vectors are corrected when batch N's gradient is applied",
        choices=("gradient", "delta_region"),
    )

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.correctedLookups = self.scalar(
            "correctedLookups", "lookups of rows the previous batch updated (corrected)", "Count"
        )
        self.deltaRegionBatches = self.scalar(
            "deltaRegionBatches", "batches corrected through the PMEM delta region", "Count"
        )
        object.__setattr__(self, "_corrections", {})
        self.mlpLogCopies = self.scalar("mlpLogCopies", "complete MLP log copies", "Count")
        self.mlpLogBatches = self.average(
            "mlpLogBatches", "batches one MLP log copy spans", "Count"
        )
        self.mlpSnapshots = self.scalar(
            "mlpSnapshots", "MLP snapshots the GPU took for a new log copy", "Count"
        )
        object.__setattr__(
            self,
            "_copy",
            {"moved": 0, "total": 0, "started": None, "slot": 1, "id": 0}
            | {"completed": None, "logged": 0, "slices": 0},
        )

    def connect(self, engine, scheduler, spec, batch_size: int, **kw) -> None:
        super().connect(engine, scheduler, spec, batch_size, **kw)
        self.gpu.check_fits(2 * spec.mlp_param_bytes, "the MLPs and their log snapshot")

    lookup_resource = CxlBBoard.embedding_resource  # relaxed: ahead of the update, no RAW
    copy_gate: tuple[Op, ...] = ()
    """Ops a new MLP log copy's snapshot (and so its slices, which overwrite the other
    slot) waits for: on one device nothing; a shard of a cluster waits for the cluster's
    commit of the previous copy (set by DisaggregatedBoard), which until then may be
    the older copy in that slot."""

    def lookup_start(self, prev: BatchOps | None) -> Op | None:
        return None

    def update(self, demand) -> Stage:
        """The update; it also corrects the next batch's held bags (``pooled_ready``
        said how many lookups), or writes each row's delta for a correction op."""
        rows, row_bytes = self.unique_addresses(demand), self.layout.row_bytes
        unheard = None if self.correction == "delta_region" else 0  # no next batch issued
        corrections = self._corrections.pop(demand.batch, unheard)
        if corrections is None:
            deltas = self.layout.delta_offsets(len(rows))
            return self.nmp.update_with_deltas(self.pmem, rows, row_bytes, deltas)
        return self.nmp.update_correcting(self.pmem, rows, row_bytes, corrections)

    @property
    def update_writes_rows(self) -> bool:
        """With gradient correction the update writes its rows alone (the deltas go
        into held bags, or to PMEM where the bags do not fit: then not foreseen)."""
        return self.correction == "gradient"

    def pooled_ready(self, demand, lookup: Op, prev: BatchOps | None) -> Op:
        """The early lookup's vectors are ready once the previous batch's update has
        corrected them. Batch N+1 is issued once batch N's lookup is done, before batch
        N's update can start, so the update knows the corrections when it is built."""
        if prev is None:
            return lookup
        if prev.update.record.start >= 0:
            raise RuntimeError(f"batch {demand.batch} issued after batch {prev.batch}'s update")
        previous_rows = prev.demand.lookup.unique_rows
        slot, shared, corrected = _previous_slots(demand.lookup, previous_rows)
        access = demand.lookup
        self.correctedLookups += corrected
        held = access.pooled_bytes <= self.nmp.bag_buffer
        if self.correction == "gradient" and held:
            self._corrections[prev.batch] = corrected

            def body(now: int) -> int:
                return 0  # a join: the update did the work

            unit = None
        else:
            self._corrections[prev.batch] = None  # the update writes the deltas instead
            self.deltaRegionBatches += 1
            inverse = access.inverse  # the deltas in lookup order
            held_slots = slot[inverse][shared[inverse]]
            deltas = self.layout.delta_offsets(len(previous_rows))[held_slots]

            def body(now: int) -> Stage | int:
                if deltas.size == 0:
                    return 0
                return self.nmp.lookup(self.pmem, deltas, self.layout.row_bytes)

            unit = self.embedding_resource
        return self.scheduler.op(
            "lookup_correct", "embedding", demand.batch, unit, body, deps=[lookup, prev.update]
        )

    def carried_state(self) -> dict:
        """The MLP log copy in progress: copies span hundreds of batches."""
        return dict(self._copy)

    def restore_carried(self, state: dict, first: int, skipped: int, rates: dict) -> None:
        """Advance the copy over the skipped batches as the detailed ones did: each batch
        moves the bytes a slice moved on average (``rates["mlp_log_bytes"]``); a copy
        completed in batch c is seen complete by batch c + 2 at the earliest (batch c + 1
        is issued before c's slice ends), which starts the next copy where the gap
        allows."""
        copy, per_slice = dict(state), rates.get("mlp_log_bytes", 0.0)
        batch, end = first - skipped, first
        while per_slice > 0:
            if copy["moved"] < copy["total"]:
                needed = math.ceil((copy["total"] - copy["moved"]) / per_slice)
                if batch + needed > end:
                    copy["moved"] += int(per_slice * (end - batch))
                    break
                copy.update(moved=copy["total"], completed=batch + needed - 1)
                batch += needed
            completed = copy["completed"] if copy["completed"] is not None else batch - 2
            start = max(batch, completed + 2)
            start += -start % self.mlp_log_gap
            if start >= end:
                break
            batch = start
            copy.update(moved=0, started=start, slot=copy["slot"] ^ 1, id=copy["id"] + 1)
        object.__setattr__(self, "_copy", copy)
        if copy["moved"] < copy["total"]:
            self.nmp.start_mlp_log(copy["total"])
            self.nmp.count_mlp(copy["moved"])

    def bottom_deps(self, ops_batch: int, demand, prev: BatchOps | None) -> list[Op]:
        """A new MLP log copy starts from a snapshot of the MLPs the batch starts from."""
        state = self._copy
        if state["moved"] < state["total"] or ops_batch % self.mlp_log_gap:
            return []
        if state["completed"] is not None and ops_batch <= state["completed"] + 1:
            return []  # issued before that batch's slice ended (a restored state's case)
        nbytes = demand.mlp_param_bytes
        state.update(
            moved=0, total=nbytes, started=ops_batch, slot=state["slot"] ^ 1, id=state["id"] + 1
        )
        self.nmp.start_mlp_log(nbytes)
        self.mlpSnapshots += 1
        copy = self.gpu.copy_kernel(nbytes)
        return [
            self.scheduler.op(
                "mlp_snapshot",
                "checkpoint",
                ops_batch,
                self.gpu_resource,
                lambda now: self.gpu.run([copy]),
                deps=([prev.bottom_bwd] if prev else []) + list(self.copy_gate),
            )
        ]

    def mlp_log_ops(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        state = self._copy
        if state["moved"] >= state["total"]:
            return []
        burst = self.nmp.log_burst
        window = self.gpu.op_ticks(
            ops.demand.kernels["interaction_top_fwd"] + ops.demand.kernels["top_bwd_interaction"]
        )

        copy = state["id"]

        def slice_body() -> Iterator[Stage]:
            start, slot = state["moved"], state["slot"]
            remaining = state["total"] - start
            if state["id"] != copy or remaining == 0:  # an earlier slice completed the copy
                return
            # no more than the window could move at the path's and PMEM's full rates
            rate = min(self.cxl_path("mem", "gpu").bandwidth, self.pmem.write_bandwidth)
            most = (int(rate * window / TICKS_PER_SECOND) // burst + 2) * burst
            moved_stage = self.mlp_log(slot, start, min(remaining, most), header=False)
            yield moved_stage
            writes = moved_stage.flows[0].writes
            moved = min(sum(w.persisted * w.size for w in writes), remaining)
            state["moved"] += moved
            state["logged"] += moved
            state["slices"] += moved > 0
            self.nmp.count_mlp(moved)
            if state["moved"] < state["total"]:
                return
            state["completed"] = ops.batch
            self.mlpLogCopies += 1
            self.mlpLogBatches.sample(ops.batch - state["started"] + 1)
            yield self.mlp_log_writes(slot, state["total"], 0, header=True)
            yield self.set_flag(f"mlp{slot}")

        ops.extra["mlp_slice"] = self.scheduler.op(
            "mlp_log_slice",
            "checkpoint",
            ops.batch,
            self.mlp_log_resource,
            lambda now: slice_body(),
            background=True,
            start_with=ops.top,
            until=ops.top,
        )
        return []


def _previous_slots(lookup, previous_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Per unique row of ``lookup``: its index among the previous batch's sorted unique
    rows (clipped) and whether that batch has the row; and the lookups of those rows,
    which the update corrects (the demand has all three where it was built against the
    same previous rows). Per unique row, not per lookup: the counts of lookups per row
    carry them to the lookups without a binary search each."""
    if lookup.previous_rows is previous_rows:
        return lookup.previous_slot, lookup.previous_shared, lookup.reused_lookups
    slot, shared, _, lookups = previous_matches(previous_rows, lookup.unique_rows, lookup.counts)
    return slot, shared, lookups
