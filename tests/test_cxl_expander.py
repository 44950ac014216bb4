"""CXL memory expander (components/memory/cxl_expander.py): analytical expectations of
its three mechanisms (link directions, controller paths, media) as the engine times
them, and its microbench target."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.interconnect.cxl import LINE_BYTES
from components.memory.cxl_expander import (
    READ_LINE,
    WRITE_LINE,
    CxlMemoryExpander,
    remote_ddr5,
)
from components.memory.stages import stage
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from components.sim.units import TICKS_PER_NS, TICKS_PER_SECOND

ROOT = Path(__file__).resolve().parent.parent
SPAN = 1 << 30


def run_streams(device, streams):
    """Run (op, addresses, size, outstanding) streams together; their (start, end)."""
    engine = Engine()
    scheduler = Scheduler(engine)
    device.bind(engine.event)
    handles = []
    for i, (op, addr, size, window) in enumerate(streams):
        issue = device.read if op == "read" else device.write

        def body(now, issue=issue, addr=addr, size=size, window=window):
            return stage(issue(addr, size, window))

        handles.append(scheduler.op(f"s{i}", op, 0, f"r{i}", body))
    engine.run()
    return [(h.record.start, h.record.end) for h in handles]


def rand(n, seed=1, base=0):
    rng = np.random.default_rng(seed)
    return base + rng.integers(0, SPAN // 64, n).astype(np.int64) * 64


def payload_limit(device):
    """Payload bytes/s one link direction carries (lanes, 128b/130b, 64 of 68 B)."""
    return device.link.effective_bandwidth


def test_idle_read_latency_is_media_plus_controller_plus_two_link_hops():
    device = CxlMemoryExpander.preset("asic")
    ((start, end),) = run_streams(device, [("read", rand(1), 64, 1)])
    media = device.media.read_latency
    hops = 2 * device.link.propagation_latency
    expected = media + device.controller_latency + hops
    # plus the serialization of one request and one response flit (a few ns)
    assert end - start == pytest.approx(expected, abs=6 * TICKS_PER_NS)
    assert device.idle_read_latency == pytest.approx(expected, abs=6 * TICKS_PER_NS)


def test_the_cxl_path_adds_its_latency_over_the_remote_baseline():
    """CXL-A over DDR5-R: (local + controller + link round trip) / (local + hop)."""
    cxl, remote = CxlMemoryExpander.preset("asic"), remote_ddr5()
    ((s1, e1),) = run_streams(cxl, [("read", rand(1), 64, 1)])
    ((s2, e2),) = run_streams(remote, [("read", rand(1), 64, 1)])
    assert (e1 - s1) / (e2 - s2) == pytest.approx((100 + 40 + 80) / 160, rel=0.03)


def test_all_reads_are_bound_by_the_controller_read_path():
    """CXL-A: the calibrated read path (46% of 38.4 GB/s) is below the media's random
    gather and the link's read direction, so it sets the bandwidth."""
    device = CxlMemoryExpander.preset("asic")
    n = 20000
    ((start, end),) = run_streams(device, [("read", rand(n), 64, 1024)])
    bandwidth = n * 64 / ((end - start) / TICKS_PER_SECOND)
    assert bandwidth == pytest.approx(device.controller_read_bandwidth, rel=0.02)
    assert device.controller_read_bandwidth == pytest.approx(0.46 * 38.4e9)


def test_x8_all_reads_are_bound_by_the_link_up_direction():
    """A x8 link's up direction carries a read's 64 B line and its S2M DRS header: the
    read bandwidth is the direction's payload limit x 64 / (64 + header)."""
    device = CxlMemoryExpander.preset("cz120")
    n = 20000
    ((start, end),) = run_streams(device, [("read", rand(n), 64, 1024)])
    bandwidth = n * 64 / ((end - start) / TICKS_PER_SECOND)
    limit = payload_limit(device) * LINE_BYTES / READ_LINE[1]
    assert bandwidth == pytest.approx(limit, rel=0.02)
    assert limit == pytest.approx(8 * 32e9 / 8 * 128 / 130 * 64 / 68 * 64 / 69, rel=1e-6)


def test_x8_all_writes_are_bound_by_the_link_down_direction():
    device = CxlMemoryExpander.preset("cz120")
    n = 20000
    ((start, end),) = run_streams(device, [("write", rand(n), 64, 1024)])
    bandwidth = n * 64 / ((end - start) / TICKS_PER_SECOND)
    assert bandwidth == pytest.approx(payload_limit(device) * 64 / WRITE_LINE[0], rel=0.02)


def test_reads_and_writes_fill_different_directions():
    """A link-bound mix moves more than either direction alone: reads go up, writes down
    (full duplex), so 2:1 beats the all-read bound."""
    device = CxlMemoryExpander.preset("cz120")
    reads, writes = 20000, 10000
    spans = run_streams(
        device, [("read", rand(reads), 64, 1024), ("write", rand(writes, 2, SPAN), 64, 1024)]
    )
    makespan = max(e for _, e in spans) - min(s for s, _ in spans)
    total = (reads + writes) * 64 / (makespan / TICKS_PER_SECOND)
    all_read = payload_limit(device) * 64 / READ_LINE[1]
    assert total > 1.3 * all_read


@settings(max_examples=12, deadline=None)
@given(fraction=st.floats(0.05, 0.95), lanes=st.sampled_from([4, 8, 16]))
def test_no_link_direction_carries_more_than_its_limit(fraction, lanes):
    """Whatever the read fraction and link width: the bytes each direction carried over
    the run never exceed its payload limit times the run's length."""
    device = CxlMemoryExpander.preset("cz120")
    device.link.lanes = lanes
    total = 6000
    reads = max(round(total * fraction), 1)
    writes = max(total - reads, 1)
    spans = run_streams(
        device, [("read", rand(reads), 64, 256), ("write", rand(writes, 2, SPAN), 64, 256)]
    )
    seconds = (max(e for _, e in spans) - min(s for s, _ in spans)) / TICKS_PER_SECOND
    limit = payload_limit(device) * seconds
    up = reads * READ_LINE[1] + writes * WRITE_LINE[1]
    down = reads * READ_LINE[0] + writes * WRITE_LINE[0]
    assert up <= limit * (1 + 1e-3) and down <= limit * (1 + 1e-3)
    assert device.link.bytes.values[1] == up  # what the link booked, up


def test_unknown_preset_is_refused():
    with pytest.raises(Exception, match="unknown preset"):
        CxlMemoryExpander.preset("cxl-z")


def test_microbench_target_and_baseline(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "configs" / "microbench.py"), "--device", "cxl-mem-asic",
         "--op", "read", "--size", "64", "--requests", "1", "--baseline", "ddr5-r",
         "--outdir", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "results.json").read_text())
    assert 140 <= result["latency_ns"] <= 410  # Melody's genuine CXL devices
    assert result["baseline"]["device"] == "ddr5-r"
    assert result["baseline"]["latency_ratio"] == pytest.approx(
        result["latency_ns"] / result["baseline"]["latency_ns"]
    )
    assert "cxl_mem_asic.link.up" in (out / "stats.txt").read_text()
