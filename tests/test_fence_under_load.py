"""Host persists under ADR: each core's sfence waits for its clwb'd write to be accepted
by the device's WPQ. Idle, that is one write latency per fence; while other streams
share the device, each write's service runs at the share it gets, so every acceptance
waits longer. Before, the fence chain used the idle write latency under any load
(12 ms of the PMEM baseline's 44 ms per RM1 batch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simrun import duration, run_ops
from test_flows import run

from components.compute.host import HostCpu
from components.memory.pmem import Pmem
from components.memory.stages import stage
from components.sim.flows import Flow

ROWS = np.arange(6000, dtype=np.int64) * 4096  # one row per XPLine pair, no merging
READS = (1 << 30) + np.arange(200_000, dtype=np.int64) * 256


def _fenced(need: float, chain: float, chains: int) -> Flow:
    return Flow({"pmem": need}, min_ticks=chain, fence_ticks=chain, fence_chains=chains)


def test_a_fence_chain_alone_takes_its_idle_duration():
    flow = _fenced(need=2_000, chain=12_000, chains=6)
    run([flow])
    assert flow.end == 12_000


@given(
    need=st.integers(100, 5_000),
    extra=st.integers(1, 50_000),
    chains=st.integers(1, 12),
)
@settings(max_examples=60, deadline=None)
def test_beside_a_greedy_stream_each_chain_waits_for_its_half_speed_service(need, extra, chains):
    """Processor sharing: beside one greedy stream the fenced flow's writes are served
    at half speed, so each chain's acceptances take the flow's service time once more,
    divided among the chains: chain + need / chains (while the other stream runs), or
    its half share's service time where that is longer."""
    chain = need + extra  # chain-bound alone
    fenced = _fenced(need, chain, chains)
    greedy = Flow({"pmem": 10 * (chain + need)})
    run([fenced, greedy])
    expected = max(chain + need / chains, 2 * need)
    assert fenced.end == pytest.approx(expected, abs=1)
    # the greedy stream gets what the chain leaves: work is conserved
    assert greedy.end == pytest.approx(10 * (chain + need) + need, abs=2)
    assert fenced.waited == pytest.approx(expected - chain, rel=1e-6, abs=2)


def test_a_bandwidth_bound_flow_is_not_charged_twice():
    """When the share, not the chain, bounds the flow, acceptances wait for the drain
    already: its duration is the shared service time alone."""
    fenced = _fenced(need=10_000, chain=2_000, chains=6)
    greedy = Flow({"pmem": 100_000})
    run([fenced, greedy])
    assert fenced.end == 20_000


def test_a_stream_on_other_resources_does_not_slow_the_chain():
    fenced = _fenced(need=2_000, chain=12_000, chains=6)
    run([fenced, Flow({"link": 100_000})])
    assert fenced.end == 12_000


def _host_persist(domain: str, with_reads: bool, fenced: bool = True) -> int:
    """The persist op's duration (``fenced=False``: the same write stream, unfenced)."""
    host, dev = HostCpu(), Pmem(domain=domain)
    if fenced:
        bodies = [lambda now: host.persist_rows(dev, ROWS, 128)]
    else:
        window = host.outstanding(128)
        bodies = [lambda now: stage(dev.write(ROWS, 128, window), latency=host.op_overhead)]
    if with_reads:
        bodies.append(lambda now: stage(dev.read(READS, 256, 256)))
    records, _ = run_ops(*bodies, devices=[dev])
    return duration(records[0])


def test_host_persists_slow_down_under_concurrent_reads_under_adr():
    """The reads share every controller with the writes, one turn per request each, so
    the writes get w_w / (w_w + w_r) of their alone service rate; each of the cores'
    chains waits the lost service once: alone + need * w_r / w_w / cores."""
    alone, loaded = _host_persist("adr", False), _host_persist("adr", True)
    host, dev = HostCpu(), Pmem()
    chain = len(ROWS) * (dev.idle_write_latency + host.sfence_latency) / host.cores
    first = dev.idle_write_latency  # the first request's latency comes once, at the end
    assert alone == pytest.approx(chain + host.op_overhead + first, rel=1e-6)  # chain-bound
    writes = host.persist_rows(dev, ROWS, 128).flows[0]
    reads = stage(dev.read(READS, 256, 256)).flows[0]
    assert set(writes.needs) == set(reads.needs)  # the same controllers, evenly
    lost = writes.scale * reads.weight / writes.weight / host.cores
    assert loaded - alone == pytest.approx(lost, rel=1e-3)
    assert lost > 0.005 * alone  # large enough that the idle-latency chain would fail


@pytest.mark.parametrize("domain", ["eadr", "gpf"])
def test_under_eadr_and_gpf_fences_only_order(domain):
    """No acceptance to wait for: under load the fenced stream takes what the same
    stream unfenced takes (its window and its share bound it, not the fences)."""
    for with_reads in (False, True):
        fenced = _host_persist(domain, with_reads)
        assert fenced == _host_persist(domain, with_reads, fenced=False)
