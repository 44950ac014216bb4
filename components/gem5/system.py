"""A board's memory system as stock gem5 v24 SimObjects (imported only under gem5.opt).

Requesters are PyTrafficGens standing in for whoever issues each stream: the embedding
engine and checkpoint DMA beside the tables ("mem"), the GPU's DMA/DCOH ("gpu"), the
host ("host"; on the host systems also the tables' requester). Each side has its own
NoncoherentXBar; table reads go from it to the controllers' crossbar, table writes from
a second crossbar whose response latency delays their acknowledgement to our write
latency. PMEM is one MemCtrl + NVMInterface per module on interleaved ranges; host DRAM
is MemCtrl + DDR4_2400_8x8. Transfers land in SimpleMemories, one per (side, message
class); each route gets a SerialLink per hop, clocked for its message class (the CXL
switch is a NoncoherentXBar between hops). Generators come in pools, one per (side,
window, table write), sized for the most streams a pool runs at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from components.gem5 import translate as tr
from components.gem5.ops import (
    REGION_SPAN,
    LinearStream,
    OpPlan,
    TraceStream,
    engine_side,
    hops,
    region,
)

PROGRESS_CHECK = "1000s"  # generators sit idle between ops: never a "no progress" fatal
LINK_BUFFERS = 4096  # SerialLink request/response buffers: more than any window
BUFFER_BANDWIDTH = "1000GB/s"  # transfer targets our model does not time (device buffers)


@dataclass
class Gem5System:
    """The gem5 tree (to be instantiated) and the generator pools the replay draws on."""

    root: object
    pools: dict[tuple[str, int, bool], list[object]]


def pool_key(stream: TraceStream | LinearStream) -> tuple[str, int, bool]:
    """Generators are interchangeable within (side, window, writes to the tables)."""
    return (stream.side, stream.window, isinstance(stream, TraceStream) and stream.write)


def pool_sizes(plans: list[OpPlan]) -> Counter:
    """Generators each pool needs: a unit runs one op at a time, so per unit the most
    streams of the key one of its stages runs; ops without a unit overlap as in the
    built-in schedule, plus one."""
    per_unit: dict[tuple[str, tuple], int] = {}
    events = []
    for plan in plans:
        unit = plan.trace.record.resource
        for stage in plan.stages:
            counts = Counter(pool_key(stream) for stream in stage.streams)
            for key, count in counts.items():
                if unit is None:
                    events.append((plan.trace.record.start, 1, key))
                    events.append((plan.trace.record.end, -1, key))
                else:
                    per_unit[(unit, key)] = max(per_unit.get((unit, key), 0), count)
    sizes: Counter = Counter()
    for (_, key), count in per_unit.items():
        sizes[key] += count
    live, most = Counter(), Counter()
    for _, step, key in sorted(events, key=lambda e: (e[0], e[1])):
        live[key] += step
        most[key] = max(most[key], live[key])
    for key, count in most.items():
        sizes[key] += count + 1
    return sizes


def routes(plans: list[OpPlan]) -> set[tuple[str, str, str]]:
    return {
        stream.route
        for plan in plans
        for stage in plan.stages
        for stream in stage.streams
        if isinstance(stream, LinearStream)
    }


def _clock(m5o, clock: str):
    return m5o.SrcClockDomain(clock=clock, voltage_domain=m5o.VoltageDomain())


def _xbar(m5o, clock: str = f"{tr.XBAR_CLOCK_HZ / 1e9:g}GHz", **params):
    bus = m5o.NoncoherentXBar(width=64, frontend_latency=1, forward_latency=1, response_latency=1)
    for name, value in params.items():
        setattr(bus, name, value)
    bus.clk_domain = _clock(m5o, clock)
    return bus


def _table_ctrls(m5o, device):
    """Controllers of the table device and their MemCtrl parameters."""
    size = tr.memory_span(device.capacity, device.controllers, device.interleave)
    if type(device).__name__ == "Pmem":
        params = tr.nvm_interface(device)
        make = m5o.NVM_2400_1x64  # the preset supplies tCK, tCS, tWTR, tRTW
    else:
        params = tr.dram_interface(device)
        make = m5o.DDR4_2400_8x8
    ctrls = []
    for spec in tr.interleaved_ranges(0, size, device.controllers, device.interleave):
        intf = make(**params["interface"])
        intf.device_size = f"{size // device.controllers}B"
        intf.range = m5o.AddrRange(**spec)
        ctrls.append(m5o.MemCtrl(dram=intf, **params["controller"]))
    return ctrls, params["controller"], size


def build(board, plans: list[OpPlan]) -> Gem5System:
    """The gem5 system that replays ``plans`` of a connected board (``board.layout``)."""
    import m5.objects as m5o

    device = board.table_memory()
    line = max(device.access_unit, tr.LINE_BYTES)  # the largest packet: a device line
    system = m5o.System(mem_mode="timing", mmap_using_noreserve=True, cache_line_size=line)
    system.clk_domain = _clock(m5o, "1GHz")
    ctrls, controller, size = _table_ctrls(m5o, device)
    system.mem_ctrls = ctrls
    system.media_xbar = media = _xbar(m5o)
    for ctrl in ctrls:
        ctrl.port = media.mem_side_ports
    system.ctrl_xbar = _xbar(m5o)  # where table reads enter
    buffer = tr.xpbuffer(device)
    if buffer is None:
        system.ctrl_xbar.mem_side_ports = media.cpu_side_ports
    else:  # a read buffer per controller, on its share of the interleaved range
        # the coherent crossbar below them sinks their clean evictions
        system.buffer_xbar = below = m5o.SystemXBar(width=64, max_routing_table_size=1 << 20)
        below.clk_domain = _clock(m5o, f"{tr.XBAR_CLOCK_HZ / 1e9:g}GHz")
        below.mem_side_ports = media.cpu_side_ports
        caches = []
        for ctrl in ctrls:
            cache = m5o.Cache(**buffer, addr_ranges=[ctrl.dram.range])
            cache.clk_domain = _clock(m5o, f"{tr.XBAR_CLOCK_HZ / 1e9:g}GHz")
            system.ctrl_xbar.mem_side_ports = cache.cpu_side
            cache.mem_side = below.cpu_side_ports
            caches.append(cache)
        system.xpbuffers = caches
    xbars = {}
    for side in _sides(board, plans):
        xbars[side] = _xbar(m5o)
        setattr(system, f"{side}_xbar", xbars[side])
    engine = xbars[engine_side(board)]
    engine.mem_side_ports = system.ctrl_xbar.cpu_side_ports
    writes = _write_path(system, m5o, tr.write_ack_cycles(device, controller), media)
    _wire_routes(system, m5o, board, xbars, routes(plans))
    system.mem_ranges = [m5o.AddrRange(0, size=size)] + [
        m5o.AddrRange(region(side, kind), size=REGION_SPAN) for side, _, kind in _targets(plans)
    ]
    pools = {}
    generators = []
    for key, count in sorted(pool_sizes(plans).items()):
        side, window, table_write = key
        pools[key] = []
        for _ in range(count):
            gen = m5o.PyTrafficGen(progress_check=PROGRESS_CHECK, max_outstanding_reqs=window)
            gen.port = (writes if table_write else xbars[side]).cpu_side_ports
            pools[key].append(gen)
            generators.append(gen)
    system.generators = generators
    system.system_port = engine.cpu_side_ports
    root = m5o.Root(full_system=False, system=system)
    return Gem5System(root, pools)


def _sides(board, plans: list[OpPlan]) -> list[str]:
    """The sides with a requester or a transfer target (the engine's always)."""
    used = {engine_side(board)}
    for issuer, target, _ in routes(plans):
        used |= {issuer, target}
    return sorted(used)


def _write_path(system, m5o, cycles: list[int], media):
    """Crossbars whose response latencies delay a table write's acknowledgement, into
    the controllers' WPQs (writes combine there, not in the read buffers)."""
    chain = [_xbar(m5o, response_latency=c) for c in cycles]
    system.write_xbars = chain
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        upstream.mem_side_ports = downstream.cpu_side_ports
    chain[-1].mem_side_ports = media.cpu_side_ports
    return chain[0]


def _targets(plans: list[OpPlan]) -> set[tuple[str, str, str]]:
    return {(target, issuer, kind) for issuer, target, kind in routes(plans)}


def _wire_routes(system, m5o, board, xbars, used) -> None:
    """A SimpleMemory per transfer target and a SerialLink per hop of every route."""
    memories, links = [], []
    for side, kind in sorted({(target, kind) for _, target, kind in used}):
        bandwidth = (
            f"{board.gpu.memory_bandwidth / 1e9:g}GB/s" if side == "gpu" else BUFFER_BANDWIDTH
        )
        memory = m5o.SimpleMemory(
            range=m5o.AddrRange(region(side, kind), size=REGION_SPAN),
            latency="0ns",
            latency_var="0ns",
            bandwidth=bandwidth,
            null=True,
        )
        memory.port = xbars[side].mem_side_ports
        memories.append(memory)
    if memories:
        system.transfer_targets = memories
    if hasattr(board, "cxl_switch") and used:
        system.switch = _xbar(m5o, **tr.xbar(board.cxl_switch))
    for issuer, target, kind in sorted(used):
        path = hops(board, issuer, target)
        middle = [system.switch] * (len(path) - 1) if len(path) > 1 else []
        ends = [xbars[issuer], *middle, xbars[target]]
        target_range = m5o.AddrRange(region(target, kind), size=REGION_SPAN)
        for (link, _), upstream, downstream in zip(path, ends[:-1], ends[1:], strict=True):
            params = tr.serial_link(link, tr.line_bytes_on_wire(kind), LINK_BUFFERS)
            serial = m5o.SerialLink(**{k: v for k, v in params.items() if k != "clock"})
            serial.clk_domain = _clock(m5o, params["clock"])
            serial.ranges = [target_range]
            upstream.mem_side_ports = serial.cpu_side_port
            serial.mem_side_port = downstream.cpu_side_ports
            links.append(serial)
    if links:
        system.links = links
