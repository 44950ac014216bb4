"""compare.py lists exactly the stats that differ, and only those, between real runs."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from simulate.simulator import Simulator
from simulate.sweeps import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

WRITE = "board.cxl_mem.pmem.ctrl_write_bandwidth"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of one simulation, and a third with a slower PMEM write bandwidth."""
    root = tmp_path_factory.mktemp("runs")
    for name, sets in (("a", {}), ("b", {}), ("slow", {WRITE: "1GB/s"})):
        Simulator("cxl", batches=3, outdir=root / name, sets=sets, progress=False).run()
    return root


def test_two_runs_of_one_simulation_differ_in_no_stat(runs):
    sections = {s.title: s.rows for s in compare.compare([runs / "a", runs / "b"])}
    assert sections["stats"] == [] and sections["parameters"] == []
    hosts = json.loads((runs / "a" / "stats.json").read_text())["hostSeconds"]
    assert hosts is not None  # the host's stats exist, and differ, but are not simulated


def test_exactly_the_changed_stats_are_listed(runs, tmp_path):
    changed = tmp_path / "changed"
    shutil.copytree(runs / "a", changed)
    stats = json.loads((changed / "stats.json").read_text())
    names = [name for name in stats if name.startswith("board.")]
    first, second, gone = names[3], names[len(names) // 2], names[-1]
    stats[first]["value"] += 1
    stats[second]["value"] = stats[second]["value"] * 2 + 1
    del stats[gone]
    (changed / "stats.json").write_text(json.dumps(stats))
    (section,) = [s for s in compare.compare([runs / "a", changed]) if s.title == "stats"]
    assert [name for name, _ in section.rows] == [first, second, gone]
    assert section.rows[2][1][1] is None


def test_a_parameter_change_shows_in_parameters_results_and_stats(runs, capsys):
    import compare as compare_script

    assert compare_script.main([str(runs / "a"), str(runs / "slow")]) == 0
    sections = {s.title: s.rows for s in compare.compare([runs / "a", runs / "slow"])}
    assert [name for name, _ in sections["parameters"]] == [f"{WRITE} (B/s)"]
    (mean,) = [values for name, values in sections["results"] if name == "batch_time_ms.mean"]
    assert mean[1] > mean[0]  # half the default write bandwidth cannot be faster
    assert any(name.startswith("board.cxl_mem.pmem") for name, _ in sections["stats"])
    printed = capsys.readouterr().out
    assert f"  {WRITE} (B/s)  " in printed and "batch_time_ms.mean" in printed and "%" in printed


def test_fewer_than_two_runs_is_one_error_line(runs, capsys):
    import compare as compare_script

    assert compare_script.main([str(runs / "a")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
