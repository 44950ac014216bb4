"""Analytical checks of the link, CXL and PCIe/CUDA models."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import duration, run_ops

from components.interconnect.cxl import (
    HEADER_BITS,
    LINE_BYTES,
    CxlLink,
    CxlPath,
    CxlSwitch,
    Dcoh,
    Type2Device,
    mem_read,
    mem_write,
    mmio_write,
)
from components.interconnect.link import SerialLink
from components.interconnect.pcie import CudaRuntime, PcieLink
from components.sim.params import ConfigError
from components.sim.schedule import alone_ticks
from components.sim.simobject import SimObject
from components.sim.units import TICKS_PER_NS, TICKS_PER_SECOND

GB = 1e9


def test_cxl_68b_flit_bandwidth():
    link = CxlLink()
    assert link.raw_bandwidth == pytest.approx(16 * 32e9 / 8 * 128 / 130)  # ~63 GB/s
    assert link.efficiency == pytest.approx(64 / 68)
    assert link.effective_bandwidth / GB == pytest.approx(59.31, abs=0.01)


@pytest.mark.parametrize(("mode", "payload"), [("256B", 240), ("256B-LO", 236)])
def test_cxl_256b_flit_modes(mode, payload):
    link = CxlLink.with_flit_mode(mode)
    assert link.flit_bytes == 256
    assert link.efficiency == pytest.approx(payload / 256)


def test_unknown_flit_mode():
    with pytest.raises(ConfigError, match="flit mode"):
        CxlLink.with_flit_mode("128B")


def test_padded_flits_and_serialization():
    link = SerialLink()
    assert link.wire_bytes(1) == 68 and link.wire_bytes(65) == 136
    assert link.serialization_ticks(64 * 1000) == math.ceil(
        68_000 * TICKS_PER_SECOND / link.raw_bandwidth
    )


def test_record_counts_stats_and_energy():
    link = CxlLink()
    ticks = link.record(640, "up")
    assert ticks == link.serialization_ticks(640)
    assert link.bytes["up"] == 640 and link.flits["up"] == 10 and link.bytes["down"] == 0
    assert link.dynamicEnergy.value == pytest.approx(680 * 8 * 5e-12)
    with pytest.raises(ValueError, match="direction"):
        link.record(1, "sideways")


def test_cxl_hop_latency_matches_pond():
    path = CxlPath([(CxlLink(), "down")])
    rtt = path.round_trip_ticks(16, 16) / TICKS_PER_NS
    assert 70 <= rtt <= 90  # Pond: 70-90 ns added load latency, direct attached


def test_switch_hops_add_up():
    a, b, switch = CxlLink(), CxlLink(), CxlSwitch()
    direct = CxlPath([(a, "up")]).one_way_ticks()
    switched = CxlPath([(a, "up"), (b, "down")], [switch]).one_way_ticks()
    assert switched == 2 * direct + switch.port_latency


def test_flush_is_latency_plus_bandwidth():
    root = SimObject()
    root.gpu_link, root.mem_link = CxlLink(), CxlLink()  # distinct resources
    path = CxlPath([(root.gpu_link, "up"), (root.mem_link, "down")], [CxlSwitch()])
    dcoh = Dcoh()
    nbytes = 4 << 20
    # each line carries its DirtyEvict request and its data (header + 64 B) forward
    per_line = LINE_BYTES + math.ceil(HEADER_BITS["D2H Data"] / 8)
    per_line += math.ceil(HEADER_BITS["D2H Req"] / 8)
    expected = path.one_way_ticks() + nbytes / LINE_BYTES * per_line * TICKS_PER_SECOND / (
        path.bandwidth
    )
    (record,), _ = run_ops(lambda now: dcoh.flush(path, nbytes))
    assert duration(record) == pytest.approx(expected, rel=0.02)


def test_flush_window_bound_with_few_trackers():
    path = CxlPath([(CxlLink(), "down")])
    dcoh = Dcoh(max_outstanding=1)
    one = alone_ticks(dcoh.flush(path, LINE_BYTES))
    assert alone_ticks(dcoh.flush(path, 100 * LINE_BYTES)) == pytest.approx(100 * one, rel=0.01)


def test_two_flushes_through_one_dcoh_share_its_trackers():
    path = CxlPath([(CxlLink(), "down")])
    dcoh = Dcoh(max_outstanding=4)  # the trackers, not the link, are the bottleneck
    nbytes = 64 * LINE_BYTES
    (single,), _ = run_ops(lambda now: dcoh.flush(path, nbytes))
    pair, _ = run_ops(lambda now: dcoh.flush(path, nbytes), lambda now: dcoh.flush(path, nbytes))
    first = path.round_trip_ticks(10, 4) + path.one_way_ticks(67)
    assert duration(single) == pytest.approx(64 * first / 4 + first * (1 - 1 / 4), abs=2)
    # together they hold the same four trackers: each takes twice the stream time
    assert [duration(r) for r in pair] == [
        pytest.approx(128 * first / 4 + first * 3 / 4, abs=2)
    ] * 2


def test_flush_records_lines_and_link_bytes():
    link, dcoh = CxlLink(), Dcoh()
    dcoh.flush(CxlPath([(link, "up")]), 6400)
    assert dcoh.linesFlushed.value == 100
    assert link.bytes["up"] == 100 * (10 + 3 + 64)  # D2H Req + D2H Data header + line
    assert link.bytes["down"] == 100 * 4  # H2D Rsp GO_WritePull


def test_mem_and_io_transactions():
    path = CxlPath([(CxlLink(), "down")])
    assert alone_ticks(mem_read(path, 0, max_outstanding=8)) == 0
    read = alone_ticks(mem_read(path, 1 << 20, max_outstanding=512))
    write = alone_ticks(mem_write(path, 1 << 20, max_outstanding=512))
    floor = (1 << 20) * TICKS_PER_SECOND / path.bandwidth
    assert floor < read < 1.3 * floor and floor < write < 1.3 * floor
    assert alone_ticks(mmio_write(path, 8)) == path.one_way_ticks(24)


def test_type2_device_composition():
    device = Type2Device(SimObject(), memory_name="pmem")
    assert device.memory is device.pmem and device.pmem.path == "type2device.pmem"
    assert isinstance(device.dcoh, Dcoh) and isinstance(device.link, CxlLink)


def test_pcie_gen3_tlp_efficiency():
    link = PcieLink()
    assert link.raw_bandwidth / GB == pytest.approx(15.754, abs=0.001)
    assert link.efficiency == pytest.approx(256 / 280)
    assert link.wire_bytes(100) == 124  # short TLPs are not padded


def test_cuda_memcpy_cost_formula():
    link, cuda = PcieLink(), CudaRuntime()
    nbytes = 1 << 24
    serial = link.serialization_ticks(nbytes)
    pinned = alone_ticks(cuda.memcpy(link, nbytes))
    assert pinned == cuda.memcpy_overhead + link.propagation_latency + math.ceil(
        serial / cuda.dma_efficiency
    )
    staging = math.ceil(nbytes * TICKS_PER_SECOND / cuda.staging_bandwidth)
    assert alone_ticks(cuda.memcpy(link, nbytes, pinned=False)) == pinned + staging
    assert 12 * GB < nbytes * TICKS_PER_SECOND / pinned < 14 * GB
    assert cuda.sync() == cuda.sync_overhead
    assert cuda.memcpyCalls.value == 2 and cuda.syncCalls.value == 1
    assert link.bytes["down"] == 2 * nbytes


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [("propagation_latency", "-5ns", "propagation_latency"), ("lane_rate", "fast", "lane_rate")],
)
def test_bad_parameters_name_the_parameter(key, value, match):
    with pytest.raises(ConfigError, match=match):
        CxlLink(**{key: value})


def test_flit_overhead_must_fit():
    link = CxlLink(flit_overhead_bytes="68B")
    with pytest.raises(ConfigError, match="flit_overhead_bytes"):
        _ = link.effective_bandwidth


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 1 << 26), st.integers(1, 1 << 20))
def test_transfer_monotone_in_bytes(nbytes, extra):
    link, pcie = CxlLink(), PcieLink()
    assert link.transfer_ticks(nbytes) <= link.transfer_ticks(nbytes + extra)
    assert pcie.transfer_ticks(nbytes) <= pcie.transfer_ticks(nbytes + extra)
    path = CxlPath([(link, "down")])
    assert alone_ticks(Dcoh().flush(path, nbytes)) <= alone_ticks(
        Dcoh().flush(path, nbytes + extra)
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(0, 4))
def test_latency_additive_in_hops(links, switches):
    path = CxlPath([(CxlLink(), "down") for _ in range(links)], [CxlSwitch()] * switches)
    single = CxlPath([(CxlLink(), "down")]).one_way_ticks()
    assert path.one_way_ticks() == links * single + switches * CxlSwitch().port_latency
