"""scripts/optane_sweeps.py: the published points it reads, the ratio and role of each,
the summary's band count, and bad input as one line."""

import subprocess
import sys
from pathlib import Path

import pytest

from scripts import optane_sweeps

ROOT = Path(__file__).resolve().parent.parent


def test_the_points_are_the_published_sweeps():
    points = optane_sweeps.load_points()
    assert {(p["dimms"], p["op"], p["size"]) for p in points} == {
        (d, op, size) for d in (1, 6) for op in ("read", "write") for size in (256, 4096)
    }
    # spot values of NVSL/OptaneStudy data/bandwidth.csv (medians of the repeats)
    by_key = {(p["dimms"], p["op"], p["size"], p["threads"]): p for p in points}
    assert by_key[6, "read", 256, 24]["measured_gbps"] == pytest.approx(37.3, abs=0.1)
    assert by_key[1, "write", 256, 24]["measured_gbps"] == pytest.approx(0.61, abs=0.01)


def test_each_point_gets_its_ratio_role_and_command():
    points = [
        {"dimms": 1, "op": "read", "size": 256, "threads": 4, "measured_gbps": 6.6},
        {"dimms": 6, "op": "write", "size": 4096, "threads": 24, "measured_gbps": 6.48},
    ]
    seen = []

    def runner(command, output):
        seen.append(command)
        return {"total_bandwidth_gbps": 6.6 if "read" in command else 4.0}

    results = optane_sweeps.simulate(points, runner)
    assert [r["role"] for r in results] == ["calibration", "validation"]
    assert [r["ratio"] for r in results] == [1.0, round(4.0 / 6.48, 3)]
    assert seen[1][seen[1].index("--threads") + 1] == "24"
    assert seen[1][seen[1].index("--controllers") + 1] == "6"
    lines = optane_sweeps.summary(results)
    assert lines[0].startswith("1 DIMM read 256 B: 1/1 within 15%")
    assert lines[1].startswith("6 DIMMs write 4096 B: 0/1 within 15%, worst 0.62x")


def test_an_outdir_that_is_a_file_is_one_line(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "optane_sweeps.py"), "--outdir", str(target)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "not a directory" in proc.stderr
