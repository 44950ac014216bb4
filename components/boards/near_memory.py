"""Boards whose embedding ops run on a near-memory engine beside the tables' PMEM.

The PCIe card and CXL-MEM share the engine and its placement; they differ in how data
reaches the GPU and how they checkpoint, which their own boards define.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from components.boards.base import TrainingBoard
from components.memory.stages import stage
from components.persistence.image import RECORD_HEADER, log_slot
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

    update_writes_rows = True  # whether the update writes the rows it reads, in place

    def foresight(self, demand) -> list[Callable[[], None]]:
        """The gather's reads, the log copy's reads and writes, and the update's writes
        of the distinct rows, in the order the engine issues them."""
        pmem, layout = self.pmem, self.layout
        pieces = [
            lambda: pmem.foresee_read(self.lookup_addresses(demand), layout.row_bytes),
            lambda: pmem.foresee_read(self.unique_addresses(demand), layout.row_bytes),
        ]
        if self.logs_rows:
            slot = log_slot(demand.batch)
            entries = lambda: self.entry_addresses(demand, slot)  # noqa: E731
            pieces.append(lambda: pmem.foresee_write(entries(), layout.entry_bytes))
        if self.update_writes_rows:
            unique = self.unique_addresses
            pieces.append(lambda: pmem.foresee_write(unique(demand), layout.row_bytes))
        return pieces

    # ----- the logs, in the persistence image's layout ------------------------------------
    logs_rows = True  # whether each batch copies its rows into the embedding log

    def entry_addresses(self, demand, slot: int) -> np.ndarray:
        """The addresses of the batch's entries in embedding-log slot ``slot``, made once
        per batch and read-only (so a digest made ahead of the copy is found)."""
        count = len(demand.lookup.unique_rows)
        make = lambda: self.layout.entry_offsets(slot, count)  # noqa: E731
        return self.addresses.of(demand.lookup.unique_rows, ("entries", slot), make)

    def copy_rows(self, demand, slot: int) -> Stage:
        """DMA this batch's rows into embedding-log slot ``slot``: the entries, then the
        record header (one stream: the protocol orders only the flag after them)."""
        layout = self.layout
        return self.nmp.copy_rows(
            self.pmem,
            self.unique_addresses(demand),
            layout.row_bytes,
            self.entry_addresses(demand, slot),
            layout.entry_bytes,
            layout.offset(f"emb{slot}"),
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
