"""Load-dependent service in the flow network (components/sim/loaded.py): thrashing
against its closed form, M/D/1 queueing against Pollaczek-Khinchine, and flows without
a load untouched."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.sim.engine import Engine
from components.sim.flows import Flow, FlowNetwork
from components.sim.loaded import FlowLoad


def run(flows):
    engine = Engine()
    net = FlowNetwork(engine)

    def launch(flow):
        yield net.start(flow)

    for flow in flows:
        engine.process(launch(flow))
    engine.run()
    return net


def load(requesters=1.0, onset=0.0, slope=0.0, latency=0.0, service=0.0, resources=("r",)):
    return FlowLoad(requesters, onset, slope, latency, service, frozenset(resources))


@settings(max_examples=40, deadline=None)
@given(
    threads=st.integers(1, 24),
    onset=st.floats(0.0, 12.0),
    slope=st.floats(0.0, 0.3),
)
def test_thrashing_slows_a_shared_resource_by_its_curve(threads, onset, slope):
    """K equal unbounded flows of one requester each on one resource: together they
    finish once the resource has served K x need at 1 / (1 + slope (K - onset)+)."""
    need = 1_000_000
    curve = load(onset=onset, slope=slope)
    flows = [Flow({"r": need}, load=curve) for _ in range(threads)]
    run(flows)
    slowdown = 1 + slope * max(threads - onset, 0.0)
    assert max(f.end for f in flows) == pytest.approx(threads * need * slowdown, rel=1e-6)


def test_requesters_spread_over_resources_by_need():
    """One flow of 12 requesters over two resources, 3:1 by need: the pressure is 9 on
    the first, 3 on the second; with onset 4 only the first slows (by 1 + 0.1 x 5)."""
    flow = Flow({"a": 3000, "b": 1000}, load=load(12, 4.0, 0.1, resources=("a", "b")))
    run([flow])
    assert flow.end == pytest.approx(3000 * 1.5, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(rho=st.floats(0.05, 0.9), service=st.floats(10.0, 200.0))
def test_a_window_waits_as_md1_at_the_others_utilisation(rho, service):
    """A window-bound reader beside a background flow that keeps the resource rho busy
    (its own bound, no load): each request waits service x rho / (2 (1 - rho)) more."""
    latency, requests = 300.0, 2000
    bound = requests * latency
    background = Flow({"r": rho * 50 * bound}, min_ticks=50 * bound)
    reader = Flow({"r": 1.0}, min_ticks=bound, load=load(latency=latency, service=service))
    run([background, reader])
    wait = service * rho / (2 * (1 - rho))
    assert reader.end == pytest.approx(bound * (latency + wait) / latency, rel=1e-4)


def test_a_lone_window_keeps_its_idle_latency():
    """One requester's own requests do not queue behind each other: alone, its window
    bound is the idle one (the issue's 'flat' single-stream case is the others' load)."""
    reader = Flow({"r": 1000.0}, min_ticks=600_000, load=load(latency=300, service=40))
    run([reader])
    assert reader.end == 600_000


def test_flows_without_a_load_share_as_before():
    """A loaded flow's slowdown reaches the unloaded flows sharing its resource only
    through the resource's slower service; two unloaded flows are the plain fill."""
    plain = [Flow({"r": 1000}), Flow({"r": 1000})]
    run(plain)
    assert [f.end for f in plain] == [2000, 2000]
    mixed = [Flow({"r": 1000}), Flow({"r": 1000}, load=load(1, 0.0, 1.0))]
    run(mixed)
    # pressure 1 on r, factor 2 on the loaded flow's half of the work: 1.5x the media
    assert max(f.end for f in mixed) == pytest.approx(3000, rel=1e-6)


@pytest.mark.parametrize(("readers", "demand"), [(4, 0.9), (8, 0.9), (24, 0.9), (24, 2.4)])
def test_symmetric_readers_settle_on_the_queueing_fixed_point(readers, demand):
    """N equal window-bound readers, each queueing behind the other N - 1: each runs at
    the rate x with x = 1 / (bound x (latency + wait((N - 1) x need)) / latency), found
    here by bisection; the network's repeated fill must settle there, not oscillate (24
    threads on six Optane DIMMs want 2.4 times what the DIMMs serve, idle)."""
    need, latency, service = 1.0e6, 305.0, 38.8
    bound = need * readers / demand  # at idle latency they would want ``demand``

    def excess(x):
        rho = min((readers - 1) * x * need, 0.99)
        return x - latency / (bound * (latency + service * rho / (2 * (1 - rho))))

    low, high = 0.0, 1.0 / (readers * need)
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if excess(mid) < 0 else (low, mid)
    flows = [
        Flow({"r": need}, min_ticks=bound, load=load(latency=latency, service=service))
        for _ in range(readers)
    ]
    run(flows)
    assert max(f.end for f in flows) == pytest.approx(1 / low, rel=1e-3)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.floats(0.0, 1.0), st.floats(0.5, 8.0), st.integers(0, 2)),
        min_size=1,
        max_size=12,
    )
)
def test_a_named_requester_counts_once_where_any_of_its_flows_is(entries):
    """Pressure with owners: each (owner, resource) counts the owner's requesters times
    the chance that any of its flows is there; unnamed flows count as before."""
    import numpy as np

    from components.sim.loaded import _owned_pressure

    owners = [f"t{o}" if o else "" for o, _, _, _ in entries]
    loads = [
        FlowLoad(req, 0.0, 0.0, 0.0, 0.0, frozenset("r"), owner=name)
        for (_, _, req, _), name in zip(entries, owners, strict=True)
    ]
    entry_flow = np.arange(len(entries))
    entry_res = np.array([res for _, _, _, res in entries])
    present = np.array([p for _, p, _, _ in entries])
    requesters = np.array([req for _, _, req, _ in entries])
    got = _owned_pressure(loads, entry_flow, entry_res, present, requesters, 3)
    expected = np.zeros(3)
    groups: dict = {}
    for i, (name, res) in enumerate(zip(owners, entry_res, strict=True)):
        key = (name, res) if name else (i, res)
        groups.setdefault(key, []).append(i)
    for (_, res), members in groups.items():
        absent = np.prod([1 - present[i] for i in members])
        weight = max((requesters[i] for i in members if present[i] > 0), default=0.0)
        expected[res] += (1 - absent) * weight
    assert got == pytest.approx(expected, abs=1e-9)
