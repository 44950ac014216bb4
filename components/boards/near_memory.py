"""Boards whose embedding ops run on a near-memory engine beside the tables' PMEM.

The PCIe card and CXL-MEM share the engine and its placement; they differ in how data
reaches the GPU and how they checkpoint, which their own boards define.
"""

from __future__ import annotations

from components.boards.base import TrainingBoard


class NearMemoryBoard(TrainingBoard):
    """Lookup and update by ``self.nmp`` over ``self.pmem`` (set by the subclass)."""

    def table_memory(self):
        return self.pmem

    def lookup_ticks(self, demand, now: int) -> int:
        rows = self.lookup_addresses(demand)
        return self.nmp.lookup(self.pmem, rows, self.layout.row_bytes, now).ticks

    def update_ticks(self, demand, now: int) -> int:
        rows = self.unique_addresses(demand)
        return self.nmp.update(self.pmem, rows, self.layout.row_bytes, now).ticks
