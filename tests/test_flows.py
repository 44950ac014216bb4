"""The flow network: weighted max-min sharing, caps, contention, progress, milestones."""

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from components.sim.engine import Engine
from components.sim.flows import Flow, FlowNetwork


def run(flows, starts=None):
    engine = Engine()
    net = FlowNetwork(engine)

    def launch(flow, at):
        yield engine.timeout(at)
        yield net.start(flow)

    for i, flow in enumerate(flows):
        engine.process(launch(flow, starts[i] if starts else 0))
    engine.run()
    return net


def test_a_flow_alone_takes_its_most_loaded_resource_or_its_own_bound():
    a = Flow({"r": 1000, "s": 400})
    b = Flow({"r": 100}, min_ticks=700)
    run([a])
    run([b])
    assert (a.end, b.end) == (1000, 700)


def test_two_equal_flows_on_one_resource_each_get_half():
    a, b = Flow({"link": 1000}), Flow({"link": 1000})
    net = run([a, b])
    assert a.end == b.end == 2000
    assert a.waited == pytest.approx(1000) and b.waited == pytest.approx(1000)
    assert net.use["link"].busy == pytest.approx(2000)


def test_a_flow_bound_by_its_window_leaves_the_rest_to_the_other():
    # c can use at most half of the resource (window), d takes what c leaves
    c, d = Flow({"r": 500}, min_ticks=1000), Flow({"r": 1000})
    run([c, d])
    assert c.end == 1000  # never slowed: its bound is below its fair share
    assert d.end == 1500  # half the resource while c runs, all of it afterwards
    assert c.waited == pytest.approx(0)


def test_max_min_across_two_resources():
    # x uses r1 and r2, y only r1, z only r2: all three share fairly, x at 1/2 of each
    x, y, z = Flow({"r1": 1000, "r2": 1000}), Flow({"r1": 1000}), Flow({"r2": 3000})
    run([x, y, z])
    assert x.end == y.end == 2000  # r1 split evenly
    assert z.end == 4000  # half of r2 until 2000 (1000 done), then alone for 2000 more


def test_weights_share_in_proportion():
    heavy, light = Flow({"r": 900}, weight=2.0), Flow({"r": 900}, weight=1.0)
    run([heavy, light])
    assert heavy.end == 1350  # 2/3 of r
    assert light.end == 1800


def test_contention_is_charged_to_whoever_shared_the_bottleneck():
    a, b = Flow({"r": 1000}, owner=1), Flow({"r": 1000, "s": 10}, owner=2)
    run([a, b], starts=[0, 500])
    # b arrives at 500: both at half until a finishes at 1500, b alone until 2000
    assert (a.end, b.end) == (1500, 2000)
    assert a.waited_on == {2: pytest.approx(500)}
    assert b.waited_on == {1: pytest.approx(500)}


def test_progress_history_gives_the_tick_of_any_position():
    a, b = Flow({"r": 1000}), Flow({"r": 1000})
    run([a, b], starts=[0, 500])
    # a: alone to 500 (half done), then at half rate until 1500
    assert a.tick_at([0.25, 0.5, 0.75, 1.0]).tolist() == pytest.approx([250, 500, 1000, 1500])


def test_milestone_fires_when_the_progress_is_reached():
    engine = Engine()
    net = FlowNetwork(engine)
    flow = Flow({"r": 1000})
    seen = []

    def watch():
        net.start(flow)
        yield net.milestone(flow, 0.3)
        seen.append(engine.now)

    engine.process(watch())
    engine.run()
    assert seen == [300]


def test_stopping_a_flow_frees_its_share():
    engine = Engine()
    net = FlowNetwork(engine)
    a, b = Flow({"r": 1000}), Flow({"r": 1000})

    def stopper():
        net.start(a)
        net.start(b)
        yield engine.timeout(400)
        assert net.stop(a) == pytest.approx(0.2)

    engine.process(stopper())
    engine.run()
    assert b.end == 1200  # 200 done by 400, then 800 alone


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["r1", "r2", "r3"]),
            st.integers(1, 5000),
            st.integers(0, 3000),
            st.integers(0, 2000),
        ),
        min_size=1,
        max_size=6,
    )
)
@example(specs=[("r1", 1, 0, 0), ("r2", 936, 0, 0), ("r2", 327, 0, 0), ("r1", 1, 0, 1262)])
def test_work_is_conserved_and_nothing_beats_running_alone(specs):
    flows = [Flow({r: need}, min_ticks=bound) for r, need, bound, _ in specs]
    starts = [at for *_, at in specs]
    net = run(flows, starts)
    for flow, at in zip(flows, starts, strict=True):
        assert flow.end - at >= flow.alone_ticks - 1
    for resource in {r for r, *_ in specs}:
        served = sum(f.needs.get(resource, 0) for f in flows)
        assert net.use[resource].busy == pytest.approx(served, rel=1e-6)
        # the resource is never over-subscribed: its work fits in the time it was used
        first = min(at for (r, *_), at in zip(specs, starts, strict=True) if r == resource)
        last = max(f.end for f, (r, *_) in zip(flows, specs, strict=True) if r == resource)
        assert served <= (last - first) + len(flows)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4000), min_size=2, max_size=5))
def test_flows_started_together_end_the_same_whatever_their_order(needs):
    forward = [Flow({"r": n}) for n in needs]
    backward = [Flow({"r": n}) for n in reversed(needs)]
    run(forward)
    run(backward)
    assert [f.end for f in forward] == [f.end for f in reversed(backward)]


def test_equal_flows_finish_together_in_processor_sharing_order():
    flows = [Flow({"r": n}) for n in (100, 200, 300)]
    run(flows)
    # PS: 3 share until 300, 2 share until 500, 1 alone until 600
    assert [f.end for f in flows] == [300, 500, 600]
    # each lost exactly its finish time minus its need
    assert math.isclose(sum(f.waited for f in flows), (300 - 100) + (500 - 200) + (600 - 300))
