"""Boards whose embedding tables live on the host: SSD, PMEM and DRAM systems.

The host CPU runs the embedding ops over its own storage and moves pooled vectors and
gradients to and from the GPU with cudaMemcpy + cudaStreamSynchronize over PCIe. The
SSD and PMEM systems persist a redo checkpoint (updated rows + MLPs) at the end of
every batch, on the critical path; the DRAM system is the ideal that checkpoints
nothing.
"""

from __future__ import annotations

from components.boards.base import BatchOps, TrainingBoard, log_addresses
from components.interconnect.pcie import CudaRuntime, PcieLink
from components.memory.dram import Dram
from components.memory.pmem import Pmem
from components.memory.ssd import SsdWithCache
from components.sim.schedule import Op


class HostBoard(TrainingBoard):
    """Embedding ops on the host CPU; subclasses choose the table storage."""

    embedding_resource = "host.cpu"
    to_gpu_resource = "pcie"
    to_mem_resource = "pcie"

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.pcie = PcieLink()
        self.cuda = CudaRuntime()
        self.storage = self.make_storage()

    def make_storage(self):
        raise NotImplementedError

    def table_memory(self):
        return self.storage

    def resources(self) -> tuple[str, ...]:
        return ("gpu", "host.cpu", "pcie")

    def lookup_ticks(self, demand, now: int) -> int:
        rows = self.lookup_addresses(demand)
        return self.host.gather_reduce(self.storage, rows, self.layout.row_bytes, now).ticks

    def update_ticks(self, demand, now: int) -> int:
        rows = self.unique_addresses(demand)
        return self.host.update(self.storage, rows, self.layout.row_bytes, now).ticks

    def to_gpu_ticks(self, nbytes: int) -> int:
        return self._copy(nbytes, "down")

    def to_mem_ticks(self, nbytes: int) -> int:
        return self._copy(nbytes, "up")

    def _copy(self, nbytes: int, direction: str) -> int:
        """One cudaMemcpy and the cudaStreamSynchronize the framework waits on."""
        copy = self.cuda.memcpy_ticks(self.pcie, nbytes, direction, record=True)
        return copy + self.cuda.sync_ticks(record=True)


class RedoHostBoard(HostBoard):
    """End-of-batch redo checkpoint: MLPs copied off the GPU, rows and MLPs persisted.

    Software checkpoints once the step's compute has finished (backward done, gradients
    on the host), so nothing of it overlaps the step, unlike CXL-D's hardware pull. The
    new rows are logged before they are written in place (log before apply), so a
    failure during the update is repaired by replaying the log."""

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        s, n, demand = self.scheduler, ops.batch, ops.demand
        pull = s.op(
            "ckpt_mlp_pull",
            "checkpoint",
            n,
            "pcie",
            lambda now: self._copy(demand.mlp_param_bytes, "up"),
            deps=[ops.bottom_bwd, ops.grads],
        )
        persist = s.op(
            "ckpt_persist",
            "checkpoint",
            n,
            "host.cpu",
            lambda now: self.persist_ticks(demand, now),
            deps=[pull],
        )
        return [persist]

    def persist_ticks(self, demand, now: int) -> int:
        """Write the updated rows (one persist per vector) and the MLP parameters (one
        persisted range) into the log region."""
        layout, row_bytes = self.layout, self.layout.row_bytes
        rows = log_addresses(layout.emb_log_base, len(demand.lookup.unique_rows), row_bytes)
        first = self.host.persist_rows(self.storage, rows, row_bytes, now).ticks
        mlp = self.host.persist_region(
            self.storage, layout.mlp_log_base, demand.mlp_param_bytes, now + first
        )
        return first + mlp.ticks


class PmemBoard(RedoHostBoard):
    """Intel Optane PMEM on the host memory bus (the paper's PMEM system)."""

    system = "pmem"

    def make_storage(self):
        return Pmem()


class SsdBoard(RedoHostBoard):
    """An NVMe SSD with a host-DRAM vector cache (the paper's SSD system)."""

    system = "ssd"

    def make_storage(self):
        return SsdWithCache()

    def size_memories(self, layout) -> None:
        self.storage.ssd.capacity = f"{layout.end}B"


class DramBoard(HostBoard):
    """Every table in host DRAM, no checkpoint: the ideal (energy comparison only)."""

    system = "dram"

    def make_storage(self):
        return Dram()
