"""Memory devices (PMEM, DRAM, SSD): what request streams need of their controllers."""

from components.memory.base import MemoryController, MemoryDevice
from components.memory.dram import Dram
from components.memory.pmem import Pmem
from components.memory.ssd import Ssd, SsdWithCache
from components.memory.stages import MemStream, stage

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
