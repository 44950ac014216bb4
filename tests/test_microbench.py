"""configs/microbench.py: runs from any cwd, writes results, rejects bad input cleanly."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "configs" / "microbench.py"


def _run(tmp_path, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--outdir", str(tmp_path / "out")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_pmem_read_figures(tmp_path):
    proc = _run(
        tmp_path, "--device", "pmem", "--op", "read", "--size", "256", "--requests", "20000"
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["latency_ns"] == pytest.approx(300)
    assert result["bandwidth_gbps"] == pytest.approx(4 * 11.52, rel=0.05)
    assert "pmem.ctrl0.bytesRead" in (tmp_path / "out" / "stats.txt").read_text()


def test_cxl_pmem_adds_the_link_round_trip(tmp_path):
    proc = _run(tmp_path, "--device", "cxl-pmem", "--op", "read", "--requests", "1000")
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert 370 <= result["latency_ns"] <= 390  # 300 ns + 70-90 ns (Pond ASPLOS'23)


@pytest.mark.parametrize(
    "args",
    [
        ("--device", "tape", "--op", "read"),
        ("--device", "pmem", "--op", "read", "--size", "-5B"),
        ("--device", "pmem", "--op", "read", "--outstanding", "0"),
        ("--device", "pmem", "--op", "read", "--controllers", "0"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
