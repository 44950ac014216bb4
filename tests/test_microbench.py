"""configs/microbench.py: runs from any cwd, writes results, rejects bad input cleanly."""

import json
import os
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


def test_a_read_write_mix_shares_the_media_time(tmp_path):
    """Reads and writes of equal bytes on one module: together they take the sum of
    their media times, so the total bandwidth is the harmonic mean of the two."""
    proc = _run(
        tmp_path, "--device", "pmem", "--controllers", "1", "--read-fraction", "0.5",
        "--size", "256", "--requests", "20000", "--outstanding", "256",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    read, write = 11.52, 1.92  # GB/s per module
    assert result["total_bandwidth_gbps"] == pytest.approx(1 / (0.5 / read + 0.5 / write), rel=0.02)
    reads, writes = result["streams"]
    # while both run they take turns (the controller's request arbitration): a read per
    # write, so each stream moves 256 B per read and write media time together
    turns = 1 / (1 / read + 1 / write)
    assert reads["bandwidth_gbps"] == pytest.approx(turns, rel=0.02)
    assert writes["bandwidth_gbps"] == pytest.approx(turns, rel=0.02)
    # Little's law: 256 in flight at the achieved request rate
    assert reads["loaded_latency_ns"] == pytest.approx(256 * 256 / turns, rel=0.02)


def test_load_sweep_plots_latency_against_bandwidth(tmp_path):
    proc = _run(
        tmp_path, "--device", "dram", "--op", "read", "--size", "64", "--requests", "20000",
        "--load-sweep",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    points = result["load_sweep"]
    bandwidth = [p["streams"][0]["bandwidth_gbps"] for p in points]
    latency = [p["streams"][0]["loaded_latency_ns"] for p in points]
    # latency-bound at first (bandwidth grows with the window at the idle latency) ...
    assert bandwidth[1] == pytest.approx(2 * bandwidth[0], rel=0.05)
    assert latency[0] == pytest.approx(100, rel=0.05)
    # ... then bound by the DDR4 array: random 64 B reads switch rank every other burst
    # (+tCS 1.666 ns on the 3.33 ns burst) and refresh takes 350 ns per 7.8 us
    # (tests/test_memory_ddr4.py), two channels; latency growing with the queue
    per_burst_ns = (64 / 19.2 + 0.5 * 1.666) / (1 - 350 / 7800)
    assert bandwidth[-1] == pytest.approx(2 * 64 / per_burst_ns, rel=0.02)
    assert latency[-1] > 10 * latency[0]
    assert (tmp_path / "out" / "loaded_latency.png").stat().st_size > 0


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
        ("--device", "pmem", "--op", "read", "--size", "0"),
        ("--device", "pmem", "--read-fraction", "1.5"),
        ("--device", "pmem", "--stream", "copy:seq"),
        ("--device", "pmem"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args):
    proc = _run(tmp_path, *args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


PEAK = """import runpy, sys
from simulate.peak import peak_resident_bytes
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
print(peak_resident_bytes())
"""  # VmHWM: a forked child's ru_maxrss would carry the pytest worker's


@pytest.mark.parametrize(
    ("device", "op", "size", "requests"),
    [("dram", "write", "4KiB", 40000), ("pmem", "write", "4KiB", 150000),
     ("cxl-pmem", "read", "64B", 1000000), ("ssd", "write", "64B", 1000000)],
)  # fmt: skip
def test_the_memory_check_bounds_the_measured_peak(tmp_path, device, op, size, requests):
    """The check refuses runs that would not fit, so it must bound what a run takes
    (and stay within 3x of it, or it refuses runs that would fit)."""
    sys.path.insert(0, str(ROOT))
    from components.sim.units import parse_size
    from configs.microbench import DEVICES, StreamSpec, memory_needed

    args = ["--device", device, "--op", op, "--size", size, "--requests", str(requests)]
    proc = subprocess.run(
        [sys.executable, "-c", PEAK, str(SCRIPT), *args, "--outdir", str(tmp_path / "o")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    peak = int(proc.stdout.split()[-1])
    spec = StreamSpec(op, "rand", parse_size(size), 1024, requests)
    _, need = memory_needed(device, [spec], DEVICES[device]().access_unit)
    assert peak <= need <= 3 * peak, (peak, need)
