"""Boards whose embedding ops run on a near-memory engine beside the tables' PMEM.

The PCIe card and CXL-MEM share the engine and its placement; they differ in how data
reaches the GPU and how they checkpoint, which their own boards define.
"""

from __future__ import annotations

import numpy as np

from components.boards.base import TrainingBoard
from components.memory.base import stage
from components.persistence.image import RECORD_HEADER
from components.sim.schedule import Stage


class NearMemoryBoard(TrainingBoard):
    """Lookup and update by ``self.nmp`` over ``self.pmem`` (set by the subclass)."""

    def table_memory(self):
        return self.pmem

    def lookup(self, demand) -> Stage:
        """The gather, told the batch's distinct rows (sorted) and their lookups: a
        lookup that meets the previous update's draining writes checks each row once."""
        distinct = (self.unique_addresses(demand), demand.lookup.counts)
        return self.nmp.lookup(
            self.pmem, self.lookup_addresses(demand), self.layout.row_bytes, distinct
        )

    def update(self, demand) -> Stage:
        return self.nmp.update(self.pmem, self.unique_addresses(demand), self.layout.row_bytes)

    # ----- the logs, in the persistence image's layout ------------------------------------
    def copy_rows(self, demand, slot: int) -> Stage:
        """DMA this batch's rows into embedding-log slot ``slot``: the entries, then the
        record header (one stream: the protocol orders only the flag after them)."""
        layout = self.layout
        count = len(demand.lookup.unique_rows)
        entries = layout.entry_offsets(slot, count)
        header = layout.offset(f"emb{slot}")
        return self.nmp.copy_rows(
            self.pmem,
            self.unique_addresses(demand),
            layout.row_bytes,
            entries,
            layout.entry_bytes,
            header,
        )

    def mlp_log_writes(
        self, slot: int, start: int, nbytes: int, header: bool, along: Stage | None = None
    ) -> Stage:
        """Write bytes [start, start + nbytes) of the MLP record of slot ``slot`` in DMA
        bursts (and its header once the record is complete), fed by ``along`` (the
        transfer bringing the bytes in)."""
        base = self.layout.mlp_offset(slot)
        return self.nmp.write_log(
            self.pmem, base + start, nbytes, base - RECORD_HEADER if header else None, along
        )

    def set_flag(self, name: str) -> Stage:
        """A persistent flag: one 8 B write that must reach the domain (a fence after
        the records it vouches for)."""
        offset = np.array([self.layout.flag_offset(name)], dtype=np.int64)
        return stage(self.pmem.write(offset, 8))
