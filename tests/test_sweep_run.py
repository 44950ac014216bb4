"""Sweep execution: skip-finished, failures recorded, SIGKILL mid-sweep then rerun, collect."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]

import simulate.simulator  # noqa: E402
from simulate.sweeps import store  # noqa: E402
from simulate.sweeps.driver import execute  # noqa: E402
from simulate.sweeps.spec import load_sweep  # noqa: E402

LATENCIES = ["300ns", "400ns", "500ns", "600ns"]


def fake_run_job(options):
    """Writes what a sweep needs in well under a millisecond; seed 2 is bad input."""
    if options.seed == 2:
        raise ValueError("seed 2 is cursed\nsecond line")
    results = {"system": options.system, "seed": options.seed, "batch_time_ms": {"mean": 1.0}}
    Path(options.outdir, "results.json").write_text(json.dumps(results))
    return results


def small_sweep(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"outroot: {tmp_path / 'out'}\nfixed: {{model: rm3, batches: 1}}\n"
        "axes: {system: [cxl, pmem], seed: [1, 2, 3]}\n"
    )
    return load_sweep(spec)


def test_failures_recorded_then_retried_and_finished_runs_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(simulate.simulator, "run_job", fake_run_job)
    sweep = small_sweep(tmp_path)
    summary = execute(sweep, sweep.runs, "debug", 1)  # the SLURM path, via submitit in-process
    assert (summary.counts["done"], summary.counts["failed"]) == (4, 2)
    bad = [run for run in sweep.runs if run.options.seed == 2]
    assert [run for run, _ in summary.failures] == bad
    assert store.failure_message(sweep.outroot, bad[0].id) == "seed 2 is cursed"
    assert summary.lines()[0] == "sweep: 6 runs: 4 ran, 0 already complete, 2 failed"

    monkeypatch.setattr(simulate.simulator, "run_job", _ok)
    again = execute(sweep, sweep.runs, "debug", 1)
    assert (again.counts["done"], again.counts["skipped"], again.counts["failed"]) == (2, 4, 0)
    assert not list((sweep.outroot / "failed").iterdir())


def _ok(options):
    Path(options.outdir, "results.json").write_text("{}")
    return {}


def test_incomplete_dirs_never_count_and_stale_temp_dirs_go(tmp_path):
    outroot = tmp_path / "out"
    (outroot / "abc").mkdir(parents=True)
    (outroot / "abc" / "results.json").write_text("{}")
    assert not store.is_complete(outroot, "abc")  # no DONE marker
    (outroot / "abc" / "DONE").write_text("other\n")
    assert not store.is_complete(outroot, "abc")  # marker of another id
    host = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = outroot / f".tmp.abc.{dead.pid}.{host}"
    live = outroot / f".tmp.abd.{os.getppid()}.{host}"
    remote = outroot / f".tmp.abe.{dead.pid}.some-other-node"
    for path in (stale, live, remote):
        path.mkdir()
    assert store.clean_stale(outroot) == 1
    assert not stale.exists() and live.exists() and remote.exists()


def test_debug_executor_runs_real_simulations(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"outroot: {tmp_path / 'out'}\nfixed: {{model: rm3, batches: 1}}\naxes: {{seed: [1, 2]}}\n"
    )
    sweep = load_sweep(spec)
    assert execute(sweep, sweep.runs, "debug", 1).counts["done"] == 2
    for run in sweep.runs:
        results = json.loads((sweep.outroot / run.id / "results.json").read_text())
        assert (results["system"], results["seed"]) == ("cxl", run.options.seed)


def count_complete(outroot: Path) -> int:
    if not outroot.is_dir():
        return 0
    return sum(store.is_complete(outroot, p.name) for p in outroot.iterdir())


@pytest.mark.slow
def test_sigkill_mid_sweep_then_rerun_gives_24_distinct_correct_results(tmp_path):
    outroot = tmp_path / "out"
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"""outroot: {outroot}
fixed: {{model: rm3, batches: 1}}
axes:
  system: [cxl-b, cxl]
  seed: [1, 2, 3]
  set.board.cxl_mem.pmem.read_latency: {json.dumps(LATENCIES)}
""")
    command = [sys.executable, str(ROOT / "scripts" / "sweep.py"), str(spec), "--workers", "2"]
    sweep = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while count_complete(outroot) < 3 and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.02)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    finished = count_complete(outroot)
    assert 0 < finished < 24, f"kill landed after {finished} runs"
    named = [p for p in outroot.iterdir() if not p.name.startswith(".") and p.name != "failed"]
    assert all(store.is_complete(outroot, p.name) for p in named)  # never half-written

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{24 - finished} ran, {finished} already complete, 0 failed" in rerun.stdout
    runs = load_sweep(spec).runs
    assert sorted(p.name for p in outroot.iterdir() if not p.name.startswith(".")) == sorted(
        run.id for run in runs
    )
    for run in runs:
        rundir = outroot / run.id
        results = json.loads((rundir / "results.json").read_text())
        assert (results["system"], results["seed"]) == (run.options.system, run.options.seed)
        latency = json.loads((rundir / "config.json").read_text())["board"]["cxl_mem"]["pmem"]
        assert (
            latency["params"]["read_latency"]["given"]
            == dict(run.options.sets)["board.cxl_mem.pmem.read_latency"]
        )
    assert len({(r.options.system, r.options.seed, r.options.sets[0]) for r in runs}) == 24

    collect = [
        sys.executable,
        str(ROOT / "scripts" / "collect.py"),
        str(outroot),
        "--stat",
        "simSeconds",
        "--plot",
        "batch_time_ms.mean",
        "--x",
        "set.board.cxl_mem.pmem.read_latency",
    ]
    done = subprocess.run(collect, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len((outroot / "sweep.csv").read_text().strip().splitlines()) == 25
    table = pq.read_table(outroot / "sweep.parquet")
    assert table.num_rows == 24 and "stat.simSeconds" in table.column_names
    png = outroot / "batch_time_ms.mean-vs-set.board.cxl_mem.pmem.read_latency.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
