"""The tables' memory as a gem5 standard-library memory component (imported only under gem5).

``TableMemory`` is a ``gem5.components.memory.memory.ChanneledMemory``: one MemCtrl per
module (an ``NVMInterface`` for a Pmem, a ``DDR4_2400_8x8`` channel for a Dram) on
interleaved ranges, with our parameters (translate.py). In front of the controllers
sit what the device adds to them: the XPBuffer (a direct-mapped cache per controller,
reads only) and the write path whose crossbars delay a write's acknowledgement to our
write latency. Any stdlib board can use it as its memory:

    from components.gem5.memory import TableMemory
    from components.memory.pmem import Pmem

    memory = TableMemory(Pmem.optane(), size="1GiB")  # a CXL-MEM's PMEM, 4 modules
    board = TestBoard(clk_freq="1GHz", generator=..., memory=memory, cache_hierarchy=None)

``get_mem_ports`` gives one port, the XPBuffers' (what the near-memory engine reads
through; writes sent there go through them as through any write-allocate cache);
``write_port`` gives the write path our device has: acknowledged at the WPQ after our
write latency. ``TableMemories``
groups several, one per CXL-MEM of a disaggregated board, each on its own range.
"""

from __future__ import annotations

from collections.abc import Sequence

from gem5.components.boards.abstract_board import AbstractBoard
from gem5.components.memory.abstract_memory_system import AbstractMemorySystem
from gem5.components.memory.memory import ChanneledMemory
from gem5.utils.override import overrides
from m5.objects import (
    AddrRange,
    Cache,
    DDR4_2400_8x8,
    MemCtrl,
    NoncoherentXBar,
    NVM_2400_1x64,
    Port,
    SrcClockDomain,
    SystemXBar,
    VoltageDomain,
)
from m5.util.convert import toMemorySize

from components.gem5 import translate as tr

XBAR_CLOCK = f"{tr.XBAR_CLOCK_HZ / 1e9:g}GHz"
STANDALONE_SIZE = "1GiB"  # the address range of a device not sized by a board's tables


def clock(frequency: str) -> SrcClockDomain:
    return SrcClockDomain(clock=frequency, voltage_domain=VoltageDomain())


def xbar(frequency: str = XBAR_CLOCK, **params) -> NoncoherentXBar:
    """A crossbar of one cycle per crossing unless told otherwise (translate.XBAR_*)."""
    bus = NoncoherentXBar(width=64, frontend_latency=1, forward_latency=1, response_latency=1)
    for name, value in params.items():
        setattr(bus, name, value)
    bus.clk_domain = clock(frequency)
    return bus


class TableMemory(ChanneledMemory):
    """One table device (a CXL-MEM's PMEM, or the host's PMEM or DRAM): its controllers,
    interleaved as the device interleaves, its XPBuffers and its write path."""

    def __init__(self, device=None, size: str | None = None) -> None:
        if device is None:
            from components.memory.pmem import Pmem

            device = Pmem()
        self._device = device
        nvm = type(device).__name__ == "Pmem"
        self._intf_params = tr.nvm_interface(device) if nvm else tr.dram_interface(device)
        self._make = NVM_2400_1x64 if nvm else DDR4_2400_8x8  # presets supply the rest
        need = device.capacity or toMemorySize(size or STANDALONE_SIZE)
        span = tr.memory_span(need, device.controllers, device.interleave)
        super().__init__(
            self._make, device.controllers, device.interleave, size=f"{span}B",
            addr_mapping="RoRaBaCoCh",
        )  # fmt: skip
        self._build_front()

    def _create_mem_interfaces_controller(self) -> None:
        per_ctrl = f"{self._size // self._num_channels}B"
        self._dram = [
            self._make(**self._intf_params["interface"], device_size=per_ctrl)
            for _ in range(self._num_channels)
        ]
        controller = self._intf_params["controller"]
        self.mem_ctrl = [MemCtrl(dram=intf, **controller) for intf in self._dram]

    def _build_front(self) -> None:
        """The controllers' crossbar and the XPBuffers before it."""
        self.media_xbar = xbar()
        for ctrl in self.mem_ctrl:
            ctrl.port = self.media_xbar.mem_side_ports
        self.ctrl_xbar = xbar()  # where reads enter
        buffer = tr.xpbuffer(self._device)
        if buffer is None:
            self.ctrl_xbar.mem_side_ports = self.media_xbar.cpu_side_ports
        else:  # a read buffer per controller; the coherent crossbar below sinks evictions
            self.buffer_xbar = SystemXBar(width=64, max_routing_table_size=1 << 20)
            self.buffer_xbar.clk_domain = clock(XBAR_CLOCK)
            self.buffer_xbar.mem_side_ports = self.media_xbar.cpu_side_ports
            self.xpbuffers = [Cache(**buffer) for _ in self.mem_ctrl]
            for cache in self.xpbuffers:
                cache.clk_domain = clock(XBAR_CLOCK)
                self.ctrl_xbar.mem_side_ports = cache.cpu_side
                cache.mem_side = self.buffer_xbar.cpu_side_ports

    @overrides(ChanneledMemory)
    def _interleave_addresses(self) -> None:
        """Our devices' mapping, ``(addr // interleave) % controllers`` (translate.py)."""
        start, size = self._mem_range.start, self._mem_range.size()
        specs = tr.interleaved_ranges(start, size, self._num_channels, self._intlv_size)
        for ctrl, spec in zip(self.mem_ctrl, specs, strict=True):
            ctrl.dram.range = AddrRange(**spec)
        for cache, ctrl in zip(getattr(self, "xpbuffers", ()), self.mem_ctrl, strict=False):
            cache.addr_ranges = [ctrl.dram.range]

    @overrides(ChanneledMemory)
    def incorporate_memory(self, board: AbstractBoard) -> None:
        """Nothing to check: a packet never crosses a line, so none straddles controllers."""

    @overrides(ChanneledMemory)
    def get_mem_ports(self) -> Sequence[tuple[AddrRange, Port]]:
        """One port for the whole range: reads through the XPBuffers to the controllers."""
        return [(self._mem_range, self.ctrl_xbar.cpu_side_ports)]

    def write_port(self) -> Port:
        """Writes acknowledged our write latency after they were issued, into the WPQs:
        crossbars whose response latencies delay the acknowledgement, made on the first
        call (a crossbar nobody connects would have no ports, which gem5 refuses)."""
        if not hasattr(self, "write_xbars"):
            cycles = tr.write_ack_cycles(self._device, self._intf_params["controller"])
            self.write_xbars = [xbar(response_latency=c) for c in cycles]
            for upstream, downstream in zip(self.write_xbars, self.write_xbars[1:], strict=False):
                upstream.mem_side_ports = downstream.cpu_side_ports
            self.write_xbars[-1].mem_side_ports = self.media_xbar.cpu_side_ports
        return self.write_xbars[0].cpu_side_ports


class TableMemories(AbstractMemorySystem):
    """Several table memories on consecutive ranges of ``span`` bytes each (one per
    CXL-MEM of a disaggregated board); each keeps its own ports."""

    def __init__(self, memories: list[TableMemory], span: int) -> None:
        super().__init__()
        self.memories = memories
        self._span = span

    @overrides(AbstractMemorySystem)
    def incorporate_memory(self, board: AbstractBoard) -> None:
        for memory in self.memories:
            memory.incorporate_memory(board)

    @overrides(AbstractMemorySystem)
    def get_mem_ports(self) -> Sequence[tuple[AddrRange, Port]]:
        return [port for memory in self.memories for port in memory.get_mem_ports()]

    @overrides(AbstractMemorySystem)
    def get_memory_controllers(self) -> list[MemCtrl]:
        return [ctrl for memory in self.memories for ctrl in memory.get_memory_controllers()]

    @overrides(AbstractMemorySystem)
    def get_size(self) -> int:
        return self._span * len(self.memories)

    @overrides(AbstractMemorySystem)
    def set_memory_range(self, ranges: list[AddrRange]) -> None:
        start = ranges[0].start
        for m, memory in enumerate(self.memories):
            memory.set_memory_range([AddrRange(start + m * self._span, size=memory.get_size())])

    @overrides(AbstractMemorySystem)
    def get_uninterleaved_range(self) -> list[AddrRange]:
        return [r for memory in self.memories for r in memory.get_uninterleaved_range()]
