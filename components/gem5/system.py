"""A board's memory system as stock gem5 v24 SimObjects (imported only under gem5.opt).

Requesters are PyTrafficGens standing in for the engines that issue memory ops: the
embedding engine (CXL-MEM's near-memory logic, the PCIe card, or the host CPU) and the
GPU's DMA/DCOH. Each device has its own NoncoherentXBar; a CXL or PCIe hop is two
SerialLinks (one per request direction, each carrying its responses back), with a
CommMonitor in front for the link's traffic stats (SerialLink keeps none). A CXL switch
is a NoncoherentXBar. PMEM is one MemCtrl + NVMInterface per module on interleaved
ranges; host DRAM is MemCtrl + DDR4_2400_8x8; GPU memory is a SimpleMemory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.gem5 import translate as tr

GPU_MEM_BASE = 1 << 44  # GPU memory sits above any table region in one flat address map
GPU_MEM_SPAN = 1 << 36
PROGRESS_CHECK = "10s"  # a generator idle between ops must not trip the no-progress fatal


@dataclass
class Gem5System:
    """The instantiated-to-be gem5 tree and the handles the runner drives."""

    root: object
    generators: dict[str, object]  # "mem" (embedding engine side), "gpu"
    table_range: tuple[int, int]
    gpu_range: tuple[int, int]
    banks: int  # banks per controller, for the row generator's address layout
    monitors: dict[str, object] = field(default_factory=dict)  # per link, for stats


def _clock(m5o, clock: str):
    return m5o.SrcClockDomain(clock=clock, voltage_domain=m5o.VoltageDomain())


def _set(obj, params: dict[str, object]) -> None:
    for name, value in params.items():
        setattr(obj, name, value)


def _xbar(m5o, clock: str = "4GHz", **params):
    bus = m5o.NoncoherentXBar(width=64, frontend_latency=1, forward_latency=1, response_latency=1)
    _set(bus, params)
    bus.clk_domain = _clock(m5o, clock)
    return bus


def _generator(m5o, window: int):
    return m5o.PyTrafficGen(progress_check=PROGRESS_CHECK, max_outstanding_reqs=window)


def _monitors(system) -> list[str]:
    return [name for name in system._children if name.endswith("_monitor")]


def _link(m5o, link, window: int, ranges):
    """One request direction of a link: SerialLink with its own clock, ranges it passes."""
    params = tr.serial_link(link, window)
    clock = params.pop("clock")
    serial = m5o.SerialLink(**params)
    serial.clk_domain = _clock(m5o, clock)
    serial.ranges = ranges
    return serial


def _attach_link(system, name: str, m5o, link, window, ranges, upstream, downstream) -> None:
    """upstream xbar -> CommMonitor -> SerialLink -> downstream xbar."""
    monitor = m5o.CommMonitor()
    serial = _link(m5o, link, window, ranges)
    setattr(system, f"{name}_monitor", monitor)
    setattr(system, name, serial)
    upstream.mem_side_ports = monitor.cpu_side_port
    monitor.mem_side_port = serial.cpu_side_port
    serial.mem_side_port = downstream.cpu_side_ports


def _pmem_ctrls(m5o, pmem, base: int, need: int):
    nvm = tr.nvm_interface(pmem)
    size = tr.memory_span(
        need, pmem.controllers, pmem.interleave, nvm["banks_per_rank"], pmem.access_unit
    )
    nvm["device_size"] = f"{size // pmem.controllers}B"
    ctrls = []
    for spec in tr.interleaved_ranges(base, size, pmem.controllers, pmem.interleave):
        intf = m5o.NVM_2400_1x64(**nvm)  # the preset supplies tCK, tCS, tWTR, tRTW
        intf.range = m5o.AddrRange(**spec.kwargs())
        ctrls.append(m5o.MemCtrl(dram=intf))
    return ctrls, size, nvm["banks_per_rank"]


def _dram_ctrls(m5o, dram, base: int, need: int):
    params = tr.dram_interface(dram)
    size = tr.memory_span(need, dram.controllers, dram.interleave, 16, 1024)
    ctrls = []
    for spec in tr.interleaved_ranges(base, size, dram.controllers, dram.interleave):
        intf = m5o.DDR4_2400_8x8(**params["interface"])
        intf.range = m5o.AddrRange(**spec.kwargs())
        ctrls.append(m5o.MemCtrl(dram=intf, **params["controller"]))
    return ctrls, size, 16


def build(board) -> Gem5System:
    """The gem5 system of a connected board (``board.layout`` set)."""
    import m5.objects as m5o

    system = m5o.System(mem_mode="timing", mmap_using_noreserve=True)
    system.clk_domain = _clock(m5o, "1GHz")
    need = board.layout.size
    table = board.table_memory()
    kind = type(table).__name__
    if kind == "Pmem":
        ctrls, size, banks = _pmem_ctrls(m5o, table, 0, need)
    elif kind == "Dram":
        ctrls, size, banks = _dram_ctrls(m5o, table, 0, need)
    else:
        raise NotImplementedError(f"{board.system}: no stock gem5 model for a {kind}")
    gpu_range = m5o.AddrRange(start=GPU_MEM_BASE, size=GPU_MEM_SPAN)
    table_range = m5o.AddrRange(start=0, size=size)
    system.mem_ranges = [table_range, gpu_range]
    system.mem_ctrls = ctrls
    system.gpu_mem = m5o.SimpleMemory(
        range=gpu_range, bandwidth=f"{board.gpu.memory_bandwidth / 1e9:g}GB/s", null=True
    )
    system.mem_xbar = _xbar(m5o)
    system.gpu_xbar = _xbar(m5o)
    for ctrl in ctrls:
        ctrl.port = system.mem_xbar.mem_side_ports
    system.gpu_mem.port = system.gpu_xbar.mem_side_ports
    window = _window(board)
    system.mem_gen = _generator(m5o, window)
    system.gpu_gen = _generator(m5o, window)
    system.mem_gen.port = system.mem_xbar.cpu_side_ports
    system.gpu_gen.port = system.gpu_xbar.cpu_side_ports
    _wire_links(system, m5o, board, window, [table_range], [gpu_range])
    system.system_port = system.mem_xbar.cpu_side_ports
    root = m5o.Root(full_system=False, system=system)
    return Gem5System(
        root,
        {"mem": system.mem_gen, "gpu": system.gpu_gen},
        (0, size),
        (GPU_MEM_BASE, GPU_MEM_BASE + GPU_MEM_SPAN),
        banks,
        {name: getattr(system, name) for name in _monitors(system)},
    )


def _window(board) -> int:
    """Requests in flight per generator: the embedding engine's row window in 64 B packets."""
    row_packets = tr.packets(board.layout.row_bytes)
    if hasattr(board, "nmp"):
        return board.nmp.window(board.layout.row_bytes) * row_packets
    return board.host.outstanding(board.layout.row_bytes) * row_packets


def _wire_links(system, m5o, board, window: int, table_ranges, gpu_ranges) -> None:
    """CXL: device -> link -> switch -> link -> device; host boards: one PCIe hop."""
    if hasattr(board, "cxl_switch"):
        system.switch = _xbar(m5o, **tr.xbar(board.cxl_switch))
        for name, link, own, other, xbar in (
            ("mem", board.cxl_mem.link, table_ranges, gpu_ranges, system.mem_xbar),
            ("gpu", board.cxl_gpu.link, gpu_ranges, table_ranges, system.gpu_xbar),
        ):
            _attach_link(system, f"{name}_up", m5o, link, window, other, xbar, system.switch)
            _attach_link(system, f"{name}_down", m5o, link, window, own, system.switch, xbar)
        return
    links = [board.pcie] + ([board.card_link] if hasattr(board, "card_link") else [])
    link = min(links, key=lambda item: item.effective_bandwidth)
    _attach_link(
        system, "pcie_down", m5o, link, window, gpu_ranges, system.mem_xbar, system.gpu_xbar
    )
    _attach_link(
        system, "pcie_up", m5o, link, window, table_ranges, system.gpu_xbar, system.mem_xbar
    )
