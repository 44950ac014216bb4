"""The Python API refuses what --set refuses, accepts what it reads back, and speaks in
its own terms: argument names, not CLI flags."""

import pytest

from components.boards import BOARDS
from components.sim import units
from components.sim.params import ConfigError
from simulate.run.options import UsageError, parse_run_options
from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload


def test_a_misspelt_parameter_is_refused_with_a_suggestion():
    board = BOARDS["cxl"]()
    with pytest.raises(
        ConfigError, match=r"ctrl_write_bandwith.*did you mean ctrl_write_bandwidth"
    ):
        board.cxl_mem.pmem.ctrl_write_bandwith = "4GB/s"
    assert "ctrl_write_bandwith" not in vars(board.cxl_mem.pmem)


def test_a_link_width_no_link_has_is_refused_by_the_api_and_by_set():
    board = BOARDS["cxl"]()
    with pytest.raises(ConfigError, match="x1, x2, x4, x8 or x16"):
        board.cxl_mem.link.lanes = 3
    with pytest.raises(ConfigError, match="x1, x2, x4, x8 or x16"):
        Simulator("cxl", sets={"board.cxl_mem.link.lanes": 3})
    board.cxl_mem.link.lanes = 8
    assert board.cxl_mem.link.lanes == 8


@pytest.mark.parametrize("system", list(BOARDS))
def test_every_parameter_read_back_can_be_assigned_back(system):
    board = BOARDS[system]()
    for path, (owner, name) in board.param_paths().items():
        value = getattr(owner, name)
        setattr(owner, name, value)
        assert getattr(owner, name) == value, path


def test_numbers_are_taken_in_the_units_a_parameter_reads_back_in():
    board = BOARDS["cxl"]()
    pmem = board.cxl_mem.pmem
    pmem.ctrl_write_bandwidth = 4e9
    assert pmem.ctrl_write_bandwidth == 4e9
    pmem.ctrl_write_bandwidth = "4GB/s"
    assert pmem.ctrl_write_bandwidth == 4e9
    pmem.read_latency = 305_000  # ticks are picoseconds
    assert pmem.read_latency == units.parse_time("305ns")


def test_a_workload_may_be_a_preset_name():
    by_name = Simulator("cxl", workload="rm2", batches=2, outdir=None)
    by_object = Simulator("cxl", workload=DlrmWorkload("rm2"), batches=2, outdir=None)
    assert by_name.options == by_object.options
    with pytest.raises(UsageError, match="workload must be a DlrmWorkload"):
        Simulator("cxl", workload=2)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"batches": 0}, "batches must be at least 1"),
        ({"fail_at": ["soon"]}, "fail_at 'soon'"),
        ({"fail_device": 0, "cxl_mems": 2}, "fail_device names whose power fails"),
        ({"workload": DlrmWorkload(seed=-1)}, "workload's seed must be in"),
    ],
)
def test_api_errors_name_api_arguments_not_flags(arguments, named):
    with pytest.raises(UsageError) as raised:
        Simulator(**({"board": "cxl"} | arguments))
    assert named in str(raised.value) and "--" not in str(raised.value)


def test_an_in_memory_run_returns_the_stats_a_written_run_writes(tmp_path):
    import json

    kept = Simulator("cxl-b", batches=2, outdir=tmp_path, progress=False).run()
    memory = Simulator("cxl-b", batches=2, outdir=None, progress=False).run()
    written = json.loads((tmp_path / "stats.json").read_text())
    host = {"hostSeconds", "hostMemory"}
    assert {k: v for k, v in memory.pop("stats").items() if k not in host} == {
        k: v["value"] for k, v in written.items() if k not in host
    }
    assert memory == kept


def test_map_in_parallel_gives_what_running_one_by_one_gives():
    def simulators():
        return [Simulator(s, batches=2, outdir=None, progress=False) for s in ("cxl", "pmem")]

    one_by_one = [s.run() for s in simulators()]
    parallel = Simulator.map(simulators(), workers=2)
    for alone, mapped in zip(one_by_one, parallel, strict=True):
        host = {"hostSeconds", "hostMemory"}
        assert {k: v for k, v in alone.pop("stats").items() if k not in host} == {
            k: v for k, v in mapped.pop("stats").items() if k not in host
        }
        assert alone == mapped


def test_the_cli_still_refuses_flags_in_its_own_terms():
    with pytest.raises(UsageError, match="--batches must be at least 1"):
        parse_run_options(["--batches", "0"], "t", "")
