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

A disaggregated board (N GPUs x M CXL-MEMs) gets one such table memory per CXL-MEM on
its own address range (side ``mem{m}``), a crossbar per switch, and one SerialLink per
(link, direction, message class) that its routes cross, shared by all of them.
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
    gpu_of,
    hops,
    multi_device,
    region,
    switches,
    table_devices,
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


def _table_ctrls(m5o, device, base: int = 0):
    """Controllers of a table device (its range from ``base``) and their MemCtrl parameters."""
    size = tr.memory_span(device.capacity, device.controllers, device.interleave)
    if type(device).__name__ == "Pmem":
        params = tr.nvm_interface(device)
        make = m5o.NVM_2400_1x64  # the preset supplies tCK, tCS, tWTR, tRTW
    else:
        params = tr.dram_interface(device)
        make = m5o.DDR4_2400_8x8
    ctrls = []
    for spec in tr.interleaved_ranges(base, size, device.controllers, device.interleave):
        intf = make(**params["interface"])
        intf.device_size = f"{size // device.controllers}B"
        intf.range = m5o.AddrRange(**spec)
        ctrls.append(m5o.MemCtrl(dram=intf, **params["controller"]))
    return ctrls, params["controller"], size


@dataclass
class _TableMemory:
    side: str  # its requester's side
    entry: object  # the crossbar table reads enter
    media: object  # the controllers' crossbar (table writes enter it)
    controller: dict
    base: int
    size: int
    device: object


def _table_memory(system, m5o, side: str, device, base: int, suffix: str) -> _TableMemory:
    """One device's controllers, their crossbars and XPBuffers (names end in ``suffix``:
    a disaggregated board has one set per CXL-MEM)."""
    ctrls, controller, size = _table_ctrls(m5o, device, base)
    setattr(system, f"mem_ctrls{suffix}", ctrls)
    media = _xbar(m5o)
    setattr(system, f"media_xbar{suffix}", media)
    for ctrl in ctrls:
        ctrl.port = media.mem_side_ports
    entry = _xbar(m5o)  # where table reads enter
    setattr(system, f"ctrl_xbar{suffix}", entry)
    buffer = tr.xpbuffer(device)
    if buffer is None:
        entry.mem_side_ports = media.cpu_side_ports
    else:  # a read buffer per controller, on its share of the interleaved range
        # the coherent crossbar below them sinks their clean evictions
        below = m5o.SystemXBar(width=64, max_routing_table_size=1 << 20)
        setattr(system, f"buffer_xbar{suffix}", below)
        below.clk_domain = _clock(m5o, f"{tr.XBAR_CLOCK_HZ / 1e9:g}GHz")
        below.mem_side_ports = media.cpu_side_ports
        caches = []
        for ctrl in ctrls:
            cache = m5o.Cache(**buffer, addr_ranges=[ctrl.dram.range])
            cache.clk_domain = _clock(m5o, f"{tr.XBAR_CLOCK_HZ / 1e9:g}GHz")
            entry.mem_side_ports = cache.cpu_side
            cache.mem_side = below.cpu_side_ports
            caches.append(cache)
        setattr(system, f"xpbuffers{suffix}", caches)
    return _TableMemory(side, entry, media, controller, base, size, device)


def build(board, plans: list[OpPlan]) -> Gem5System:
    """The gem5 system that replays ``plans`` of a connected board (``board.layout``):
    one set of controllers per table memory (each CXL-MEM of a disaggregated board)."""
    import m5.objects as m5o

    placed = table_devices(board)
    line = max(max(device.access_unit for _, device, _ in placed), tr.LINE_BYTES)
    system = m5o.System(mem_mode="timing", mmap_using_noreserve=True, cache_line_size=line)
    system.clk_domain = _clock(m5o, "1GHz")
    many = multi_device(board)
    memories = [
        _table_memory(system, m5o, side, device, base, str(m) if many else "")
        for m, (side, device, base) in enumerate(placed)
    ]
    xbars = {}
    for side in _sides(board, plans):
        xbars[side] = _xbar(m5o)
        setattr(system, f"{side}_xbar", xbars[side])
    writes = {}
    for m, memory in enumerate(memories):
        xbars[memory.side].mem_side_ports = memory.entry.cpu_side_ports
        cycles = tr.write_ack_cycles(memory.device, memory.controller)
        writes[memory.side] = _write_path(system, m5o, cycles, memory.media, str(m) if many else "")
    _wire_routes(system, m5o, board, xbars, routes(plans))
    system.mem_ranges = [m5o.AddrRange(memory.base, size=memory.size) for memory in memories] + [
        m5o.AddrRange(region(side, kind), size=REGION_SPAN) for side, _, kind in _targets(plans)
    ]
    pools = {}
    generators = []
    for key, count in sorted(pool_sizes(plans).items()):
        side, window, table_write = key
        pools[key] = []
        for _ in range(count):
            gen = m5o.PyTrafficGen(progress_check=PROGRESS_CHECK, max_outstanding_reqs=window)
            gen.port = (writes[side] if table_write else xbars[side]).cpu_side_ports
            pools[key].append(gen)
            generators.append(gen)
    system.generators = generators
    system.system_port = xbars[memories[0].side].cpu_side_ports
    root = m5o.Root(full_system=False, system=system)
    return Gem5System(root, pools)


def _sides(board, plans: list[OpPlan]) -> list[str]:
    """The sides with a requester or a transfer target (the table engines' always)."""
    used = {side for side, _, _ in table_devices(board)}
    for issuer, target, _ in routes(plans):
        used |= {issuer, target}
    return sorted(used)


def _write_path(system, m5o, cycles: list[int], media, suffix: str = ""):
    """Crossbars whose response latencies delay a table write's acknowledgement, into
    the controllers' WPQs (writes combine there, not in the read buffers)."""
    chain = [_xbar(m5o, response_latency=c) for c in cycles]
    setattr(system, f"write_xbars{suffix}", chain)
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        upstream.mem_side_ports = downstream.cpu_side_ports
    chain[-1].mem_side_ports = media.cpu_side_ports
    return chain[0]


def _targets(plans: list[OpPlan]) -> set[tuple[str, str, str]]:
    return {(target, issuer, kind) for issuer, target, kind in routes(plans)}


def _wire_routes(system, m5o, board, xbars, used) -> None:
    """A SimpleMemory per transfer target, a crossbar per switch and a SerialLink per
    (link, direction, message class) that some route crosses: routes that cross one
    link the same way with the same class share its SerialLink (its ranges: all their
    targets), as flows share the link in the built-in engine."""
    memories = []
    for side, kind in sorted({(target, kind) for _, target, kind in used}):
        bandwidth = (
            f"{gpu_of(board, side).memory_bandwidth / 1e9:g}GB/s"
            if side.startswith("gpu")
            else BUFFER_BANDWIDTH
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
    crossbars: dict[int, object] = {}
    links: dict[tuple[int, str, str], tuple[object, dict]] = {}
    for issuer, target, kind in sorted(used):
        path = hops(board, issuer, target)
        middle = [
            _switch(system, m5o, board, s, crossbars) for s in switches(board, issuer, target)
        ]
        ends = [xbars[issuer], *middle, xbars[target]]
        for (link, direction), upstream, downstream in zip(path, ends[:-1], ends[1:], strict=True):
            key = (id(link), direction, kind)
            if key not in links:
                params = tr.serial_link(link, tr.line_bytes_on_wire(kind), LINK_BUFFERS)
                serial = m5o.SerialLink(**{k: v for k, v in params.items() if k != "clock"})
                serial.clk_domain = _clock(m5o, params["clock"])
                upstream.mem_side_ports = serial.cpu_side_port
                serial.mem_side_port = downstream.cpu_side_ports
                links[key] = (serial, {})
            links[key][1][target] = m5o.AddrRange(region(target, kind), size=REGION_SPAN)
    for serial, ranges in links.values():
        serial.ranges = list(ranges.values())
    if links:
        system.links = [serial for serial, _ in links.values()]


def _switch(system, m5o, board, switch, crossbars: dict[int, object]):
    """The crossbar of a CXL switch, made once (``system.switch`` on a single-device
    board, ``system.switch{n}`` after the board's switches on a disaggregated one)."""
    if id(switch) not in crossbars:
        name = switch.path.rsplit(".", 1)[-1] if multi_device(board) else "switch"
        crossbars[id(switch)] = _xbar(m5o, **tr.xbar(switch))
        setattr(system, name, crossbars[id(switch)])
    return crossbars[id(switch)]
