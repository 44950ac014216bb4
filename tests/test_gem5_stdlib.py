"""gem5 as a gem5 user runs it: the replay on stdlib components driven by the stdlib
Simulator, every output under -d, one gem5 stats dump per batch and replay phase whose
numbers belong to that batch's ops, and the CXL-MEM's memory on gem5's own TestBoard.
Needs a gem5 binary (``GEM5`` or ../shared/gem5/gem5); skipped without one."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from components.gem5 import binary, environment
from components.gem5.runner import QUIESCE
from components.memory.pmem import Pmem
from workloads.models import PRESETS

GEM5 = binary()
ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.gem5,
    pytest.mark.skipif(GEM5 is None, reason="no gem5 binary (GEM5 or ../shared/gem5/gem5)"),
]
BATCHES, BATCH_SIZE = 3, 32
RUN = ("--system", "cxl", "--model", "rmc1", "--batch-size", str(BATCH_SIZE))
RUN += ("--batches", str(BATCHES), "--no-progress")


def _gem5(cwd: Path, outdir: str, *args: str) -> subprocess.CompletedProcess:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [GEM5, "-d", outdir, *args], cwd=cwd, env=environment(), capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def gem5_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, set]:
    """The README's run, from a working directory of its own, -d relative to it; also
    what appeared at the checkout's top level meanwhile (an m5out/ there, say)."""
    work = tmp_path_factory.mktemp("gem5run") / "work"
    before = set(ROOT.iterdir())
    run = _gem5(work, "D", str(ROOT / "configs/trainingcxl.py"), *RUN)
    assert run.returncode == 0, run.stderr[-2000:]
    return run, work, set(ROOT.iterdir()) - before


def _dumps(stats: Path) -> list[dict[str, float]]:
    """Each dump of a gem5 stats.txt as {name: value} (scalars and ::total rows)."""
    dumps = []
    for block in stats.read_text().split("---------- Begin Simulation Statistics ----------")[1:]:
        values = {}
        for line in block.splitlines():
            fields = line.split()
            if len(fields) >= 2 and re.fullmatch(r"-?[0-9.e+-]+", fields[1]):
                values[fields[0]] = float(fields[1])
        dumps.append(values)
    return dumps


def test_every_output_lands_under_d_and_nowhere_else(gem5_run):
    run, work, in_checkout = gem5_run
    outdir = work / "D"
    assert all(path == outdir or outdir in path.parents for path in work.rglob("*"))
    assert in_checkout == set()
    assert {"stats.txt", "config.ini"} <= {p.name for p in outdir.iterdir()}  # gem5's own
    ours = {p.name for p in (outdir / "trainingcxl").iterdir()}
    assert {"results.json", "timeline.csv", "stats.txt", "config.json"} <= ours
    assert run.stdout.strip().endswith("-> D/trainingcxl")


def test_the_headline_and_batch_time_are_gem5s_with_the_builtin_beside(gem5_run):
    run, work, _ = gem5_run
    results = json.loads((work / "D/trainingcxl/results.json").read_text())
    windows = [batch["gem5"]["concurrent"] / 1e9 for batch in results["gem5"]["batches"]]
    steady = windows[1:-1]  # batch 0 warms up, the last has nothing behind it
    assert results["batch_time_source"] == "gem5"
    assert results["batch_time_ms"]["mean"] == pytest.approx(sum(steady) / len(steady), abs=1e-6)
    assert results["batch_times_ms"] == pytest.approx(windows, abs=1e-6)
    builtin = [batch["builtin"]["concurrent"] / 1e9 for batch in results["gem5"]["batches"]]
    assert results["builtin_batch_times_ms"] == pytest.approx(builtin, abs=1e-6)
    gem5, ours = results["batch_time_ms"]["mean"], results["builtin_batch_time_ms"]["mean"]
    assert f"{gem5:.3f} ms/batch (gem5; built-in engine {ours:.3f})" in run.stdout
    assert run.stdout.count("Entering event queue") + run.stderr.count("Entering event") <= 1


def test_one_stats_dump_per_batch_and_phase_holds_that_batchs_ops(gem5_run):
    """Concurrent dumps span exactly the batch windows gem5 timed (between batch ends);
    alone dumps span the batch's ops, each after the quiet gap before it; what DCOH
    flushes wrote into the GPU's memory in an alone dump is that batch's pooled
    vectors (samples x tables x row bytes, in 64 B lines)."""
    _, work, _ = gem5_run
    results = json.loads((work / "D/trainingcxl/results.json").read_text())
    dumps = _dumps(work / "D/stats.txt")
    assert len(dumps) == 2 * BATCHES
    concurrent, alone = dumps[:BATCHES], dumps[BATCHES:]
    for dump, batch in zip(concurrent[:-1], results["gem5"]["batches"][:-1], strict=True):
        assert dump["simTicks"] == batch["gem5"]["concurrent"]
    spec = PRESETS["rmc1"]
    pooled = math.ceil(BATCH_SIZE * spec.num_tables * spec.row_bytes / 64) * 64
    for b, dump in enumerate(alone):
        ops = [op for op in results["gem5"]["ops"] if op["batch"] == b]
        assert dump["simTicks"] == sum(QUIESCE + op["gem5"]["alone"] for op in ops)
        assert dump["board.cache_hierarchy.gpu_flush_target.bytesWritten::total"] == pooled


def test_the_board_is_a_stdlib_board_run_by_the_stdlib_simulator(tmp_path):
    probe = tmp_path / "probe.json"
    config = str(ROOT / "configs/trainingcxl.py")
    argv = ["--system", "cxl-d", "--model", "rmc1", "--batch-size", "8", "--batches", "1"]
    run = _gem5(tmp_path, "D", str(ROOT / "tests/gem5_stdlib_probe.py"), str(probe), config,
                *argv, "--no-progress")  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(probe.read_text())
    assert len(seen["runs"]) >= 3  # to the start tick, the concurrent and the alone phase
    for board in seen["runs"]:
        assert board == {
            "board": "ReplayBoard",
            "is_stdlib_board": True,
            "memory_is_channeled": True,
            "processor_is_generator": True,
            "fabric_is_cache_hierarchy": True,
        }
    assert seen["simulate_calls"]["outside"] == 0 and seen["simulate_calls"]["inside"] > 0


def _bandwidth(stats: Path) -> float:
    """Bytes the controllers read per second, from gem5's stats.txt."""
    (dump,) = _dumps(stats)
    read_bytes = re.compile(r".*mem_ctrl\d+\.dram\.bytesRead::total")
    read = sum(value for name, value in dump.items() if read_bytes.fullmatch(name))
    return read / dump["simSeconds"]


@pytest.mark.parametrize("optane", [False, True], ids=["table2", "optane"])
def test_the_cxl_mem_memory_on_gem5s_test_board_reaches_its_media_bandwidth(tmp_path, optane):
    """configs/examples' TestBoard + RandomGenerator run: random XPLine reads from four
    requesters saturate the four controllers at our media bandwidth; one requester
    with four reads in flight is bound by our read latency instead (Little's law)."""
    pmem = Pmem.optane() if optane else Pmem()
    example = str(ROOT / "configs/examples/cxl_mem_on_test_board.py")
    flags = ["--optane"] if optane else []
    run = _gem5(tmp_path, "saturated", example, *flags)
    assert run.returncode == 0, run.stderr[-2000:]
    media = pmem.controllers * pmem.ctrl_read_bandwidth
    assert _bandwidth(tmp_path / "saturated/stats.txt") == pytest.approx(media, rel=0.05)
    run = _gem5(tmp_path, "window", example, *flags, "--cores", "1", "--window", "4")
    assert run.returncode == 0, run.stderr[-2000:]
    latency_bound = 4 * pmem.access_unit / (pmem.read_latency / 1e12)
    assert _bandwidth(tmp_path / "window/stats.txt") == pytest.approx(latency_bound, rel=0.1)
