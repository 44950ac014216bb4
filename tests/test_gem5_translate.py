"""gem5 parameter translation, checked without gem5 (components/gem5/translate.py, ops.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from components.boards import build_board
from components.gem5 import available
from components.gem5 import translate as tr
from components.gem5.ops import batch_ops
from components.interconnect.cxl import CxlLink, CxlSwitch
from components.interconnect.pcie import PcieLink
from components.memory.dram import Dram
from components.memory.pmem import Pmem
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from workloads.inputs import InputGenerator
from workloads.models import get_model
from workloads.opgraph import build_demand


def _ns(value: str) -> float:
    assert value.endswith("ns"), value
    return float(value[:-2])


def test_nvm_idle_read_and_bandwidths_match_pmem():
    pmem = Pmem()
    nvm = tr.nvm_interface(pmem)
    idle = tr.FRONTEND_NS + _ns(nvm["tREAD"]) + _ns(nvm["tSEND"]) + _ns(nvm["tBURST"])
    assert idle + tr.BACKEND_NS == pytest.approx(300.0, rel=1e-4)
    burst_bw = 64 / (_ns(nvm["tBURST"]) * 1e-9)
    assert burst_bw == pytest.approx(pmem.ctrl_read_bandwidth, rel=1e-4)
    banks = nvm["banks_per_rank"]
    assert banks & (banks - 1) == 0
    assert banks * 64 / (_ns(nvm["tREAD"]) * 1e-9) >= pmem.ctrl_read_bandwidth
    write_bw = banks * 64 / (_ns(nvm["tWRITE"]) * 1e-9)
    assert write_bw == pytest.approx(pmem.ctrl_write_bandwidth, rel=1e-4)
    assert nvm["read_buffer_size"] == 64 and nvm["max_pending_writes"] == 128
    assert nvm["device_rowbuffer_size"] == "256B"


def test_nvm_follows_overrides_and_rejects_impossible_latency():
    pmem = Pmem(read_latency="400ns")
    assert _ns(tr.nvm_interface(pmem)["tREAD"]) > _ns(tr.nvm_interface(Pmem())["tREAD"]) + 99
    with pytest.raises(ValueError, match="read_latency"):
        tr.nvm_interface(Pmem(read_latency="30ns"))


def test_dram_backend_latency_gives_idle_read():
    params = tr.dram_interface(Dram())
    burst = _ns(params["interface"]["tBURST"])
    assert burst == pytest.approx(3.3333, rel=1e-3)
    backend = _ns(params["controller"]["static_backend_latency"])
    total = tr.FRONTEND_NS + tr.DDR4_TRCD_NS + tr.DDR4_TCL_NS + burst + backend
    assert total == pytest.approx(100.0, rel=1e-4)


@pytest.mark.parametrize(("controllers", "granularity"), [(1, 4096), (2, 64), (4, 4096), (8, 256)])
def test_interleaved_ranges_cover_every_address_once(controllers, granularity):
    size = 1 << 20
    ranges = tr.interleaved_ranges(0, size, controllers, granularity)
    assert len(ranges) == controllers
    for addr in np.random.default_rng(1).integers(0, size, 2000).tolist() + [0, size - 1]:
        owners = [i for i, r in enumerate(ranges) if r.contains(addr)]
        assert owners == [(addr // granularity) % controllers]
    assert not any(r.contains(size) for r in ranges)


def test_interleaved_range_kwargs_are_integers():
    spec = tr.interleaved_ranges(0, 1 << 30, 4, 4096)[3]
    assert spec.kwargs() == {
        "start": 0,
        "size": 1 << 30,
        "intlvHighBit": 13,
        "intlvBits": 2,
        "intlvMatch": 3,
        "xorHighBit": 0,
    }


def test_xor_hashed_ranges_still_partition():
    ranges = tr.interleaved_ranges(0, 1 << 20, 4, 4096, xor_high_bit=19)
    for addr in range(0, 1 << 20, 4093):
        assert sum(r.contains(addr) for r in ranges) == 1


def test_interleaving_rejects_non_power_of_two():
    with pytest.raises(ValueError, match="controllers"):
        tr.interleaved_ranges(0, 1 << 20, 3, 4096)


@pytest.mark.parametrize("link", [CxlLink(), PcieLink(), CxlLink(lanes=8), CxlLink(lane_rate=64)])
def test_serial_link_bandwidth_round_trips(link):
    params = tr.serial_link(link, window=512)
    assert tr.serial_link_bandwidth(params) == pytest.approx(link.effective_bandwidth, rel=0.01)
    assert params["num_lanes"] == link.lanes
    assert params["num_lanes"] * params["link_speed"] >= 512
    assert _ns(params["delay"]) * 1000 == link.propagation_latency
    assert params["req_size"] == params["resp_size"] == 512
    assert tr.serial_link(link)["req_size"] == 16


def test_xbar_latencies_add_up_to_port_latency():
    params = tr.xbar(CxlSwitch())
    cycles_ns = 1e9 / tr.XBAR_CLOCK_HZ
    request = (params["frontend_latency"] + params["forward_latency"]) * cycles_ns
    assert request == pytest.approx(100.0)
    assert params["response_latency"] * cycles_ns == pytest.approx(100.0)


def test_streams_split_rows_into_64B_packets():
    rows = tr.row_stream(0, 1 << 20, 10, 128, read=True)
    assert (rows.count, rows.seq_packets, rows.block, rows.read_percent) == (20, 2, 64, 100)
    assert rows.data_limit == 1280
    sweep = tr.linear_stream(4096, 1000, read=False, issue_bandwidth=6.4e9)
    assert (sweep.count, sweep.read_percent, sweep.period_ticks) == (16, 0, 10_000)
    assert sweep.end == 4096 + 16 * 64
    with pytest.raises(ValueError, match="block size"):
        tr.StreamSpec("linear", 0, 1 << 20, 1, 100, block=128)


def test_memory_span_is_a_power_of_two_holding_the_data():
    span = tr.memory_span(3_000_000_000, 4, 4096, 64, 256)
    assert span >= 3_000_000_000 and span & (span - 1) == 0
    assert span % (4 * 64 * 256) == 0


@pytest.mark.parametrize("system", ["cxl", "pmem", "dram"])
def test_batch_ops_cover_the_batch_traffic(system):
    spec = get_model("rm1").capped(10_000)
    board = build_board(system)
    engine = Engine()
    board.connect(engine, Scheduler(engine), spec, 64)
    batch = InputGenerator(spec, 64, seed=1).batch(0)
    demand = build_demand(spec, batch, 0, None)
    ops = {op.name: op for op in batch_ops(board, demand, 1 << 44)}
    row_packets = math.ceil(board.layout.row_bytes / 64)
    assert ops["lookup"].packets == len(demand.lookup.rows) * row_packets
    assert ops["update"].packets == 2 * len(demand.lookup.unique_rows) * row_packets
    assert ops["pooled_to_gpu"].streams[0].start == 1 << 44
    assert ("mlp_log" in ops) == (system != "dram")
    for op in ops.values():
        for stream in op.streams:
            assert stream.block <= 64


def test_not_under_gem5_here():
    assert available() is False
