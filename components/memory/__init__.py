"""Memory devices (PMEM, DRAM, SSD) with vectorized analytical timing."""

from components.memory.base import Access, MemoryController, MemoryDevice, OpResult
from components.memory.dram import Dram
from components.memory.pmem import Pmem
from components.memory.ssd import Ssd, SsdWithCache

__all__ = [
    "Access",
    "Dram",
    "MemoryController",
    "MemoryDevice",
    "OpResult",
    "Pmem",
    "Ssd",
    "SsdWithCache",
]
