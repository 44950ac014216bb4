"""Fuzzing configs/trainingcxl.py's options and --set values in-process: every input
is either accepted or refused with one of the input errors the CLI prints as one line;
nothing else escapes (which would be a traceback), and accepted --set values run."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from simulate.run.cli import INPUT_ERRORS, error_line
from simulate.run.configure import prepare
from simulate.run.options import SYSTEMS, RunOptions, parse_run_options
from simulate.run.preflight import estimate_memory
from simulate.simulator import run_from_command_line, validate

UNITS = ["", "s", "ms", "us", "ns", "ps", "B", "KiB", "GB", "GiB", "B/s", "GB/s", "MiB/s"]
UNITS += ["Gbps", "W", "pJ", "J", "GHz", "MHz", "Hz", "TFLOPS", "GFLOPS", "XiB", "parsecs"]
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-0", "1e-30", "1e30", "1e308", "1e400", "nan", "inf", ".5", "5."]),
)
UNIT_VALUES = st.builds(lambda n, u: f"{n}{u}", NUMBERS, st.sampled_from(UNITS))
VALUES = st.one_of(UNIT_VALUES, NUMBERS, st.text(max_size=12))


def param_paths(system: str) -> list[str]:
    _, _, board = prepare(RunOptions(system=system))
    return sorted(board.param_paths())


PATHS = {system: param_paths(system) for system in SYSTEMS}


@st.composite
def argvs(draw) -> list[str]:
    system = draw(st.sampled_from(SYSTEMS))
    argv = ["--system", system]
    numeric = ["--batches", "--batch-size", "--seed", "--rows", "--fail-random"]
    for flag in draw(st.lists(st.sampled_from(numeric), max_size=3, unique=True)):
        argv += [flag, draw(st.one_of(NUMBERS, st.text(max_size=6)))]
    if draw(st.booleans()):
        argv += ["--model", draw(st.one_of(st.sampled_from(["rm1", "rmc2", "RM3"]), st.text()))]
    if draw(st.booleans()):
        argv += ["--outdir", draw(st.one_of(st.just(""), st.just(" "), st.just("out/x")))]
    if draw(st.booleans()):
        argv += ["--fail-at", draw(VALUES)]
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.one_of(st.sampled_from(PATHS[system]), st.text(max_size=20)))
        argv += ["--set", f"{path}={draw(VALUES)}"]
    return argv


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs())
def test_any_options_are_accepted_or_refused_with_one_line(tmp_path_factory, argv):
    workdir = tmp_path_factory.getbasetemp()
    try:
        options = parse_run_options(argv, "trainingcxl.py", "fuzz")
        options.outdir = (
            str(workdir / "never-written") if options.outdir == "m5out" else options.outdir
        )
        validate(options)
        estimate_memory(options)
    except INPUT_ERRORS as exc:
        line = error_line("trainingcxl.py", exc)
        assert "\n" not in line and len(line) < 2000


KIND_UNITS = {
    "latency": ["ns", "us", "ps", "s", "ms", ""],
    "bandwidth": ["B/s", "GB/s", "MiB/s", "Gbps", "TB/s"],
    "size": ["B", "KiB", "MiB", "GiB", ""],
    "power": ["W", "mW"],
    "energy": ["J", "pJ", "nJ"],
    "frequency": ["Hz", "MHz", "GHz"],
    "compute rate": ["FLOPS", "GFLOPS", "TFLOPS"],
}


def kinds(system: str) -> dict[str, object]:
    _, _, board = prepare(RunOptions(system=system))
    return {path: getattr(type(obj), key) for path, (obj, key) in board.param_paths().items()}


PARAMS = {system: kinds(system) for system in SYSTEMS}


def typed_value(param) -> st.SearchStrategy[str]:
    """Values of the parameter's own dimension: most reach the run."""
    numbers = st.one_of(NUMBERS, st.sampled_from(["0", "1", "3", "64", "1000", "0.5", "1e6"]))
    if param.kind in KIND_UNITS:
        return st.builds(lambda n, u: f"{n}{u}", numbers, st.sampled_from(KIND_UNITS[param.kind]))
    if param.kind == "boolean":
        return st.sampled_from(["true", "false", "1", "maybe"])
    if param.kind == "choice":
        return st.one_of(st.sampled_from(param.choices), st.text(max_size=5))
    return numbers


ONE_BATCH = (
    "trainingcxl.py: warning: fewer than 3 steady batches (1) stand behind p50 and p99; "
    "give more batches"
)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(system=st.sampled_from(SYSTEMS), data=st.data())
def test_accepted_set_values_run_or_stop_with_one_line(tmp_path_factory, system, data):
    """The whole CLI path (run_main) on a tiny run: exit 0, or 2 with one line."""
    path = data.draw(st.sampled_from(sorted(PARAMS[system])))
    value = data.draw(typed_value(PARAMS[system][path]))
    outdir = tmp_path_factory.mktemp("run") / "out"
    argv = ["--system", system, "--model", "rmc1", "--batch-size", "8", "--rows", "64"]
    argv += ["--batches", "1", "--no-progress", "--outdir", str(outdir), "--set", f"{path}={value}"]
    stderr, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        status = run_from_command_line(argv, "trainingcxl.py")
    lines = stderr.getvalue().splitlines()
    event("ran" if status == 0 else "refused")
    if status == 0:  # one batch: percentiles over it are flagged, nothing else is said
        assert lines == [ONE_BATCH] and np.isfinite(json.loads(
            (outdir / "results.json").read_text())["batch_time_ms"]["mean"])  # fmt: skip
    else:
        assert status == 2 and len(lines) == 1 and lines[0].startswith("trainingcxl.py: error:")
        assert not outdir.exists()
