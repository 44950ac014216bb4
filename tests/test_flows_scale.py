"""The array flow solver against the list-based one it replaced (tests/flows_oracle.py):
on random flow sets (needs over shared resources, weights, window bounds, fence chains,
idle needs, WPQ-drain followers, milestones, stops, staggered starts, owners shared by
several flows) every result is the same float: end ticks, progress histories, rates,
waited, waited_on (values and key order) and every resource's use. Exact, not approximate:
the new solver adds every sum in the order the old one did."""

from __future__ import annotations

import numpy as np
import pytest
from flows_oracle import ReferenceNetwork
from hypothesis import given, settings
from hypothesis import strategies as st

from components.sim.blame import WaitLedger
from components.sim.engine import Engine
from components.sim.flows import Flow, FlowNetwork

RESOURCES = ("switch", "link0", "link1", "pmem0.ctrl0", "pmem0.ctrl1", "pmem1.ctrl0", "gpu")

spec = st.fixed_dictionaries(
    {
        "needs": st.dictionaries(
            st.sampled_from(RESOURCES), st.integers(1, 20_000), min_size=0, max_size=4
        ),
        "min_ticks": st.sampled_from([0, 0, 500, 3_000, 12_345]),
        "weight": st.sampled_from([1.0, 1.0, 2.0, 0.5]),
        "fence": st.sampled_from([0, 0, 800, 5_000]),
        "chains": st.integers(1, 6),
        "idle": st.booleans(),
        "drain": st.integers(0, 8_000),
        "owner": st.sampled_from([None, 1, 2, 3, 4, 5, 6, 7]),
        "start": st.integers(0, 20_000),
        "stop": st.sampled_from([None, None, None, 1, 2_000, 7_000]),
        "milestone": st.sampled_from([None, None, 0.25, 0.5, 0.999]),
    }
)


def build(specs: list[dict]) -> list[Flow]:
    flows = []
    for s in specs:
        needs = dict(s["needs"])
        alone = {r: v * 0.7 for r, v in needs.items()} if s["idle"] and needs else None
        bound = max(s["min_ticks"], s["fence"])
        flow = Flow(needs, min_ticks=bound, weight=s["weight"], owner=s["owner"])
        flow.alone_needs = alone
        flow.bytes = {r: 64.0 * v for r, v in needs.items()}
        if s["fence"]:
            flow.fence_ticks, flow.fence_chains = float(s["fence"]), s["chains"]
        if s["drain"] and needs:
            flow.then.append(Flow({next(iter(needs)): s["drain"]}, weight=2.0))
        flows.append(flow)
    return flows


def simulate(network_type, specs: list[dict]):
    engine = Engine()
    net = network_type(engine)
    flows = build(specs)
    seen: list[tuple[int, int, float]] = []

    def launch(i: int, flow: Flow, s: dict):
        yield engine.timeout(s["start"])
        done = net.start(flow)
        if s["milestone"] is not None:
            yield net.milestone(flow, s["milestone"])
            seen.append((i, engine.now, flow.rate))
        if s["stop"] is not None:
            yield engine.any_of([done, engine.timeout(s["stop"])])
            seen.append((i, engine.now, net.stop(flow)))
        yield done
        seen.append((i, engine.now, flow.rate))

    for i, (flow, s) in enumerate(zip(flows, specs, strict=True)):
        engine.process(launch(i, flow, s))
    engine.run()
    every = flows + [f for flow in flows for f in flow.then]
    results = [
        (f.start, f.end, f.done, f.rate, f.history, f.waited, list(f.waited_on.items()))
        for f in every
    ]
    use = {r: (u.busy, u.queueing, u.bytes, u.flows) for r, u in sorted(net.use.items())}
    return results, use, seen


def assert_same(specs: list[dict]) -> None:
    new, old = simulate(FlowNetwork, specs), simulate(ReferenceNetwork, specs)
    assert new[2] == old[2]  # milestones, stops, completions: same ticks, same order
    for mine, theirs in zip(new[0], old[0], strict=True):
        assert mine == theirs
    assert new[1] == old[1]


@settings(max_examples=150, deadline=None)
@given(st.lists(spec, min_size=1, max_size=30))
def test_random_flow_sets_give_the_same_floats_as_the_list_solver(specs):
    assert_same(specs)


def crowd(count: int = 200) -> list[dict]:
    """``count`` flows over the shared resources, most of them concurrent."""
    rng = np.random.default_rng(3)
    specs = []
    for _ in range(count):
        chosen = rng.choice(len(RESOURCES), size=int(rng.integers(1, 4)), replace=False)
        specs.append(
            {
                "needs": {RESOURCES[c]: int(rng.integers(1_000, 50_000)) for c in chosen},
                "min_ticks": int(rng.choice([0, 20_000])),
                "weight": float(rng.choice([1.0, 2.0])),
                "fence": int(rng.choice([0, 0, 15_000])),
                "chains": int(rng.integers(1, 5)),
                "idle": bool(rng.random() < 0.3),
                "drain": int(rng.choice([0, 4_000])),
                "owner": int(rng.integers(40)),
                "start": int(rng.integers(0, 30_000)),
                "stop": None if rng.random() < 0.9 else 10_000,
                "milestone": None if rng.random() < 0.8 else 0.5,
            }
        )
    return specs


def test_hundreds_of_concurrent_flows_give_the_same_floats():
    assert_same(crowd())


def test_the_comparison_catches_waited_on_keys_out_of_order(monkeypatch):
    """A mutant ledger that hands back its sums in column order, not the order the
    dicts gained their keys (sums equal, iteration order not) fails the comparison."""
    close = WaitLedger.close

    def by_column(self, row):
        out = close(self, row)
        return {owner: out[owner] for owner in sorted(out, key=str)}

    monkeypatch.setattr(WaitLedger, "close", by_column)
    with pytest.raises(AssertionError):
        assert_same(crowd(60))


def test_the_comparison_sees_a_one_ulp_difference():
    """The oracle comparison is exact: nudging one need by one ulp changes the results."""
    specs = [
        {
            "needs": {"switch": 3_000 + i, "link0": 1_000},
            "min_ticks": 0,
            "weight": 1.0,
            "fence": 0,
            "chains": 1,
            "idle": False,
            "drain": 0,
            "owner": i % 3,
            "start": 7 * i,
            "stop": None,
            "milestone": None,
        }
        for i in range(12)
    ]
    new = simulate(FlowNetwork, specs)
    specs[5]["needs"] = {"switch": np.nextafter(3_005.0, 4e3), "link0": 1_000}
    assert simulate(ReferenceNetwork, specs)[0] != new[0]
