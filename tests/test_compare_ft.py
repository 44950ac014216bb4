"""scripts/compare_ft.py end to end on a small model: every scheme is in the table, the
software policies' intervals follow their rules, and goodput is what the long run says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "compare_ft.py"


def test_the_comparison_covers_every_scheme_and_writes_its_plots(tmp_path):
    out = tmp_path / "ft"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--outdir", str(out), "--model", "rmc1",
         "--mtbf", "600,86400", "--days", "0.5", "--batches", "4"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line for line in (out / "REPORT.md").read_text().splitlines() if line.startswith("| ")]
    schemes = {row.split("|")[2].strip() for row in rows[1:]}
    assert schemes == {"pmem", "cxl-b", "cxl", "dram+cpr", "dram+cnr", "dram+cnr-8b", "dram+cnr-4b"}
    # longer MTBF: longer CPR interval (sqrt law), fewer failures
    cpr_rows = [r.split("|") for r in rows if "dram+cpr" in r]
    short, long = (int(r[3].replace(",", "")) for r in cpr_rows)
    assert long / short == pytest.approx((86400 / 600) ** 0.5, rel=0.02)
    assert (out / "goodput.png").stat().st_size > 0 and (out / "overhead.png").stat().st_size > 0


def test_bad_arguments_are_one_line(tmp_path):
    for args in (["--mtbf", "-1"], ["--mtbf", "x"], ["--days", "0"], ["--batches", "1"]):
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--outdir", str(tmp_path / "o"), *args],
            capture_output=True, text=True,
        )  # fmt: skip
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "compare_ft.py: error:" in lines[0]
