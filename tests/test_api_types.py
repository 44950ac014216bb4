"""The Python API refuses wrong-typed arguments at construction, naming the argument in
its own terms (simulate/arguments.py): a bool where a count belongs, a string of
failure times, a number where a path belongs. Values of the right kind are not refused
by the type check."""

from __future__ import annotations

import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulate.arguments import KINDS, WORKLOAD_KINDS, check_arguments
from simulate.run.options import UsageError
from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload

RIGHT = {
    "int": st.integers(1, 4),
    "bool": st.booleans(),
    "str": st.sampled_from(["paper", "table", "none"]),
    "number": st.floats(1.0, 1e6),
    "path": st.sampled_from(["out", pathlib.Path("out")]),
    "times": st.lists(st.sampled_from(["1ms", "2us", 5]), max_size=2),
    "sets": st.sampled_from([{}, ["board.gpu.peak_flops=30TFLOPS"]]),
}
WRONG = {
    "int": st.sampled_from([True, "4", 2.5, None, [1]]),
    "bool": st.sampled_from(["yes", 1, 0.0, None]),
    "str": st.sampled_from([3, b"x", True, ["a"]]),
    "number": st.sampled_from(["1h", True, [1.0]]),
    "path": st.sampled_from([5, 2.5, True, ["out"]]),
    "times": st.sampled_from(["3ms", [True], [2.5], 3, {"a": 1}]),
    "sets": st.sampled_from(["board.x=1", [3], {3: "x"}, 5]),
}


def _kind(spec: str) -> str:
    return spec.rstrip("?")


@settings(max_examples=200)
@given(st.sampled_from(sorted(KINDS)), st.data())
def test_a_wrong_kind_is_refused_naming_the_argument(name, data):
    value = data.draw(WRONG[_kind(KINDS[name])])
    if value is None and KINDS[name].endswith("?"):
        return
    with pytest.raises(UsageError, match=rf"^{name} must be "):
        Simulator("cxl", "rmc1", **{name: value})


@settings(max_examples=200)
@given(st.data())
def test_values_of_the_right_kinds_pass_the_check(data):
    values = {name: data.draw(RIGHT[_kind(kind)]) for name, kind in KINDS.items()}
    check_arguments(values, KINDS)
    workload = {name: data.draw(RIGHT[_kind(kind)]) for name, kind in WORKLOAD_KINDS.items()}
    check_arguments(workload, WORKLOAD_KINDS, "workload's ")


@pytest.mark.parametrize(
    ("field", "value"), [("seed", "1"), ("batch_size", True), ("reuse", "0.5"), ("trace", 3)]
)
def test_a_workload_field_of_the_wrong_kind_is_named_as_the_workloads(field, value):
    with pytest.raises(UsageError, match=rf"^workload's {field} must be "):
        Simulator("cxl", DlrmWorkload("rmc1", **{field: value}))


def test_every_argument_of_the_simulator_has_a_kind():
    """A new argument without a kind would skip the check: the table must cover them."""
    import inspect

    names = set(inspect.signature(Simulator).parameters) - {"board", "workload"}
    assert names == set(KINDS)
