"""The compiled filling and accounting (components/sim/flow_kernels.py) give what
flows.py's numpy definitions give: random flow sets run through the solver both ways
and every result is the same float (end ticks, histories, rates, waited, waited_on in
key order, every resource's use). Without numba both ways are the numpy path and these
tests are skipped; tests/test_flows_scale.py holds either against the list solver."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_flows_scale import crowd, simulate, spec

from components.sim import flow_kernels
from components.sim.flows import FlowNetwork

pytestmark = pytest.mark.skipif(not flow_kernels.COMPILED, reason="numba not installed")


def both_ways(specs: list[dict]) -> tuple:
    compiled = simulate(FlowNetwork, specs)
    flow_kernels.COMPILED = False
    try:
        return compiled, simulate(FlowNetwork, specs)
    finally:
        flow_kernels.COMPILED = True


@settings(max_examples=150, deadline=None)
@given(st.lists(spec, min_size=1, max_size=30))
def test_random_flow_sets_give_the_same_floats_both_ways(specs):
    compiled, numpy = both_ways(specs)
    assert compiled == numpy


def test_hundreds_of_concurrent_flows_give_the_same_floats_both_ways():
    compiled, numpy = both_ways(crowd())
    assert compiled == numpy
    assert any(waited_on for *_, waited_on in compiled[0])  # contention was split


def test_the_comparison_catches_sharers_visited_in_another_order(monkeypatch):
    """A kernel that visits each bottleneck's sharers in reverse order (the same sums
    in exact arithmetic, added the other way round) fails the comparison."""
    advance = flow_kernels.advance

    def reversed_members(*args):
        args = list(args)
        by_resource, first = args[11].copy(), args[12]
        for r in range(first.size - 1):
            by_resource[first[r] : first[r + 1]] = by_resource[first[r] : first[r + 1]][::-1]
        args[11] = by_resource
        return advance(*args)

    monkeypatch.setattr(flow_kernels, "advance", reversed_members)
    compiled = simulate(FlowNetwork, crowd(60))
    monkeypatch.setattr(flow_kernels, "COMPILED", False)
    assert compiled != simulate(FlowNetwork, crowd(60))
