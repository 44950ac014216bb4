"""gem5 parameter translation (components/gem5/translate.py), checked without gem5.

Each test sums what gem5 will add up from these parameters (its own timing formulas,
src/mem/nvm_interface.cc, mem_ctrl.cc, serial_link.cc) and compares the total with
our model's figure for the same mechanism.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.gem5 import available
from components.gem5 import translate as tr
from components.interconnect.cxl import CxlLink, CxlSwitch
from components.interconnect.pcie import PcieLink
from components.memory.dram import Dram
from components.memory.pmem import Pmem


def _ns(value: str) -> float:
    assert value.endswith("ns"), value
    return float(value[:-2])


def _controller_of(addr: int, ranges: list[dict[str, int]]) -> int:
    """Which range serves addr, decoded as gem5's AddrRange::contains does."""
    for index, spec in enumerate(ranges):
        if not spec["start"] <= addr < spec["start"] + spec["size"]:
            continue
        bits = spec.get("intlvBits", 0)
        low = spec.get("intlvHighBit", 0) - bits + 1
        if not bits or (addr >> low) & ((1 << bits) - 1) == spec["intlvMatch"]:
            return index
    raise ValueError(f"address {addr:#x} is in no range")


def _bandwidth(params: dict[str, object]) -> float:
    """Bytes/s a SerialLink sustains for 64 B packets: ceil(bits / (lanes x speed))
    cycles of its clock each (src/mem/serial_link.cc)."""
    period_ps = int(str(params["clock"]).removesuffix("ps"))
    bits = int(params["num_lanes"]) * int(params["link_speed"])
    return 64 * 1e12 / (-(-512 // bits) * period_ps)


@pytest.mark.parametrize("pmem", [Pmem(), Pmem.optane(), Pmem(read_latency="400ns")])
def test_nvm_read_path_adds_up_to_our_idle_read_latency(pmem):
    params = tr.nvm_interface(pmem)
    intf, ctrl = params["interface"], params["controller"]
    idle = sum(
        _ns(v)
        for v in (
            ctrl["static_frontend_latency"],
            intf["tREAD"],
            intf["tSEND"],
            intf["tBURST"],
            ctrl["static_backend_latency"],
        )
    )
    assert idle == pytest.approx(pmem.read_latency / 1000, abs=1e-3)  # gem5 ticks: 1 ps


@pytest.mark.parametrize("pmem", [Pmem(), Pmem.optane(), Pmem(access_unit="512B")])
def test_nvm_media_is_one_server_at_our_line_rates(pmem):
    intf = tr.nvm_interface(pmem)["interface"]
    unit = pmem.access_unit
    assert intf["banks_per_rank"] == 1
    assert intf["burst_length"] * intf["device_bus_width"] // 8 == unit  # burst = XPLine
    assert intf["device_rowbuffer_size"] == f"{unit}B"
    assert unit / (_ns(intf["tREAD"]) * 1e-9) == pytest.approx(pmem.ctrl_read_bandwidth, rel=1e-5)
    assert unit / (_ns(intf["tWRITE"]) * 1e-9) == pytest.approx(pmem.ctrl_write_bandwidth, rel=1e-5)
    assert _ns(intf["tBURST"]) == pytest.approx(64 / 19.2, rel=1e-4)  # DDR4-2400, 64 B


def test_nvm_wpq_holds_our_write_queue_and_drains_when_reads_allow():
    pmem = Pmem(write_queue=96, read_queue=48)
    params = tr.nvm_interface(pmem)
    intf = params["interface"]
    assert intf["write_buffer_size"] + intf["max_pending_writes"] == 96
    assert intf["max_pending_writes"] >= 2  # gem5's pending-write histogram needs two
    assert intf["read_buffer_size"] == intf["max_pending_reads"] == 48
    assert params["controller"]["write_low_thresh_perc"] == 0


def test_nvm_rejects_a_latency_shorter_than_a_media_read():
    with pytest.raises(ValueError, match="read_latency"):
        tr.nvm_interface(Pmem(read_latency="40ns"))


def test_dram_closed_row_read_adds_up_to_our_idle_read_latency():
    params = tr.dram_interface(Dram())
    burst = _ns(params["interface"]["tBURST"])
    assert burst == pytest.approx(64 / 19.2, rel=1e-4)
    ctrl = params["controller"]
    total = (
        _ns(ctrl["static_frontend_latency"])
        + tr.DDR4_TRCD_NS
        + tr.DDR4_TCL_NS
        + burst
        + _ns(ctrl["static_backend_latency"])
    )
    assert total == pytest.approx(100.0, abs=1e-3)
    with pytest.raises(ValueError, match="read_latency"):
        tr.dram_interface(Dram(read_latency="20ns"))


# DDR4_2400_8x8 (gem5 src/mem/DRAMInterface.py, inherited from DDR4_2400_16x4 where
# not overridden): what our Dram defaults must equal, since they cite that preset
DDR4_2400_8X8 = {
    "ranks_per_channel": 2,
    "banks_per_rank": 16,
    "device_rowbuffer_size": "1024B",
    "tCS": 1.666,
    "tXAW": 21.0,
    "activation_limit": 4,
    "tRAS": 32.0,
    "tRP": 14.16,
    "tRFC": 350.0,
    "tREFI": 7800.0,
}


def test_dram_array_is_the_ddr4_preset_by_default():
    intf = tr.dram_interface(Dram())["interface"]
    for key, value in DDR4_2400_8X8.items():
        if isinstance(value, float):
            assert _ns(intf[key]) == pytest.approx(value), key
        else:
            assert intf[key] == value, key


def test_dram_array_parameters_reach_gem5():
    dram = Dram(
        ranks=1,
        banks=8,
        row_buffer="4KiB",
        rank_switch="2.5ns",
        activation_window="30ns",
        row_cycle="50ns",
        refresh_cycle="260ns",
        refresh_interval="3.9us",
    )
    intf = tr.dram_interface(dram)["interface"]
    assert (intf["ranks_per_channel"], intf["banks_per_rank"]) == (1, 8)
    assert intf["device_rowbuffer_size"] == "512B"  # 8 devices make the 4 KiB row
    assert _ns(intf["tCS"]) == 2.5 and _ns(intf["tXAW"]) == 30
    assert _ns(intf["tRAS"]) + _ns(intf["tRP"]) == pytest.approx(50)  # tRC
    assert (_ns(intf["tRFC"]), _ns(intf["tREFI"])) == (260, 3900)
    with pytest.raises(ValueError, match="bank groups"):
        tr.dram_interface(Dram(banks=6))
    with pytest.raises(ValueError, match="row_cycle"):
        tr.dram_interface(Dram(row_cycle="20ns"))


@pytest.mark.parametrize(
    ("device", "params"),
    [
        (Pmem(), tr.nvm_interface(Pmem())),
        (Pmem(write_latency="2500ns"), tr.nvm_interface(Pmem())),
        (Dram(), tr.dram_interface(Dram())),
    ],
)
def test_write_acknowledgement_takes_our_write_latency(device, params):
    cycles = tr.write_ack_cycles(device, params["controller"])
    assert all(0 < c <= tr.MAX_XBAR_CYCLES for c in cycles)  # gem5: <= 1 us per crossbar
    extra = sum(cycles) * 1e12 / tr.XBAR_CLOCK_HZ
    total = tr.controller_ack_ticks(params["controller"]) + extra
    assert total == pytest.approx(device.write_latency, abs=250)


def test_write_acknowledgement_cannot_be_faster_than_gem5s():
    with pytest.raises(ValueError, match="write_latency"):
        tr.write_ack_cycles(Pmem(write_latency="20ns"), tr.nvm_interface(Pmem())["controller"])


def test_xpbuffer_is_a_direct_mapped_cache_of_our_lines():
    pmem = Pmem()
    cache = tr.xpbuffer(pmem)
    assert cache["assoc"] == 1
    assert cache["size"] == f"{4 * 64 * 256}B"
    hit = cache["data_latency"] * 1e12 / tr.XBAR_CLOCK_HZ
    media = 256 / pmem.ctrl_read_bandwidth * 1e12
    assert hit == pytest.approx(pmem.read_latency - media, abs=250)
    assert tr.xpbuffer(Pmem(buffer_lines=0)) is None
    assert tr.xpbuffer(Dram()) is None


@settings(max_examples=40, deadline=None)
@given(
    lines=st.lists(st.integers(0, 1 << 22), min_size=2, max_size=40),
    buffer_lines=st.sampled_from([16, 64, 128]),
)
def test_xpbuffer_sets_collide_exactly_when_our_buffer_slots_do(lines, buffer_lines):
    """gem5 indexes the (per-controller) cache by global line modulo its sets; our
    buffer by controller-local line modulo buffer_lines: the same conflicts."""
    pmem = Pmem(buffer_lines=buffer_lines)
    n, per_chunk = pmem.controllers, pmem.interleave // pmem.access_unit
    sets = n * buffer_lines  # direct-mapped: one line per set
    line = np.array(lines)
    ctrl = (line // per_chunk) % n
    local = (line // per_chunk // n) * per_chunk + line % per_chunk
    ours = ctrl * buffer_lines + local % buffer_lines
    theirs = ctrl * sets + line % sets  # a cache per controller
    same_slot = ours[:, None] == ours[None, :]
    same_set = theirs[:, None] == theirs[None, :]
    assert (same_slot == same_set).all()


@pytest.mark.parametrize(("controllers", "granularity"), [(1, 4096), (2, 64), (4, 4096), (8, 256)])
def test_interleaved_ranges_follow_our_controller_mapping(controllers, granularity):
    size = 1 << 20
    ranges = tr.interleaved_ranges(0, size, controllers, granularity)
    assert len(ranges) == controllers
    for addr in np.random.default_rng(1).integers(0, size, 2000).tolist() + [0, size - 1]:
        assert _controller_of(addr, ranges) == (addr // granularity) % controllers
    with pytest.raises(ValueError, match="no range"):
        _controller_of(size, ranges)


def test_interleaving_rejects_non_power_of_two():
    with pytest.raises(ValueError, match="controllers"):
        tr.interleaved_ranges(0, 1 << 20, 3, 4096)
    with pytest.raises(ValueError, match="interleave"):
        tr.interleaved_ranges(0, 1 << 20, 4, 3000)


@pytest.mark.parametrize(
    ("kind", "line_bytes"), [("flush", 77), ("read", 67), ("mmio", 64), ("copy", 64)]
)
def test_line_bytes_on_the_wire_by_message_class(kind, line_bytes):
    """CXL 2.0 §4.2 message sizes: D2H Req 79 b + D2H Data 17 b; H2D Data 24 b."""
    assert tr.line_bytes_on_wire(kind) == line_bytes
    with pytest.raises(ValueError, match="message class"):
        tr.line_bytes_on_wire("snoop")


@pytest.mark.parametrize("link", [CxlLink(), PcieLink(), CxlLink(lanes=8), CxlLink(lane_rate=64)])
@pytest.mark.parametrize("kind", ["flush", "read", "copy"])
def test_serial_link_moves_a_line_in_our_wire_time(link, kind):
    wire = tr.line_bytes_on_wire(kind)
    params = tr.serial_link(link, wire, buffers=512)
    ours = 64 * 1e12 / (link.serialization_ticks(wire * 100_000) / 100_000)
    assert _bandwidth(params) == pytest.approx(ours, rel=2e-3)
    assert params["num_lanes"] * params["link_speed"] >= 512  # one packet per cycle
    assert _ns(params["delay"]) * 1000 == link.propagation_latency
    assert params["req_size"] == params["resp_size"] == 512


def test_xbar_latencies_add_up_to_port_latency():
    params = tr.xbar(CxlSwitch())
    cycles_ns = 1e9 / tr.XBAR_CLOCK_HZ
    request = (params["frontend_latency"] + params["forward_latency"]) * cycles_ns
    assert request == pytest.approx(100.0)
    assert params["response_latency"] * cycles_ns == pytest.approx(100.0)


def test_memory_span_is_a_power_of_two_holding_the_data():
    span = tr.memory_span(3_000_000_000, 4, 4096)
    assert span >= 3_000_000_000 and span & (span - 1) == 0
    assert tr.memory_span(10, 4, 4096) == 4 * 4096


def test_period_for_an_issue_rate():
    assert tr.period_for(6.4e9) == 10_000
    assert tr.period_for(None) == 0


def test_not_under_gem5_here():
    assert available() is False
