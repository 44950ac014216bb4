"""configs/trainingcxl.py as a user runs it: outputs, determinism, one-line errors."""

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "trainingcxl.py"
GEM5_ROW = re.compile(r"^(\S+)\s+(-?[\d.]+|nan)\s+# (.*) \((\S+)\)$")


def run(args, cwd):
    return subprocess.run(
        [sys.executable, str(CONFIG), *args, "--no-progress"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def parse_stats(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    assert lines[1] == "---------- Begin Simulation Statistics ----------"
    assert "---------- End Simulation Statistics   ----------" in lines
    stats = {}
    for line in lines:
        if line and not line.startswith("-"):
            match = GEM5_ROW.match(line)
            assert match, line
            stats[match.group(1)] = match.group(2)
    return stats


def test_outputs_from_any_working_directory(tmp_path):
    out = tmp_path / "out"
    proc = run(
        ["--system", "cxl-d", "--model", "rm3", "--batches", "2", "--outdir", str(out)],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("stats.txt", "stats.json", "config.json", "results.json", "timeline.csv"):
        assert (out / name).is_file()
    stats = parse_stats(out / "stats.txt")
    results = json.loads((out / "results.json").read_text())
    assert int(stats["simTicks"]) > 0
    assert float(stats["simSeconds"]) == pytest.approx(int(stats["simTicks"]) / 1e12, rel=1e-5)
    assert int(stats["board.cxl_mem.pmem.ctrl0.bytesRead"]) > 0
    assert int(stats["board.lookupsPerBatch"]) == 128 * 20 * 20  # rm3: 20 tables x 20 lookups
    reuse = float(stats["board.reusedRows"]) / float(stats["board.uniqueRows"])
    assert 0 < float(stats["board.reuseFraction"]) == pytest.approx(reuse, rel=1e-5)
    assert set(results["breakdown_ms"]) == {
        "embedding",
        "transfer",
        "bottom_mlp",
        "top_mlp",
        "checkpoint",
        "contention",
    }
    # the categories and the idle time along the critical path make up the batch
    total = sum(results["breakdown_ms"].values()) + results["idle_ms"]
    assert total == pytest.approx(results["batch_time_ms"]["mean"], rel=1e-4)
    assert results["breakdown_ms"]["contention"] == pytest.approx(
        sum(results["contention_by_ms"].values()), rel=1e-3, abs=1e-6
    )
    assert float(stats["board.cxl_mem.pmem.ctrl0.utilisation"]) > 0
    with open(out / "timeline.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    update = next(r for r in rows if r["op"] == "update" and r["batch"] == "1")
    assert "board.cxl_mem.pmem" in update["uses"].split(";")
    assert all(float(r["wait_ms"]) <= float(r["end_ms"]) - float(r["start_ms"]) for r in rows)
    assert results["system"] == "cxl-d" and results["model"] == "rm3"
    assert results["failure"] is None
    config = json.loads((out / "config.json").read_text())
    pmem = config["board"]["cxl_mem"]["pmem"]["params"]["read_latency"]
    assert pmem["unit"] == "tick" and pmem["source"]


def test_same_seed_gives_byte_identical_outputs(tmp_path):
    args = ["--system", "cxl", "--model", "rm1", "--batches", "3", "--seed", "7"]
    for name in ("a", "b"):
        assert run([*args, "--outdir", str(tmp_path / name)], cwd=tmp_path).returncode == 0

    def stable(path):
        return [
            line
            for line in path.read_text().splitlines()
            if not line.startswith(("hostSeconds", "hostMemory"))
        ]

    assert stable(tmp_path / "a" / "stats.txt") == stable(tmp_path / "b" / "stats.txt")
    for name in ("results.json", "timeline.csv", "config.json"):
        a = (tmp_path / "a" / name).read_bytes()
        b = (tmp_path / "b" / name).read_bytes()
        if name == "config.json":
            a = a.replace(str(tmp_path / "a").encode(), str(tmp_path / "b").encode())
        assert a == b, name


def test_set_overrides_change_the_run(tmp_path):
    base = ["--system", "cxl-d", "--model", "rm3", "--batches", "2"]
    slow = run(
        [*base, "--outdir", str(tmp_path / "slow"), "--set", "board.cxl_mem.pmem.read_latency=3us"],
        cwd=tmp_path,
    )
    fast = run([*base, "--outdir", str(tmp_path / "fast")], cwd=tmp_path)
    assert slow.returncode == fast.returncode == 0
    t_slow = json.loads((tmp_path / "slow" / "results.json").read_text())["batch_time_ms"]["mean"]
    t_fast = json.loads((tmp_path / "fast" / "results.json").read_text())["batch_time_ms"]["mean"]
    assert t_slow > t_fast


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--system", "tpu"], "invalid choice: 'tpu'"),
        (["--model", "rm9"], "unknown model 'rm9'"),
        (
            ["--set", "board.cxl_mem.pmem.read_latncy=1ns"],
            "did you mean board.cxl_mem.pmem.read_latency",
        ),
        (["--set", "board.cxl_mem.pmem.read_latency=-3ns"], "must not be negative"),
        (["--set", "board.cxl_mem.pmem.read_latency=fast"], "malformed"),
        (["--set", "board.cxl_mem.pmem.read_latency"], "PATH=VALUE"),
        (["--batches", "0"], "--batches must be at least 1"),
        (["--batch-size", "x"], "invalid int value"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, needle):
    proc = run(
        [*args, "--batches", "1", "--outdir", str(tmp_path / "o")]
        if "--batches" not in args
        else [*args, "--outdir", str(tmp_path / "o")],
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize("batches", [1, 2, 3, 5])
def test_the_steady_state_leaves_out_the_first_and_last_batches(tmp_path, batches):
    """Batch 0 warms up and the last batch's background work has no next batch beside
    it: the mean, percentiles and breakdown cover the batches between them."""
    out = tmp_path / "out"
    args = ["--system", "cxl", "--model", "rmc1", "--batch-size", "32"]
    subprocess.run(
        [sys.executable, str(CONFIG), *args, "--batches", str(batches), "--outdir", str(out)],
        check=True,
        capture_output=True,
    )
    results = json.loads((out / "results.json").read_text())
    windows = results["batch_times_ms"]
    first, last = {1: (0, 0), 2: (1, 1)}.get(batches, (1, batches - 2))
    assert (results["steady_state_from_batch"], results["steady_state_to_batch"]) == (first, last)
    mean = float(np.mean(windows[first : last + 1]))
    assert results["batch_time_ms"]["mean"] == pytest.approx(mean, abs=2e-6)
    parts = sum(results["breakdown_ms"].values()) + results["idle_ms"]
    assert parts == pytest.approx(mean, rel=1e-4)
