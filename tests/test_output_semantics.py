"""What the outputs mean: one name per stat, one batch_time_ms schema, energy per steady
batch, a warning behind thin percentiles, the timeline's unit column, every --set path."""

import csv
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from components.boards import BOARDS
from simulate.simulator import Simulator
from workloads.workload import DlrmWorkload

ROOT = Path(__file__).resolve().parents[1]
SMALL = DlrmWorkload("rmc1", batch_size=64)


@pytest.mark.parametrize(
    "arguments",
    [{"board": "cxl"}, {"board": "pmem"}, {"board": "cxl-d"}, {"board": "cxl", "gpus": 2,
                                                               "cxl_mems": 2}],
)  # fmt: skip
def test_every_stat_name_is_written_once(tmp_path, arguments):
    Simulator(**arguments, workload=SMALL, batches=2, outdir=tmp_path, progress=False).run()
    lines = (tmp_path / "stats.txt").read_text().splitlines()
    names = [line.split()[0] for line in lines if line[:1].isalpha()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    gpus = {n.rsplit(".", 1)[0] for n in names if ".gpu" in n and n.endswith(".busyTicks")}
    assert gpus and all(f"{gpu}.servedTicks" in names for gpu in gpus)  # each, distinct


def test_energy_per_steady_batch_is_what_more_batches_cost(tmp_path):
    """The marginal energy of six more steady batches, from two runs, against the
    figure one run reports: static power is paid by time, dynamic energy by work."""
    short, long = (
        Simulator("cxl", workload=SMALL, batches=n, outdir=None, progress=False).run()
        for n in (6, 12)
    )
    marginal = (long["energy_j"]["total"] - short["energy_j"]["total"]) / 6
    assert long["energy_j"]["per_steady_batch"] == pytest.approx(marginal, rel=0.03)
    assert short["energy_j"]["per_steady_batch"] < short["energy_j"]["total"] / 6 * 1.5


def test_full_and_sampled_runs_share_the_batch_time_schema_and_its_interval(tmp_path):
    full = Simulator("cxl", workload=SMALL, batches=8, outdir=None, progress=False).run()
    sampled = Simulator(
        "cxl", workload=SMALL, batches=40, outdir=None, progress=False, sample="8"
    ).run()
    assert set(full["batch_time_ms"]) == set(sampled["batch_time_ms"])
    steady = full["batch_times_ms"][1:-1]
    assert full["batch_time_ms"]["batches"] == len(steady) == 6
    half = 2.571 * statistics.stdev(steady) / math.sqrt(6)  # t(0.975, 5 dof)
    assert full["batch_time_ms"]["ci95_ms"] == pytest.approx(half, abs=2e-6)
    assert full["batch_time_ms"]["mean"] == pytest.approx(statistics.mean(steady), abs=2e-6)
    assert full["batch_time_ms"]["p50"] == pytest.approx(statistics.median(steady), abs=2e-6)
    assert sampled["batch_time_ms"]["batches"] == sampled["sampling"]["sampled_units"]


@pytest.mark.parametrize(("batches", "warned"), [(2, True), (4, True), (5, False)])
def test_percentiles_over_fewer_than_three_steady_batches_are_flagged(tmp_path, batches, warned):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "configs" / "trainingcxl.py"), "--model", "rmc1",
         "--batch-size", "64", "--batches", str(batches), "--outdir", str(tmp_path),
         "--no-progress"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    steady = max(batches - 2, 1) if batches != 2 else 1
    assert ("stand behind p50 and p99" in proc.stderr) == warned, proc.stderr
    if warned:
        assert f"warning: fewer than 3 steady batches ({steady}) stand" in proc.stderr
    with open(tmp_path / "timeline.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[0] == "unit" and {"gpu", "cxl_mem.nmp"} <= {r["unit"] for r in rows}


def test_list_params_prints_every_set_path_with_value_unit_and_source():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "configs" / "trainingcxl.py"), "--list-params", "--system",
         "cxl-b", "--set", "board.cxl_mem.pmem.ctrl_write_bandwidth=4GB/s"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()[1:]
    board = BOARDS["cxl-b"]()
    assert [line.split()[0] for line in lines] == list(board.param_paths())
    (write,) = [line.split() for line in lines if "ctrl_write_bandwidth" in line]
    assert write[1:3] == ["4GB/s", "B/s"] and "Table 2" in " ".join(write[3:])
