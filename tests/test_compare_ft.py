"""scripts/compare_ft.py end to end on a small model: every scheme is in the table, the
software policies' intervals follow their rules, and goodput is what the long run says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from components.persistence.image import RECORD_HEADER
from simulate.failures.costs import log_bytes_per_batch
from simulate.run.configure import input_generator
from simulate.run.options import RunOptions
from workloads.models import get_model
from workloads.opgraph import build_demand

ROOT = Path(__file__).resolve().parents[1]
SOFTWARE = ("cpr", "cnr", "cnr-8b", "cnr-4b")
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
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in rows[1:]]
    software = {f"{m}+{p}" for m in ("pmem", "cxl-d", "ssd", "dram") for p in SOFTWARE}
    assert {c[2] for c in cells} == {"pmem", "cxl-b", "cxl"} | software
    assert "cpr-mfu" not in (out / "REPORT.md").read_text()  # no --shares: no chain rows
    # the same-memory rows lead: every PMEM row (protocols and policies) before any other
    groups = [c[0] for c in cells]
    assert groups[: groups.count(groups[0])] == [groups[0]] * groups.count(groups[0])
    assert "PMEM" in groups[0] and {c[2] for c in cells if c[0] == groups[0]} >= {
        "cxl", "pmem+cpr", "pmem+cnr", "cxl-d+cpr", "cxl-d+cnr"
    }  # fmt: skip
    # each row states its hardware: the same PMEM modules on both sides of the comparison
    hardware = {c[2]: c[3] for c in cells}
    assert hardware["cxl"].startswith("CXL-MEM Pmem") and hardware["pmem+cpr"].startswith(
        "host Pmem"
    )
    assert hardware["cxl"].split(",")[0][len("CXL-MEM") :] == hardware["pmem+cpr"].split(",")[0][4:]
    assert "store" in hardware["pmem+cpr"] and "store" not in hardware["cxl"]
    assert hardware["cxl-d+cpr"] == hardware["cxl"] + "; store 0.384 GB/s"
    # longer MTBF: longer CPR interval (sqrt law), fewer failures
    cpr_rows = [c for c in cells if c[2] == "dram+cpr"]
    short, long = (int(r[4].replace(",", "")) for r in cpr_rows)
    assert long / short == pytest.approx((86400 / 600) ** 0.5, rel=0.02)
    assert (out / "goodput.png").stat().st_size > 0 and (out / "overhead.png").stat().st_size > 0
    header = rows[0].split("|")
    assert "energy per sample (mJ)" in header[-2] and "hardware" in header[4]
    assert all(float(r.split("|")[-2]) > 0 for r in rows[1:])


def table(text: str, header: str) -> list[list[str]]:
    """The cells of the rows of the table whose header starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([c.strip() for c in line.split("|")[1:-1]])
    return rows


def test_shares_add_prioritised_cpr_rows_that_save_less(tmp_path):
    """--shares: a CPR-MFU and a CPR-SSU row beside each CPR row; the chain saves fewer
    bytes per checkpoint than a full one, so its time overhead (save + load + rerun)
    is below full-checkpoint CPR's at the same MTBF on the same memory."""
    out = tmp_path / "ft"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--outdir", str(out), "--model", "rmc1",
         "--mtbf", "600,86400", "--days", "0.5", "--batches", "4", "--memories", "dram",
         "--shares", "0.125"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (out / "REPORT.md").read_text()
    names = [c[2] for c in table(text, "| tables in | MTBF (h) | scheme | hardware")]
    assert names[:4] == ["dram+cpr", "dram+cpr-mfu 0.125", "dram+cpr-ssu 0.125", "dram+cnr"]
    assert len(names) == 12  # two MTBFs: cpr, mfu, ssu and three Check-N-Run rows
    rows = table(text, "| tables in | MTBF (h) | scheme | interval")
    assert len(rows) == 6
    for mtbf in ("0.166667", "24"):
        full, mfu, ssu = (r for r in rows if r[1] == mtbf)
        assert full[2] == "dram+cpr" and "chain" in mfu[4] and "chain" in ssu[4]
        for chain in (mfu, ssu):
            assert float(chain[5].rstrip("%")) < float(full[5].rstrip("%"))
            assert int(chain[3].replace(",", "")) < int(full[3].replace(",", ""))
    # MFU's chosen rows hold most lookups: it gives up fewer samples than SSU at 10 min
    short = [r for r in rows if r[1] == "0.166667"]
    assert float(short[1][6].rstrip("%")) < float(short[2][6].rstrip("%"))


def test_bad_arguments_are_one_line(tmp_path):
    bad = (["--mtbf", "-1"], ["--mtbf", "x"], ["--days", "0"], ["--batches", "1"],
           ["--memories", "cxl"], ["--memories", ","], ["--shares", "1"], ["--shares", "0"],
           ["--shares", "x"], ["--shares", "0.1,,0.2"])  # fmt: skip
    for args in bad:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--outdir", str(tmp_path / "o"), *args],
            capture_output=True, text=True,
        )  # fmt: skip
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "compare_ft.py: error:" in lines[0]


def test_the_paper_protocols_log_bytes_per_batch_are_their_records():
    """PMEM's redo log of a batch: an entry per unique row (its id and values), the
    MLPs, the two records' headers and the commit flag word."""
    options = RunOptions(system="pmem", model="rmc1", batch_size=64, progress=False)
    spec = get_model("rmc1")
    generator, previous, unique = input_generator(options, spec, 64), None, []
    for n in range(3):
        batch = generator.batch(n)
        unique.append(len(build_demand(spec, batch, n, previous).lookup.unique_rows))
        previous = batch
    entry = 8 + spec.embedding_dim * 4
    expected = np.mean(unique) * entry + spec.mlp_param_count * 4 + 2 * RECORD_HEADER + 8
    assert log_bytes_per_batch(options, 3) == pytest.approx(expected)
