"""The measured Optane device (Pmem.optane, --pmem optane): buffered reads at the
sequential latency, the overlapped read-modify-write, Table 2's device untouched, and the
model switch on every PMEM of a board."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from simrun import timed

from components.boards import build_board
from components.memory import Pmem
from components.memory.pmem import OPTANE, use_model
from components.memory.xpoint import buffered_requests
from components.sim.params import ConfigError
from components.sim.units import TICKS_PER_SECOND

ROOT = Path(__file__).resolve().parent.parent


def test_a_sequential_run_reads_at_the_buffer_latency():
    """64 B reads one after the other, one in flight: the first misses (305 ns), every
    later one is in the line read before or the next (169 ns)."""
    dev = Pmem.optane(controllers=1)
    n = 4000
    ticks, _, _ = timed(dev, "read", np.arange(n, dtype=np.int64) * 64, 64, window=1)
    per_request = (305_000 + (n - 1) * 169_000) / n
    assert ticks / n == pytest.approx(per_request, rel=0.01)


def test_random_reads_keep_the_random_latency():
    dev = Pmem.optane(controllers=1)
    rng = np.random.default_rng(3)
    addr = rng.integers(0, 2**22, 2000).astype(np.int64) * 256
    assert buffered_requests(addr, 256, 256, 0) < 10  # a handful land next to the one before
    ticks, _, _ = timed(dev, "read", addr, 256, window=1)
    assert ticks / addr.size == pytest.approx(305_000, rel=0.01)


@pytest.mark.parametrize("overlap", [False, True])
def test_partial_line_writes_cost_the_line_write_when_the_read_overlaps(overlap):
    """64 B random writes each cost a 256 B line write and a 256 B read (RMW): one after
    the other on Table 2's model, overlapped on the device (the larger of the two)."""
    dev = Pmem.optane(controllers=1, rmw_overlap=overlap)
    rng = np.random.default_rng(5)
    n = 50_000
    addr = rng.permutation(2**20)[:n].astype(np.int64) * 256
    ticks, _, _ = timed(dev, "write", addr, 64)
    line = 256 / 2.3e9 + (0 if overlap else 256 / 6.6e9)
    assert n * 64 * TICKS_PER_SECOND / ticks == pytest.approx(64 / line, rel=0.03)


def test_table2_device_has_no_load_terms():
    """Table 2's emulation ran on delayed DRAM: none of the measured mechanisms."""
    dev = Pmem()
    stream = dev.read(np.arange(100, dtype=np.int64) * 64, 64, 4)
    assert stream.load is None and stream.min_ticks == 99 * 300_000 / 4
    assert dev.write(np.arange(100, dtype=np.int64) * 256, 256, 4).load is None


def test_use_model_switches_every_pmem_of_a_board():
    board = build_board("pmem")
    use_model(board, "optane")
    pmems = [obj for obj in board.descendants() if isinstance(obj, Pmem)]
    assert pmems and all(p.buffer_read_latency == 169_000 and p.queueing for p in pmems)
    use_model(board, "table2")
    assert all(p.read_latency == Pmem().read_latency and not p.queueing for p in pmems)
    with pytest.raises(ConfigError, match="unknown PMEM model"):
        use_model(board, "dram")


def test_optane_preset_is_the_model_table():
    dev = Pmem.optane()
    for key in OPTANE:
        assert getattr(dev, key) == getattr(Pmem(**{key: OPTANE[key]}), key)


def _cli(tmp_path, script, *args):
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pmem_option_runs_a_system_on_the_measured_device(tmp_path):
    out = tmp_path / "run"
    proc = _cli(
        tmp_path, "configs/trainingcxl.py", "--system", "pmem", "--model", "rmc1",
        "--batches", "1", "--pmem", "optane", "--outdir", str(out), "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    config = json.loads((out / "config.json").read_text())
    text = json.dumps(config)
    assert '"buffer_read_latency": {"value": 169000' in text


def test_unknown_pmem_model_is_one_line_and_exit_2(tmp_path):
    proc = _cli(tmp_path, "configs/trainingcxl.py", "--pmem", "xpoint", "--batches", "1")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--pmem" in proc.stderr


def test_microbench_threads_are_requesters_with_a_thread_window(tmp_path):
    proc = _cli(
        tmp_path, "configs/microbench.py", "--device", "pmem", "--optane", "--controllers",
        "1", "--op", "read", "--size", "256", "--threads", "3", "--requests", "2000",
        "--outdir", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [s["outstanding"] for s in result["streams"]] == [3, 3, 3]  # 768 B / 256 B
    # three threads of 3 x 256 B per 305 ns want 7.55 GB/s: the module's 6.6 caps them
    assert result["total_bandwidth_gbps"] == pytest.approx(6.6, rel=0.02)
    bad = _cli(tmp_path, "configs/microbench.py", "--device", "pmem", "--op", "read",
               "--threads", "0", "--outdir", str(tmp_path / "bad"))  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_sweep_axis_and_the_python_api_take_the_pmem_model(tmp_path):
    from simulate.run.options import UsageError
    from simulate.simulator import Simulator
    from simulate.sweeps.runid import run_id
    from simulate.sweeps.spec import SpecError, load_sweep

    spec = tmp_path / "spec.yaml"
    spec.write_text(f"outroot: {tmp_path / 'out'}\naxes: {{pmem: [table2, optane]}}\n")
    runs = load_sweep(spec).runs
    assert [r.options.pmem for r in runs] == ["table2", "optane"]
    assert len({r.id for r in runs}) == 2
    plain = Simulator("cxl").options
    assert plain.pmem is None and run_id(plain) != runs[1].id  # absent: old ids kept
    assert Simulator("cxl", pmem="optane").options.pmem == "optane"
    with pytest.raises(UsageError, match="^pmem 'xpoint'"):
        Simulator("cxl", pmem="xpoint")
    spec.write_text(f"outroot: {tmp_path / 'out'}\naxes: {{pmem: [xpoint]}}\n")
    with pytest.raises(SpecError, match="--pmem"):
        load_sweep(spec)


@pytest.mark.parametrize("system", ["dram", "ssd"])
def test_a_pmem_model_on_a_system_without_pmem_is_refused(tmp_path, system):
    """--pmem on the DRAM or SSD systems would change nothing: refused, not ignored, in
    the CLI, the API and a sweep; the systems with PMEM take it."""
    from simulate.simulator import Simulator
    from simulate.sweeps.spec import SpecError, load_sweep

    proc = _cli(tmp_path, "configs/trainingcxl.py", "--system", system, "--pmem", "optane",
                "--batches", "1")  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"trainingcxl.py: error: --pmem optane: --system {system} has no PMEM"
    ]
    with pytest.raises(ValueError, match=f"board {system} has no PMEM"):
        Simulator(system, pmem="table2", outdir=None)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"outroot: {tmp_path / 'o'}\nfixed: {{pmem: optane}}\n"
                    f"axes: {{system: [cxl, {system}]}}\n")  # fmt: skip
    with pytest.raises(SpecError, match="no PMEM"):
        load_sweep(spec)
    for other in ("pmem", "pcie", "cxl-d", "cxl-b", "cxl"):
        assert Simulator(other, pmem="optane", outdir=None).options.pmem == "optane"


def test_reproduce_paper_gives_the_pmem_model_only_to_systems_with_pmem():
    import importlib.util

    spec = importlib.util.spec_from_file_location("reproduce_paper", "scripts/reproduce_paper.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    args = script.parse_args(["--models", "rm1", "--pmem", "optane"])
    runs = {r.system: r.pmem for r in script.paper_runs(args)}
    assert runs == {"ssd": None, "dram": None} | dict.fromkeys(
        ("pmem", "pcie", "cxl-d", "cxl-b", "cxl"), "optane"
    )


def test_microbench_counts_are_ascii_integers(tmp_path):
    for text in ("٣", "1_0", "３", "2.0"):
        bad = _cli(tmp_path, "configs/microbench.py", "--device", "pmem", "--op", "read",
                   "--threads", text, "--outdir", str(tmp_path / "bad"))  # fmt: skip
        assert bad.returncode == 2, text
        assert bad.stderr.strip().splitlines() == [
            f"microbench.py: error: --threads expects an integer, got {text!r}"
        ]


def _threads_bandwidth(tmp_path, name, *args):
    proc = _cli(
        tmp_path, "configs/microbench.py", "--device", "pmem", "--optane", "--pattern", "rand",
        *args, "--outdir", str(tmp_path / name),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / name / "results.json").read_text())["total_bandwidth_gbps"]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_writing_thread_is_bound_by_its_cores_store_rate(tmp_path, threads):
    """Six DIMMs take 13.8 GB/s of writes; one core issues 4.56 GB/s of non-temporal
    stores (measured on DRAM), so one and two threads get that, not the DIMMs' rate."""
    from configs.microbench import THREAD_STORE_BANDWIDTH

    got = _threads_bandwidth(
        tmp_path, "w", "--controllers", "6", "--op", "write", "--size", "256",
        "--threads", str(threads), "--requests", "4000",
    )  # fmt: skip
    assert got == pytest.approx(threads * THREAD_STORE_BANDWIDTH / 1e9, rel=0.02)


def test_interleaved_threads_are_present_on_as_many_dimms_as_their_writes_in_flight(tmp_path):
    """24 threads writing 256 B on 6 DIMMs: each keeps 3 writes in flight (768 B of fill
    buffers), so it is on a DIMM with probability 1 - (5/6)^3 and each DIMM sees 10.1
    threads, past the write-thrash onset; spread evenly it would see 4, below it."""
    optane = Pmem.optane()
    present = 24 * (1 - (5 / 6) ** 3)
    factor = 1 + optane.write_thrash_slope * (present - optane.write_thrash_onset)
    expected = 6 * optane.ctrl_write_bandwidth / factor / 1e9
    got = _threads_bandwidth(
        tmp_path, "w24", "--controllers", "6", "--op", "write", "--size", "256",
        "--threads", "24", "--requests", "2000",
    )  # fmt: skip
    assert got == pytest.approx(expected, rel=0.03)
    assert got < 0.7 * 6 * optane.ctrl_write_bandwidth / 1e9  # an even spread: no thrash


def test_only_a_thread_is_present_per_request_in_flight():
    from components.memory.xpoint import spans

    assert spans(3, 256, 1.0, 768) == 3  # a thread: three scattered writes, three DIMMs
    assert spans(12, 64, 1.0, 768) == 12
    assert spans(256, 128, 1.0, 768) == 1  # an engine's window: spread by its needs
    assert spans(1, 4096, 1.0, 768) == 1  # a request deeper than the fill buffers
    assert spans(3, 256, 0.0, 768) == 1  # a sequential run stays on one unit
    assert spans(float("inf"), 256, 1.0, 768) == 1


def _product_form(rate_at, threads: int, stations: int) -> float:
    """Throughput of a closed network of ``threads`` customers visiting ``stations``
    identical load-dependent stations at random (product form, convolution): an
    independent reference for threads that sit on one DIMM per request."""
    factors = [1.0]
    for n in range(1, threads + 1):
        factors.append(factors[-1] * (1.0 / stations) / rate_at(n))
    total = np.array([1.0] + [0.0] * threads)
    for _ in range(stations):
        total = np.convolve(total, factors)[: threads + 1]
    return float(total[threads - 1] / total[threads])


def test_a_thread_reads_a_block_with_its_lines_in_flight(tmp_path):
    """One thread's 4 KiB reads: RUN_THREAD_BYTES in flight, a read latency per group of
    lines, then the last line's tail: not the block streamed at media speed."""
    from configs.microbench import RUN_THREAD_BYTES

    optane = Pmem.optane()
    latency = optane.read_latency / TICKS_PER_SECOND
    service = optane.access_unit / optane.ctrl_read_bandwidth
    block = (4096 / RUN_THREAD_BYTES - 1) * latency + latency - service
    got = _threads_bandwidth(
        tmp_path, "r1", "--controllers", "6", "--op", "read", "--size", "4096",
        "--threads", "1", "--requests", "100",
    )  # fmt: skip
    assert got == pytest.approx(4096 / block / 1e9, rel=0.02)


@pytest.mark.parametrize("threads", [8, 24])
def test_threads_reading_blocks_pile_up_on_the_slowest_dimm(tmp_path, threads):
    """Threads reading 4 KiB blocks on six DIMMs, each on one DIMM per block: the
    closed network of the model's own one-DIMM curve predicts their throughput, well
    below what the same threads spread evenly over the DIMMs would get."""
    from configs.microbench import RUN_THREAD_BYTES

    optane = Pmem.optane()
    per_thread = RUN_THREAD_BYTES / (optane.read_latency / TICKS_PER_SECOND)
    weight = RUN_THREAD_BYTES / optane.thread_bytes

    def dimm(n: int) -> float:
        excess = max(n * weight - optane.read_thrash_onset, 0.0)
        return min(
            n * per_thread, optane.ctrl_read_bandwidth / (1 + optane.read_thrash_slope * excess)
        )

    expected = _product_form(dimm, threads, 6) / 1e9
    spread = 6 * dimm(threads / 6) / 1e9
    got = _threads_bandwidth(
        tmp_path, "r", "--controllers", "6", "--op", "read", "--size", "4096",
        "--threads", str(threads), "--requests", "100",
    )  # fmt: skip
    assert got == pytest.approx(expected, rel=0.1)
    assert got < 0.8 * spread


@pytest.mark.parametrize("threads", [1, 8, 24])
def test_a_thread_writing_blocks_is_one_requester_on_one_dimm(tmp_path, threads):
    """4 KiB ntstores on one DIMM, a block per stage: a thread and the drains of its
    earlier blocks count once (1 thread: the media rate, not thrashing against its own
    drains), 8 threads thrash as 8 requesters, 24 threads reach the block-write cap."""
    optane = Pmem.optane()
    factor = 1 + optane.write_thrash_slope * max(threads - optane.write_thrash_onset, 0)
    factor = min(factor, optane.block_write_thrash_cap)
    written = threads * 100 * 4096
    held = optane.write_queue * optane.access_unit  # accepted, drained after the end
    seconds = (written - held) / (optane.ctrl_write_bandwidth / factor)
    got = _threads_bandwidth(
        tmp_path, "w", "--controllers", "1", "--op", "write", "--size", "4096",
        "--threads", str(threads), "--requests", "100",
    )  # fmt: skip
    assert got == pytest.approx(written / seconds / 1e9, rel=0.03)


@pytest.mark.parametrize("device", ["cxl-pmem", "cxl-mem-asic"])
@pytest.mark.parametrize("op", ["read", "write"])
def test_a_thread_behind_a_cxl_link_keeps_whole_requests(tmp_path, device, op):
    proc = _cli(
        tmp_path, "configs/microbench.py", "--device", device, "--op", op, "--size", "4096",
        "--threads", "2", "--requests", "50", "--outdir", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [s["outstanding"] for s in result["streams"]] == [1, 1]
