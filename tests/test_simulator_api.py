"""The Python API (simulate.simulator): a board built in a script runs exactly as the CLI
runs the same machine, a board object can be reused, bad boards are refused before any
simulation, and the example configs in configs/examples/ do what they say."""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from components.boards.cxl import CxlBoard
from components.memory.pmem import Pmem
from components.sim.engine import Engine
from components.sim.params import ConfigError
from components.sim.schedule import Scheduler
from simulate.run.configure import fresh_board
from simulate.run.options import UsageError
from simulate.simulator import Simulator
from workloads.models import UnknownModelError, get_model
from workloads.workload import DlrmWorkload

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "trainingcxl.py"
EXAMPLES = ROOT / "configs" / "examples"
SMALL = DlrmWorkload("rmc1", batch_size=32)
CLI_SMALL = ["--model", "rmc1", "--batch-size", "32"]
HOST_LINES = ("hostSeconds", "hostMemory")


def simulated(outdir: Path) -> list[str]:
    """stats.txt without the lines that measure the host."""
    lines = (outdir / "stats.txt").read_text().splitlines()
    return [line for line in lines if not line.startswith(HOST_LINES)]


def cli(outdir: Path, *args: str) -> Path:
    subprocess.run(
        [sys.executable, str(CONFIG), *args, "--outdir", str(outdir), "--no-progress"],
        check=True,
        capture_output=True,
    )
    return outdir


def run(board, outdir: Path, workload: DlrmWorkload = SMALL, batches: int = 3, **kw) -> dict:
    return Simulator(board, workload, batches, outdir, progress=False, **kw).run()


def test_a_board_object_gives_the_clis_stats(tmp_path):
    run(CxlBoard(), tmp_path / "api")
    cli(tmp_path / "cli", "--system", "cxl", *CLI_SMALL, "--batches", "3")
    assert simulated(tmp_path / "api") == simulated(tmp_path / "cli")
    api = json.loads((tmp_path / "api" / "results.json").read_text())
    assert api == json.loads((tmp_path / "cli" / "results.json").read_text())


def test_a_composed_board_equals_the_same_machine_set_by_path(tmp_path):
    """The Optane preset and a x8 link put in by composition, against the CLI given the
    measured PMEM model (--pmem optane) and the width with --set: the same machine, the
    same stats."""
    board = CxlBoard()
    board.cxl_mem.pmem = Pmem.optane()
    board.cxl_mem.link.lanes = 8
    run(board, tmp_path / "api")
    flags = ["--pmem", "optane", "--set", "board.cxl_mem.link.lanes=8"]
    cli(tmp_path / "cli", "--system", "cxl", *CLI_SMALL, "--batches", "3", *flags)
    assert simulated(tmp_path / "api") == simulated(tmp_path / "cli")
    default = cli(tmp_path / "default", "--system", "cxl", *CLI_SMALL, "--batches", "3")
    assert simulated(tmp_path / "api") != simulated(default)  # the parts did change


def test_a_model_spec_built_in_python_runs_as_its_preset(tmp_path):
    renamed = replace(get_model("rmc1"), name="my_rmc1")
    run("cxl-b", tmp_path / "api", DlrmWorkload(renamed, batch_size=32))
    cli(tmp_path / "cli", "--system", "cxl-b", *CLI_SMALL, "--batches", "3")
    assert simulated(tmp_path / "api") == simulated(tmp_path / "cli")
    options = json.loads((tmp_path / "api" / "config.json").read_text())["options"]
    assert options["model"] == "my_rmc1" and options["model_spec"]["name"] == "my_rmc1"


def test_a_board_is_copied_so_it_can_be_reused_and_changed(tmp_path):
    board = CxlBoard()
    simulator = Simulator(board, SMALL, 2, tmp_path / "first", progress=False)
    board.cxl_mem.pmem.read_latency = "900ns"  # after construction: not this run's
    simulator.run()
    again = simulator.run()  # a second run of the same simulator starts afresh
    cli(tmp_path / "cli", "--system", "cxl", *CLI_SMALL, "--batches", "2")
    assert simulated(tmp_path / "first") == simulated(tmp_path / "cli")
    assert again == json.loads((tmp_path / "cli" / "results.json").read_text())
    assert "engine" not in vars(board)  # the object itself was never connected


def test_a_copied_boards_formulas_read_the_copy():
    board = CxlBoard()
    clone = copy.deepcopy(board)
    clone.uniqueRows.sample(10)
    clone.reusedRows.sample(4)
    assert clone.reuseFraction.value == pytest.approx(0.4)
    assert board.reuseFraction.value == 0
    assert clone.cxl_mem.pmem.path == "board.cxl_mem.pmem"


class _Foreign(CxlBoard):
    system = "mine"


@pytest.mark.parametrize(
    ("board", "kwargs", "error", "words"),
    [
        ("cxl-x", {}, UsageError, "unknown system 'cxl-x'"),
        (object(), {}, UsageError, "must be a TrainingBoard"),
        (_Foreign(), {}, UsageError, "names no system's checkpoint protocol"),
        ("cxl", {"sets": {"board.cxl_mem.pmem.read_latnecy": "1ns"}}, ConfigError, "did you"),
        ("cxl", {"sets": ["board.cxl_mem.pmem.read_latency=-1ns"]}, ConfigError, "read_lat"),
        ("cxl", {"batches": 0}, UsageError, "^batches must be at least 1"),
        ("cxl", {"fail_at": ["soon"]}, UsageError, "^fail_at 'soon'"),
        ("cxl", {"workload": DlrmWorkload("rm9")}, UnknownModelError, "rm9"),
        ("cxl", {"workload": DlrmWorkload("rmc1", seed=-1)}, UsageError, "^workload's seed"),
    ],
)
def test_bad_boards_and_options_are_refused_at_construction(tmp_path, board, kwargs, error, words):
    kwargs = {"workload": SMALL, "outdir": tmp_path / "out", **kwargs}
    with pytest.raises(error, match=words):
        Simulator(board, **kwargs)
    assert not (tmp_path / "out").exists()


def test_a_connected_board_is_refused(tmp_path):
    simulator = Simulator(CxlBoard(), SMALL, 1, tmp_path / "a", progress=False)
    connected = fresh_board(simulator.options)
    engine = Engine()
    connected.connect(engine, Scheduler(engine), SMALL.spec, 32)
    with pytest.raises(UsageError, match="already connected"):
        Simulator(connected, SMALL, 1, tmp_path / "b")


def _example(tmp_path: Path, name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args, "--outdir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_example_optane_x8_link_builds_what_it_says(tmp_path):
    out = _example(tmp_path, "optane_x8_link.py", "--model", "rmc1", "--batches", "3")
    assert len(out.splitlines()) == 2 and all("ms/batch" in line for line in out.splitlines())
    board = json.loads((tmp_path / "optane-x8" / "config.json").read_text())["board"]
    pmem = board["cxl_mem"]["pmem"]["params"]
    assert pmem["read_latency"]["given"] == "305ns" and pmem["write_latency"]["given"] == "90ns"
    assert board["cxl_mem"]["link"]["params"]["lanes"]["value"] == 8
    default = json.loads((tmp_path / "default" / "config.json").read_text())["board"]
    assert default["cxl_mem"]["link"]["params"]["lanes"]["value"] == 16


def _ops(outdir: Path) -> list[dict]:
    with open(outdir / "timeline.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _logs_end_before_next_batch(ops: list[dict]) -> list[bool]:
    """Per batch N (but the last): whether both undo logs of N ended before any op of
    batch N+1 started."""
    batches = sorted({int(op["batch"]) for op in ops})
    verdicts = []
    for n in batches[:-1]:
        logs = [float(op["end_ms"]) for op in ops if int(op["batch"]) == n and "log" in op["op"]]
        assert len(logs) == 2
        starts = [float(op["start_ms"]) for op in ops if int(op["batch"]) == n + 1]
        verdicts.append(max(logs) <= min(starts))
    return verdicts


def _gated(outdir: Path) -> int:
    stats = (outdir / "stats.txt").read_text().splitlines()
    return int(next(line.split()[1] for line in stats if ".nmp.gatedSegments " in line))


def test_example_synchronous_undo_log_orders_each_batch_after_its_logs(tmp_path):
    """The custom policy's logs end before the next batch starts; CXL-B's own do not
    (else the check could not tell the policies apart). Waiting keeps the next batch's
    gather off the update's draining rows: CXL-B's in-order gather waits for them, the
    policy's never. On RM1, whose MLP log is long, the wait costs time."""
    _example(tmp_path, "synchronous_undo_log.py", "--model", "rmc1", "--batches", "4")
    assert all(_logs_end_before_next_batch(_ops(tmp_path / "synchronous")))
    assert not all(_logs_end_before_next_batch(_ops(tmp_path / "cxl-b")))
    assert _gated(tmp_path / "cxl-b") > 0 == _gated(tmp_path / "synchronous")
    rm1 = tmp_path / "rm1"
    out = _example(rm1, "synchronous_undo_log.py", "--model", "rm1", "--batches", "3")
    background, waited = (float(line.split(": ")[1].split()[0]) for line in out.splitlines())
    assert waited > background


def test_a_custom_policy_board_survives_power_failures(tmp_path):
    """Failure runs copy the board too, and judge it by its system's protocol."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        from synchronous_undo_log import SynchronousUndoBoard
    finally:
        sys.path.pop(0)
    tiny = DlrmWorkload("rmc1", batch_size=8, rows=64)
    results = run(
        SynchronousUndoBoard(), tmp_path / "fail", tiny, 4, functional=True, fail_random=2
    )
    failures = results["failure"] if isinstance(results["failure"], list) else [results["failure"]]
    assert failures and all(f["verdict"] == "exact" and f["final_model_exact"] for f in failures)
    config = json.loads((tmp_path / "fail" / "config.json").read_text())["options"]
    assert config["board_class"].endswith("SynchronousUndoBoard")


def test_the_readme_example_runs(tmp_path, monkeypatch, capsys):
    """README's Python API block, as a reader would paste it: what it prints is what it
    returns, and the board it composed is the one that ran."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    exec(compile(block, "README.md", "exec"), names)
    mean, sim_seconds = map(float, capsys.readouterr().out.split())
    results = names["results"]
    assert mean == results["batch_time_ms"]["mean"] > 0
    assert sim_seconds == results["stats"]["simSeconds"]
    assert sim_seconds * 1000 >= sum(results["batch_times_ms"])  # and background work after
    assert len(names["means"]) == 2 and not list(tmp_path.iterdir())  # nothing on disk
