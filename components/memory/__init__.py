"""Memory devices (PMEM, DRAM, SSD): what request streams need of their controllers."""

from components.memory.base import MemoryController, MemoryDevice, MemStream, stage
from components.memory.dram import Dram
from components.memory.pmem import Pmem
from components.memory.ssd import Ssd, SsdWithCache

__all__ = [
    "Dram",
    "MemStream",
    "MemoryController",
    "MemoryDevice",
    "Pmem",
    "Ssd",
    "SsdWithCache",
    "stage",
]
