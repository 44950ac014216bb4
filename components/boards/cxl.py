"""The CXL systems: CXL-GPU and CXL-MEM as Type-2 devices behind one CXL switch.

CXL-D moves data automatically (each producer's DCOH flushes lines into the consumer's
memory over CXL.cache) and keeps a redo checkpoint at the end of every batch. CXL-B
replaces it with the batch-aware undo log, written in the background. CXL adds the
relaxed embedding lookup and the relaxed MLP log. Each is the previous board with a
few template methods overridden.
"""

from __future__ import annotations

import numpy as np

from components.boards.base import BatchOps, index_payload, log_addresses
from components.boards.near_memory import NearMemoryBoard
from components.compute.nmp import NearMemoryEngine
from components.interconnect.cxl import CxlLink, CxlPath, CxlSwitch, Type2Device, mmio_write_ticks
from components.memory.pmem import Pmem
from components.sim.params import Int
from components.sim.schedule import Op


class CxlDBoard(NearMemoryBoard):
    """CXL-D: near-memory embedding ops, automatic data movement, redo checkpoint."""

    system = "cxl-d"
    embedding_resource = "cxl_mem.nmp"
    checkpoint_resource = "cxl_mem.ckpt"
    to_gpu_resource = "cxl.mem_to_gpu"
    to_mem_resource = "cxl.gpu_to_mem"

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.host_link = CxlLink()
        self.cxl_switch = CxlSwitch()
        self.cxl_gpu = Type2Device()
        self.cxl_mem = Type2Device(memory=Pmem(), memory_name="pmem")
        self.cxl_mem.nmp = NearMemoryEngine()

    @property
    def pmem(self) -> Pmem:
        return self.cxl_mem.pmem

    @property
    def nmp(self) -> NearMemoryEngine:
        return self.cxl_mem.nmp

    def resources(self) -> tuple[str, ...]:
        return (*super().resources(), self.checkpoint_resource)

    def cxl_path(self, source: str, target: str) -> CxlPath:
        """Links and the switch between two of host, gpu and mem, in that direction."""
        port = {
            "host": (self.host_link, "up"),
            "gpu": (self.cxl_gpu.link, "up"),
            "mem": (self.cxl_mem.link, "up"),
        }
        out_link, _ = port[source]
        in_link, _ = port[target]
        return CxlPath([(out_link, "up"), (in_link, "down")], [self.cxl_switch])

    # ----- placement and movement ------------------------------------------------------
    def indices_ticks(self, demand) -> int:
        """The host writes the batch's indices into CXL-MEM over CXL.io (MMIO)."""
        return mmio_write_ticks(
            self.cxl_path("host", "mem"), index_payload(demand, self.index_bytes), record=True
        )

    def to_gpu_ticks(self, nbytes: int) -> int:
        """CXL-MEM's DCOH flushes the reduced vectors into GPU memory."""
        return self.cxl_mem.dcoh.flush_ticks(self.cxl_path("mem", "gpu"), nbytes, record=True)

    def to_mem_ticks(self, nbytes: int) -> int:
        """The GPU's DCOH flushes the embedding gradients into CXL-MEM."""
        return self.cxl_gpu.dcoh.flush_ticks(self.cxl_path("gpu", "mem"), nbytes, record=True)

    def pull_mlp_ticks(self, nbytes: int) -> int:
        """The checkpointing logic reads MLP parameters out of GPU memory over CXL.cache."""
        return self.cxl_mem.dcoh.read_ticks(self.cxl_path("mem", "gpu"), nbytes, record=True)

    # ----- the logs --------------------------------------------------------------------
    def copy_rows_ticks(self, demand, now: int) -> int:
        """DMA this batch's rows from the data region into the embedding log (+ flag)."""
        layout = self.layout
        copy = self.nmp.copy_rows(
            self.pmem, self.unique_addresses(demand), layout.emb_log_base, layout.row_bytes, now
        )
        return copy.ticks + self.flag_ticks(now + copy.ticks)

    def write_mlp_log_ticks(self, nbytes: int, now: int) -> int:
        return self.nmp.write_log(self.pmem, nbytes, self.layout.mlp_log_base, now).ticks

    def flag_ticks(self, now: int) -> int:
        """Setting a persistent flag: one small write that must reach the domain."""
        flag = self.pmem.write(log_addresses(self.layout.flags_base, 1, 8), 8, now)
        return flag.ticks

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Redo: log the updated rows and the MLPs pulled over CXL.cache, set the flag,
        then update in place (log before apply). The pull starts as soon as the GPU
        finishes backward, overlapping the gradient transfer."""
        s, n, demand = self.scheduler, ops.batch, ops.demand
        nbytes = demand.mlp_param_bytes
        pull = s.op(
            "ckpt_mlp_pull",
            "checkpoint",
            n,
            self.to_mem_resource,
            lambda now: self.pull_mlp_ticks(nbytes),
            deps=[ops.bottom_bwd],
        )

        def log(now: int) -> int:
            self.nmp.start_mlp_log(nbytes)
            rows = self.copy_rows_ticks(demand, now)
            mlp = self.write_mlp_log_ticks(nbytes, now + rows)
            return rows + mlp + self.flag_ticks(now + rows + mlp)

        return [
            s.op("ckpt_log", "checkpoint", n, self.checkpoint_resource, log, deps=[ops.grads, pull])
        ]


class CxlBBoard(CxlDBoard):
    """CXL-B: batch-aware undo logging in the background.

    The rows batch N will update are known from its indices, so the checkpointing logic
    copies them into the embedding log while the GPU computes; the update waits only
    for that log's persistent flag. The MLP log of batch N (the parameters before its
    update) is pulled over CXL.cache in the background, and the GPU may not overwrite
    the parameters until it is durable. Nothing runs at the end of the batch.
    """

    system = "cxl-b"

    def next_batch_gate(self, prev: BatchOps | None) -> list[Op]:
        return []

    def mlp_update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Start both undo logs once the lookup has read the batch's indices.

        The embedding log goes first: the update waits for it, while the GPU only
        needs the MLP log before it applies its own update at the end of backward."""
        ops.extra["emb_log"] = self.embedding_log(ops, prev)
        return self.mlp_log(ops, prev)

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        return [ops.extra["emb_log"]]

    def embedding_log(self, ops: BatchOps, prev: BatchOps | None) -> Op:
        """Slot N % 2 is reused only once batch N-1's checkpoint (both logs) is complete."""
        deps = [ops.lookup] + ([prev.update] if prev else [])
        if prev is not None and "mlp_log" in prev.extra:
            deps.append(prev.extra["mlp_log"])
        return self.scheduler.op(
            "emb_log",
            "checkpoint",
            ops.batch,
            self.checkpoint_resource,
            lambda now: self.copy_rows_ticks(ops.demand, now),
            deps=deps,
            background=True,
        )

    def mlp_log(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        """Pull the parameters batch N starts from and log them before the GPU updates."""
        nbytes = ops.demand.mlp_param_bytes

        def mlp_log(now: int) -> int:
            self.nmp.start_mlp_log(nbytes)
            pull = self.pull_mlp_ticks(nbytes)
            write = self.write_mlp_log_ticks(nbytes, now)
            return max(pull, write) + self.flag_ticks(now + max(pull, write))

        deps = [ops.lookup] + ([prev.bottom_bwd] if prev else [])
        log = self.scheduler.op(
            "mlp_log",
            "checkpoint",
            ops.batch,
            self.checkpoint_resource,
            mlp_log,
            deps=deps,
            background=True,
        )
        ops.extra["mlp_log"] = log
        return [log]


class CxlBoard(CxlBBoard):
    """CXL: CXL-B + relaxed embedding lookup + relaxed MLP logging.

    Lookup N runs on the table as batch N-1 left it before its update (sum and add
    commute), then is corrected with batch N-1's row deltas once they land, so it no
    longer waits for the update. The MLP log is pulled only while the GPU runs
    interaction + top MLP, a slice per batch, and a new copy starts every
    ``mlp_log_gap`` batches once the previous one is complete: training never stalls
    on it, and recovered MLPs may be up to the measured log age behind the embeddings.
    """

    system = "cxl"
    mlp_log_gap = Int(
        1,
        "batches between the starts of two MLP log copies",
        "TrainingCXL relaxed batch-aware checkpoint (Figure 9a sweeps 0..10^4)",
        low=1,
    )

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.mlpLogCopies = self.scalar("mlpLogCopies", "complete MLP log copies", "Count")
        self.mlpLogBatches = self.average(
            "mlpLogBatches", "batches one MLP log copy spans", "Count"
        )
        object.__setattr__(self, "_mlp_log", {"remaining": 0, "started": None})

    def lookup_deps(self, prev: BatchOps | None) -> list[Op]:
        if prev is None:
            return []
        before = self._history[-2] if len(self._history) >= 2 else None
        return [before.update] if before is not None else []

    def pooled_ready(self, demand, lookup: Op, prev: BatchOps | None) -> Op:
        """Correct the early lookup with the previous batch's row deltas once they land.

        The engine keeps each updated row's delta (in the order of the previous batch's
        unique rows) and adds it into every bag that looked the row up."""
        if prev is None:
            return lookup
        previous_rows = prev.demand.lookup.unique_rows
        slot = np.searchsorted(previous_rows, demand.lookup.rows)
        slot = np.minimum(slot, len(previous_rows) - 1)
        shared = previous_rows[slot] == demand.lookup.rows
        deltas = log_addresses(self.layout.delta_base, len(previous_rows), self.layout.row_bytes)[
            slot[shared]
        ]

        def correct(now: int) -> int:
            if deltas.size == 0:
                return 0
            return self.nmp.lookup(self.pmem, deltas, self.layout.row_bytes, now).ticks

        return self.scheduler.op(
            "lookup_correct",
            "embedding",
            demand.batch,
            self.embedding_resource,
            correct,
            deps=[lookup, prev.update],
        )

    def mlp_log(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        state = self._mlp_log
        n, nbytes = ops.batch, ops.demand.mlp_param_bytes
        if state["remaining"] == 0 and n % self.mlp_log_gap == 0:
            state["remaining"], state["started"] = nbytes, n
            self.nmp.start_mlp_log(nbytes)
        if state["remaining"] == 0:
            return []
        budget = self.gpu.op_ticks(
            ops.demand.kernels["interaction_top_fwd"] + ops.demand.kernels["top_bwd_interaction"]
        )

        def slice_ticks(now: int) -> int:
            rate = min(self.cxl_path("mem", "gpu").bandwidth, self.pmem.write_bandwidth)
            moved = min(state["remaining"], int(rate * budget / 1e12))
            moved = max(moved, min(state["remaining"], 4096))
            pull = self.pull_mlp_ticks(moved)
            write = self.write_mlp_log_ticks(moved, now)
            state["remaining"] -= moved
            ticks = max(pull, write)
            if state["remaining"] == 0:
                self.mlpLogCopies += 1
                self.mlpLogBatches.sample(n - state["started"] + 1)
                ticks += self.flag_ticks(now + ticks)
            return ticks

        self.scheduler.op(
            "mlp_log_slice",
            "checkpoint",
            n,
            self.checkpoint_resource,
            slice_ticks,
            deps=ops.top_deps,
            background=True,
        )
        return []
