"""Boards whose embedding tables live on the host: SSD, PMEM and DRAM systems.

The host CPU runs the embedding ops over its own storage and moves pooled vectors and
gradients to and from the GPU with cudaMemcpy + cudaStreamSynchronize over PCIe. The
SSD and PMEM systems persist a redo checkpoint (updated rows + MLPs, then a flag) at
the end of every batch, on the critical path; the DRAM system is the ideal that
checkpoints nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from components.boards.base import BatchOps, TrainingBoard
from components.boards.software_ft import SoftwareCheckpointHooks
from components.compute.host import HostCpu
from components.interconnect.pcie import CudaRuntime, PcieLink
from components.memory.dram import Dram
from components.memory.pmem import Pmem
from components.memory.ssd import SsdWithCache
from components.sim.schedule import Op, Stage


class HostBoard(SoftwareCheckpointHooks, TrainingBoard):
    """Embedding ops on the host CPU; subclasses choose the table storage."""

    embedding_resource = HostCpu.UNIT
    to_gpu_resource = "pcie"
    to_mem_resource = "pcie"

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        self.pcie = PcieLink()
        self.cuda = CudaRuntime()
        self.storage = self.make_storage()
        self.ft = None  # a SoftwareCheckpoint in place of the system's own protocol

    def make_storage(self):
        raise NotImplementedError

    def checkpoint_source(self):
        """The memory a software checkpoint reads the tables from."""
        return self.storage

    def mlp_to_host(self, nbytes: int) -> Iterator[Stage]:
        """The MLP parameters copied off the GPU for a checkpoint."""
        return self._copy(nbytes, "up")

    def mlp_to_gpu(self, nbytes: int) -> Iterator[Stage]:
        """Recovered MLP parameters copied to the GPU."""
        return self._copy(nbytes, "down")

    def table_memory(self):
        return self.storage

    def resources(self) -> tuple[str, ...]:
        return ("gpu", HostCpu.UNIT, "pcie")

    def lookup(self, demand) -> Stage:
        rows = self.lookup_addresses(demand)
        distinct = (self.unique_addresses(demand), demand.lookup.counts)
        return self.host.gather_reduce(self.storage, rows, self.layout.row_bytes, distinct)

    persistent_tables = False  # whether in-place updates must be persisted (clwb + sfence)

    def update(self, demand) -> Iterator[Stage]:
        rows = self.unique_addresses(demand)
        return self.host.update(
            self.storage, rows, self.layout.row_bytes, persist=self.persistent_tables
        )

    def to_gpu(self, nbytes: int) -> Iterator[Stage]:
        return self._copy(nbytes, "down")

    def to_mem(self, nbytes: int) -> Iterator[Stage]:
        return self._copy(nbytes, "up")

    def _copy(self, nbytes: int, direction: str) -> Iterator[Stage]:
        """One cudaMemcpy and the cudaStreamSynchronize the framework waits on."""
        yield self.cuda.memcpy(self.pcie, nbytes, direction)
        yield self.cuda.sync()


class RedoHostBoard(HostBoard):
    """End-of-batch redo checkpoint: MLPs copied off the GPU, rows and MLPs persisted.

    Software checkpoints once the step's compute has finished (backward done, gradients
    on the host), so nothing of it overlaps the step, unlike CXL-D's hardware pull. The
    new rows are logged before they are written in place (log before apply), so a
    failure during the update is repaired by replaying the log. The in-place update is
    persisted too: the slot it was logged in is reused two batches later."""

    @property
    def persistent_tables(self) -> bool:
        """Under a software checkpoint the tables are volatile between checkpoints."""
        return self.ft is None

    def update_deps(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        if self.ft is not None:
            return []
        s, n, demand = self.scheduler, ops.batch, ops.demand
        pull = s.op(
            "ckpt_mlp_pull",
            "checkpoint",
            n,
            "pcie",
            lambda now: self.mlp_to_host(demand.mlp_param_bytes),
            deps=[ops.bottom_bwd, ops.grads],
        )
        persist = s.op(
            "ckpt_persist",
            "checkpoint",
            n,
            HostCpu.UNIT,
            lambda now: self.persist(demand, n % 2),
            deps=[pull],
        )
        return [persist]

    def persist(self, demand, slot: int) -> Iterator[Stage]:
        """Persist the updated rows (one persist per vector) and their record header into
        embedding-log slot ``slot``, the MLP parameters (one persisted range) into MLP-log
        slot ``slot``, then the slot's flag: the protocol's three fenced phases."""
        layout, store = self.layout, self.storage
        count = len(demand.lookup.unique_rows)
        entries = layout.entry_offsets(slot, count)
        yield self.host.persist_rows(
            store, entries, layout.entry_bytes, header=layout.offset(f"emb{slot}")
        )
        yield self.host.persist_region(
            store,
            layout.mlp_offset(slot),
            demand.mlp_param_bytes,
            header=layout.offset(f"mlp{slot}"),
        )
        flag = np.array([layout.flag_offset(f"emb{slot}")], dtype=np.int64)
        yield self.host.persist_rows(store, flag, 8)


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
        self.storage.ssd.capacity = f"{layout.size}B"
        start, size = layout.regions()["data"]
        self.storage.hold(start, start + size)
        if self.ft is not None:
            self.ft.size(layout)

    def checkpoint_source(self):
        return self.storage.ssd  # written through: the SSD holds every row

    warms_functionally = True  # the vector cache holds thousands of batches' rows

    def carried_state(self) -> dict:
        """The cache's residency itself, not a copy (millions of rows): the board it
        came from is done with it."""
        return {"cache": self.storage.residency}

    def restore_carried(self, state: dict, first: int, skipped: int, rates: dict) -> None:
        object.__setattr__(self.storage, "residency", state["cache"])  # warmed already

    def warm(self, demand) -> None:
        """The rows the lookup reads, then the update reads and writes, in op order."""
        row_bytes, unique = self.layout.row_bytes, self.unique_addresses(demand)
        for rows in (self.lookup_addresses(demand), unique, unique):
            self.storage.warm(rows, row_bytes)


class DramBoard(HostBoard):
    """Every table in host DRAM, no checkpoint: the ideal (energy comparison only)."""

    system = "dram"

    def make_storage(self):
        return Dram()
