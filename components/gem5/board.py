"""A board's memory system as gem5 standard-library components (imported only under gem5).

- ``ReplayBoard``: an ``AbstractSystemBoard`` (like stdlib's ``TestBoard``: no ISA, no
  workload) whose processor, memory and "cache hierarchy" are the three below.
- memory: the tables' ``TableMemory`` (memory.py), or ``TableMemories`` with one per
  CXL-MEM of a disaggregated board, each on its own address range.
- ``ReplayGenerator``: an ``AbstractGenerator`` whose cores each wrap a PyTrafficGen,
  in pools per (side, window, table write) sized for the most streams a pool runs at
  once (pools.py); the replay (runner.py) feeds them the recorded streams.
- ``CxlFabric``: an ``AbstractCacheHierarchy`` holding what lies between requesters and
  memories: a crossbar per side (tables' engine, GPU, host), a ``CxlSwitch`` per CXL
  switch, a ``SerialLink`` per (link, direction, message class) that some route crosses
  (shared by every route crossing it that way with that class, as flows share the
  link in the built-in engine) and a SimpleMemory per transfer target, named
  ``{side}_{class}_target`` (GPU memory at its bandwidth, device buffers untimed).
"""

from __future__ import annotations

from gem5.components.boards.abstract_board import AbstractBoard
from gem5.components.boards.abstract_system_board import AbstractSystemBoard
from gem5.components.cachehierarchies.abstract_cache_hierarchy import AbstractCacheHierarchy
from gem5.components.processors.abstract_core import AbstractCore
from gem5.components.processors.abstract_generator import AbstractGenerator
from gem5.components.processors.abstract_generator_core import AbstractGeneratorCore
from gem5.utils.override import overrides
from m5.objects import AddrRange, IOXBar, Port, PyTrafficGen, SerialLink, SimpleMemory, SubSystem

from components.gem5 import translate as tr
from components.gem5.memory import TableMemories, TableMemory, clock, xbar
from components.gem5.ops import (
    REGION_SPAN,
    OpPlan,
    gpu_of,
    hops,
    multi_device,
    region,
    switches,
    table_devices,
)
from components.gem5.pools import pool_sizes, routes, sides, targets

PROGRESS_CHECK = "1000s"  # generators sit idle between ops: never a "no progress" fatal
LINK_BUFFERS = 4096  # SerialLink request/response buffers: more than any window
BUFFER_BANDWIDTH = "1000GB/s"  # transfer targets our model does not time (device buffers)
BOARD_CLOCK = "1GHz"
START_TICK = 1000  # 1 ns: a generator refused at tick 0 trips BaseTrafficGen's retry assert


class ReplayCore(AbstractGeneratorCore):
    """One requester of a pool: a PyTrafficGen the replay starts stream by stream."""

    def __init__(self, side: str, window: int, table_write: bool) -> None:
        super().__init__()
        self._key = (side, window, table_write)
        self.generator = PyTrafficGen(progress_check=PROGRESS_CHECK, max_outstanding_reqs=window)

    def pool(self) -> tuple[str, int, bool]:
        """(side, window, writes to the tables): the pool this requester belongs to."""
        return self._key

    @overrides(AbstractCore)
    def connect_dcache(self, port: Port) -> None:
        self.generator.port = port

    @overrides(AbstractGeneratorCore)
    def start_traffic(self) -> None:
        """Nothing at instantiation: each stream starts when the replay schedules it."""


class ReplayGenerator(AbstractGenerator):
    """The requesters of a replay, pooled by (side, window, table write)."""

    def __init__(self, plans: list[OpPlan]) -> None:
        cores = [
            ReplayCore(*key)
            for key, count in sorted(pool_sizes(plans).items())
            for _ in range(count)
        ]
        super().__init__(cores=cores)

    def pools(self) -> dict[tuple[str, int, bool], list]:
        """The PyTrafficGens of each pool."""
        out: dict[tuple[str, int, bool], list] = {}
        for core in self.get_cores():
            out.setdefault(core.pool(), []).append(core.generator)
        return out

    @overrides(AbstractGenerator)
    def start_traffic(self) -> None:
        """Nothing at instantiation: the replay starts each stream itself."""


class CxlSwitch(SubSystem):
    """A CXL switch: a crossbar whose request and response latencies are its port latency."""

    def __init__(self, switch) -> None:
        super().__init__()
        params = tr.xbar(switch)
        self.xbar = xbar(params.pop("clock"), **params)


class CxlFabric(AbstractCacheHierarchy):
    """Requesters' crossbars, links, switches and transfer targets of one board."""

    def __init__(self, board, plans: list[OpPlan]) -> None:
        super().__init__()
        self._board, self._routes = board, routes(plans)
        self._sides, self._targets = sides(board, plans), targets(plans)

    @overrides(AbstractCacheHierarchy)
    def is_ruby(self) -> bool:
        return False

    @overrides(AbstractCacheHierarchy)
    def incorporate_cache(self, board: AbstractBoard) -> None:
        self.side_xbars = [xbar() for _ in self._sides]
        by_side = dict(zip(self._sides, self.side_xbars, strict=True))
        memories = board.table_memories()
        writes = {}
        for (side, _, _), memory in zip(table_devices(self._board), memories, strict=True):
            by_side[side].mem_side_ports = memory.get_mem_ports()[0][1]
            writes[side] = memory.write_port()
        self._wire_routes(by_side)
        for core in board.get_processor().get_cores():
            side, _, table_write = core.pool()
            port = writes[side] if table_write else by_side[side].cpu_side_ports
            core.connect_dcache(port)
        first = table_devices(self._board)[0][0]
        board.connect_system_port(by_side[first].cpu_side_ports)

    def transfer_ranges(self) -> list[AddrRange]:
        return [AddrRange(region(side, kind), size=REGION_SPAN) for side, kind in self._targets]

    def _wire_routes(self, by_side: dict) -> None:
        board = self._board
        for side, kind in self._targets:
            bandwidth = (
                f"{gpu_of(board, side).memory_bandwidth / 1e9:g}GB/s"
                if side.startswith("gpu")
                else BUFFER_BANDWIDTH
            )
            memory = SimpleMemory(
                range=AddrRange(region(side, kind), size=REGION_SPAN),
                latency="0ns", latency_var="0ns", bandwidth=bandwidth, null=True,
            )  # fmt: skip
            memory.port = by_side[side].mem_side_ports
            setattr(self, target_name(side, kind), memory)
        made: dict[int, CxlSwitch] = {}
        links: dict[tuple[int, str, str], tuple[object, dict]] = {}
        for issuer, target, kind in sorted(self._routes):
            middle = [self._switch(s, made).xbar for s in switches(board, issuer, target)]
            ends = [by_side[issuer], *middle, by_side[target]]
            path = hops(board, issuer, target)
            for (link, direction), up, down in zip(path, ends[:-1], ends[1:], strict=True):
                key = (id(link), direction, kind)
                if key not in links:
                    params = tr.serial_link(link, tr.line_bytes_on_wire(kind), LINK_BUFFERS)
                    serial = SerialLink(**{k: v for k, v in params.items() if k != "clock"})
                    serial.clk_domain = clock(params["clock"])
                    up.mem_side_ports = serial.cpu_side_port
                    serial.mem_side_port = down.cpu_side_ports
                    links[key] = (serial, {})
                links[key][1][target] = AddrRange(region(target, kind), size=REGION_SPAN)
        for serial, ranges in links.values():
            serial.ranges = list(ranges.values())
        if links:
            self.links = [serial for serial, _ in links.values()]

    def _switch(self, switch, made: dict[int, CxlSwitch]) -> CxlSwitch:
        """A switch's component, made once (``switch`` on a single-device board, the
        board's own switch names on a disaggregated one)."""
        if id(switch) not in made:
            name = switch.path.rsplit(".", 1)[-1] if multi_device(self._board) else "switch"
            made[id(switch)] = CxlSwitch(switch)
            setattr(self, name, made[id(switch)])
        return made[id(switch)]


def target_name(side: str, kind: str) -> str:
    """The child name of a transfer target: ``gpu_flush_target`` (what DCOH flushes
    write into the GPU's memory), ``mem0_mmio_target`` and so on."""
    return f"{side}_{kind}_target"


class ReplayBoard(AbstractSystemBoard):
    """The gem5 board that replays ``plans`` of one of our connected boards."""

    def __init__(self, board, plans: list[OpPlan]) -> None:
        placed = table_devices(board)
        self._line = max(max(d.access_unit for _, d, _ in placed), tr.LINE_BYTES)
        memories = [TableMemory(device) for _, device, _ in placed]
        if multi_device(board):
            span = max(m.get_size() for m in memories)
            memory = TableMemories(memories, span)
        else:
            memory = memories[0]
        self._fabric = CxlFabric(board, plans)
        super().__init__(
            clk_freq=BOARD_CLOCK,
            processor=ReplayGenerator(plans),
            memory=memory,
            cache_hierarchy=self._fabric,
        )
        self._set_fullsystem(False)

    @overrides(AbstractSystemBoard)
    def _post_instantiate(self) -> None:
        """Ask for an exit at START_TICK: the first ``run()`` ends there, and the replay
        starts its generators from it."""
        import m5

        super()._post_instantiate()
        m5.scheduleTickExitAbsolute(START_TICK)

    def table_memories(self) -> list[TableMemory]:
        memory = self.get_memory()
        return list(memory.memories) if isinstance(memory, TableMemories) else [memory]

    @overrides(AbstractSystemBoard)
    def _setup_board(self) -> None:
        self.mmap_using_noreserve = True
        self.cache_line_size = self._line

    @overrides(AbstractSystemBoard)
    def _setup_memory_ranges(self) -> None:
        memory = self.get_memory()
        tables = AddrRange(0, size=memory.get_size())
        memory.set_memory_range([tables])
        ranges = [r for m in self.table_memories() for r in m.get_uninterleaved_range()]
        self.mem_ranges = ranges + self._fabric.transfer_ranges()

    @overrides(AbstractSystemBoard)
    def has_io_bus(self) -> bool:
        return False

    @overrides(AbstractSystemBoard)
    def get_io_bus(self) -> IOXBar:
        raise NotImplementedError("a replay board has no I/O bus")

    @overrides(AbstractSystemBoard)
    def has_dma_ports(self) -> bool:
        return False

    @overrides(AbstractSystemBoard)
    def get_dma_ports(self) -> list[Port]:
        raise NotImplementedError("a replay board has no DMA ports")

    @overrides(AbstractSystemBoard)
    def has_coherent_io(self) -> bool:
        return False

    @overrides(AbstractSystemBoard)
    def get_mem_side_coherent_io_port(self):
        raise NotImplementedError("a replay board has no coherent I/O")
