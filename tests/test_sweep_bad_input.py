"""Sweeps under bad input and rough handling: no SLURM, a huge grid, SIGKILL, Ctrl-C.

Each ends in one line on stderr and a documented exit status, leaves finished runs as
they were, and leaves no process behind.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the entry points, imported as modules

from simulate.sweeps import collect, store  # noqa: E402
from simulate.sweeps import spec as spec_module  # noqa: E402
from simulate.sweeps.spec import MAX_RUNS, load_sweep  # noqa: E402

SWEEP = [sys.executable, str(ROOT / "scripts" / "sweep.py")]
COLLECT = [sys.executable, str(ROOT / "scripts" / "collect.py")]


def spec_file(tmp_path: Path, axes: dict, fixed: dict | None = None, slurm: str = "") -> Path:
    spec = tmp_path / "spec.yaml"
    fixed = fixed or {"model": "rm3", "batches": 1}
    text = f"outroot: {tmp_path / 'out'}\nfixed: {json.dumps(fixed)}\naxes: {json.dumps(axes)}\n"
    spec.write_text(text + slurm)
    return spec


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def fake_commands(folder: Path, sbatch_stderr: str) -> dict[str, str]:
    """An environment whose sbatch fails as on a login node that lost its controller."""
    folder.mkdir()
    for name in ("srun", "sacct", "scancel"):
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
    (folder / "sbatch").write_text(f"#!/bin/sh\necho '{sbatch_stderr}' >&2\nexit 1\n")
    for path in folder.iterdir():
        path.chmod(0o755)
    return {**os.environ, "PATH": str(folder)}


def test_slurm_executor_without_slurm_is_one_line_and_exit_2(tmp_path):
    spec = spec_file(tmp_path, {"seed": [1, 2]})
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run(
        [*SWEEP, str(spec), "--executor", "slurm"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(empty)},
    )
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(
        "sweep.py: error: --executor slurm: sbatch, srun, sacct, scancel not found"
    )
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_slurm_submission_refused_is_one_line_and_exit_2(tmp_path):
    spec = spec_file(tmp_path, {"seed": [1, 2]})
    error = "sbatch: error: Batch job submission failed: Unable to contact slurm controller"
    done = subprocess.run(
        [*SWEEP, str(spec), "--executor", "slurm"],
        capture_output=True,
        text=True,
        timeout=60,
        env=fake_commands(tmp_path / "bin", error),
    )
    assert done.returncode == 2
    assert one_line(done) == f"sweep.py: error: --executor slurm: submission failed: {error}"
    assert not list((tmp_path / "out").glob("[!.]*"))  # no run, no failure recorded


@pytest.mark.parametrize("mode", [["--list"], [], ["--sbatch"], ["--executor", "slurm"]])
def test_a_million_run_grid_is_refused_up_front(tmp_path, mode):
    axes = {"seed": list(range(1, 1001)), "batches": list(range(1, 1001))}
    spec = spec_file(tmp_path, axes, {"model": "rm3"})
    start = time.monotonic()
    done = subprocess.run([*SWEEP, str(spec), *mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done) == (
        "sweep.py: error: spec: axes: the grid has 1,000,000 runs, more than the limit of "
        f"{MAX_RUNS:,}; split it into several specs"
    )
    assert time.monotonic() - start < 20  # refused before a run is built, not after


def test_the_limit_is_on_the_grid_not_the_axes(tmp_path, monkeypatch):
    monkeypatch.setattr(spec_module, "MAX_RUNS", 50)
    edge = spec_file(tmp_path, {"seed": list(range(1, 51))})
    assert len(load_sweep(edge, check=False).runs) == 50
    zipped = spec_file(
        tmp_path, {"seed": list(range(1, 52)), "batches": list(range(1, 52))}, {"model": "rm3"}
    )
    zipped.write_text(zipped.read_text() + "zip: [[seed, batches]]\n")
    with pytest.raises(ValueError, match="the grid has 51 runs, more than the limit of 50"):
        load_sweep(zipped, check=False)


def children(pid: int) -> set[int]:
    """Every live descendant of pid (from /proc), zombies excluded."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            living.add(pid)
    return living


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def default_sigint() -> None:
    """Undo an ignored SIGINT inherited from a background shell: Python keeps SIG_IGN."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def complete(outroot: Path) -> dict[str, bytes]:
    """id -> results.json of every complete run."""
    if not outroot.is_dir():
        return {}
    return {
        p.name: (p / "results.json").read_bytes()
        for p in outroot.iterdir()
        if store.is_complete(outroot, p.name)
    }


def in_flight(outroot: Path) -> list[Path]:
    return list(outroot.glob(f"{store.TEMP_PREFIX}*")) if outroot.is_dir() else []


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigkilled_driver_leaves_no_worker_or_resource_tracker(tmp_path):
    spec = spec_file(tmp_path, {"seed": [1, 2, 3, 4]}, {"model": "rm3", "batches": 100})
    outroot = tmp_path / "out"
    driver = subprocess.Popen(
        [*SWEEP, str(spec), "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    family: set[int] = set()
    try:
        assert wait_until(lambda: len(in_flight(outroot)) == 2, 60), "two runs never started"
        family = children(driver.pid)
        assert len(family) >= 3  # two workers and multiprocessing's resource tracker
        driver.kill()  # the driver alone, as the OOM killer or `kill -9 PID` would
        driver.wait()
        survivors = family if not wait_until(lambda: not alive(family), 10) else set()
        assert not survivors, f"orphans still alive 10 s after the driver died: {survivors}"
    finally:
        for pid in alive(family):
            os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
        driver.wait()
        driver.stderr.close()
    rerun = subprocess.run([*SWEEP, str(spec), "--workers", "2"], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert not in_flight(outroot)  # the killed runs' temp dirs were cleaned
    assert len(complete(outroot)) == 4


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_ctrl_c_is_one_line_exit_130_and_keeps_finished_runs(tmp_path):
    spec = spec_file(tmp_path, {"seed": [1, 2, 3, 4]}, {"model": "rm3", "batches": 100})
    outroot = tmp_path / "out"
    driver = subprocess.Popen(  # its own session: SIGINT to the group, as a terminal sends
        [*SWEEP, str(spec), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    family: set[int] = set()
    try:
        started = wait_until(lambda: complete(outroot) and in_flight(outroot), 90)
        assert started, "no run finished while another was in flight"
        before = complete(outroot)
        family = children(driver.pid)
        os.killpg(driver.pid, signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 130
    assert stdout == ""
    assert stderr.strip().splitlines() == [
        "sweep.py: interrupted; finished runs are kept, runs in flight are dropped "
        "(rerun the same command to finish the sweep)"
    ]
    after = complete(outroot)
    assert {k: after[k] for k in before} == before and len(after) < 4
    assert not in_flight(outroot)
    assert wait_until(lambda: not alive(family), 10), alive(family)

    rerun = subprocess.run([*SWEEP, str(spec), "--workers", "2"], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{4 - len(after)} ran, {len(after)} already complete, 0 failed" in rerun.stdout


def test_ctrl_c_in_a_single_run_leaves_no_temp_dir(tmp_path):
    spec = spec_file(tmp_path, {"seed": [1, 2]}, {"model": "rm3", "batches": 100})
    outroot = tmp_path / "out"
    driver = subprocess.Popen(
        [*SWEEP, str(spec), "--id", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        assert wait_until(lambda: in_flight(outroot), 60), "the run never started"
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 130
    assert len(stderr.strip().splitlines()) == 1 and "interrupted" in stderr
    assert not in_flight(outroot) and not complete(outroot)


def test_collect_interrupted_keeps_the_previous_table(tmp_path, monkeypatch):
    outroot = tmp_path / "out"
    rundir = outroot / "abc"
    rundir.mkdir(parents=True)
    (rundir / "results.json").write_text(json.dumps({"batch_time_ms": {"mean": 2.0}}))
    (rundir / "options.json").write_text(json.dumps({"id": "abc", "options": {"seed": 1}}))
    (rundir / "DONE").write_text("abc\n")
    import collect as collect_script

    assert collect_script.main([str(outroot)]) == 0
    table = {p.name: p.read_bytes() for p in outroot.glob("sweep.*")}
    assert set(table) == {"sweep.csv", "sweep.parquet"}

    import pyarrow.parquet as pq

    def interrupted_write(table, where, **_):
        Path(where).write_bytes(b"half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", interrupted_write)
    (rundir / "results.json").write_text(json.dumps({"batch_time_ms": {"mean": 3.0}}))
    assert collect.gather(outroot)[0]["batch_time_ms.mean"] == 3.0  # a new table was due
    assert collect_script.main([str(outroot)]) == 130
    assert {p.name: p.read_bytes() for p in outroot.glob("sweep.*")} == table
    assert not list(outroot.glob(".sweep.*"))  # no temp file left behind
