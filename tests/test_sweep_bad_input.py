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
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # the entry points, imported as modules

from simulate.run.cli import error_line  # noqa: E402
from simulate.run.options import UsageError  # noqa: E402
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


LAUGHS = "".join(
    f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9) if n else ', '.join(['lol'] * 9)}]\n"
    for n in range(9)
)
BAD_SPECS = [
    # (file bytes, text the one line must contain)
    (b"outroot: o\nfixed: {model: \xe9}\n", "line 2, column 16: not UTF-8 text (byte 0xe9)"),
    (b"\xff\xfeo\x00u\x00", "not UTF-8 text"),
    (b"outroot: o\nfixed: &a {seed: *a}\n", "a recursive alias"),
    (b"outroot: o\naxes: &b {seed: [1, *b]}\n", "a recursive alias"),
    (("outroot: o\n" + LAUGHS).encode(), "its aliases expand to more than 100,000 values"),
    (("a: &a x\noutroot: o\nfixed: [" + "*a, " * 101 + "]\n").encode(), "more than 100 aliases"),
    (b"outroot: o\noutroot: p\n", "duplicate key 'outroot' at line 2"),
    (b"outroot: o\nfixed: {model: rmc1, model: rm1}\n", "duplicate key 'model'"),
    (b"outroot: o\naxes:\n  seed: [1]\n  seed: [2]\n", "duplicate key 'seed' at line 4"),
    (b"outroot: o\nfixed: {set: {board: {index_bytes: 4, index_bytes: 8}}}\n", "duplicate key"),
    (
        b"outroot: o\nfixed: " + b"[" * 20_000 + b"]" * 20_000 + b"\n",
        "nested more than 64 levels deep",
    ),
    (b"outroot: o\nfixed: {model: " + b"x" * (2 << 20) + b"}\n", "more than the 1,048,576 allowed"),
    (b"outroot: o\nslurm: {time: 600000}\n", "slurm.time: must be at most 525600 minutes"),
    (b"outroot: o\nslurm: {time: '999-00:00:00'}\n", "slurm.time: must be at most"),
    (b"outroot: o\nslurm: {cpus: 100000}\n", "slurm.cpus: must be at most 4096"),
    (b"outroot: o\nslurm: {gpus: 1000}\n", "slurm.gpus: must be at most 64"),
    (b"outroot: o\nslurm: {mem: 100000T}\n", "slurm.mem: must be at most 64T"),
    (b"outroot: o\nslurm: {mem: 99999999}\n", "slurm.mem: must be at most 64T"),
]


@pytest.mark.parametrize(("data", "needle"), BAD_SPECS, ids=[n[:30] for _, n in BAD_SPECS])
def test_a_malformed_spec_file_is_one_line_within_seconds(tmp_path, data, needle):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(data)
    started = time.monotonic()
    done = subprocess.run([*SWEEP, str(spec), "--list"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 30
    line = one_line(done)
    assert line.startswith("sweep.py: error: spec: "), line
    assert needle in line, line
    assert done.returncode == 2 and done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_a_toml_spec_not_in_utf8_is_one_line(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_bytes(b"outroot = '\xc3\x28'\n")
    done = subprocess.run([*SWEEP, str(spec), "--list"], capture_output=True, text=True, timeout=60)
    assert "not UTF-8 text" in one_line(done) and done.returncode == 2


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "socket"])
def test_a_spec_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    """A FIFO with no writer would block open(); it is refused from its stat instead."""
    import socket

    spec = tmp_path / "spec.yaml"
    if kind == "fifo":
        os.mkfifo(spec)
    elif kind == "directory":
        spec.mkdir()
    elif kind == "device":
        spec.symlink_to("/dev/zero")
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(spec))
    done = subprocess.run([*SWEEP, str(spec)], capture_output=True, text=True, timeout=60)
    assert "spec.yaml: not a regular file" in one_line(done), done.stderr
    assert done.returncode == 2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "sweep.py: error: the following arguments are required: spec"),
        (["--id", str(10**30)], "sweep.py: error: --id 1000000000000000000000000000000"),
        (["--workers", str(10**9)], "sweep.py: error: --workers must be in 1.."),
        (["--workers", "0"], "sweep.py: error: --workers must be in 1.."),
        (["/no/such/spec.yaml"], "sweep.py: error: spec: /no/such/spec.yaml: cannot read"),
    ],
)
def test_sweep_errors_are_prog_error_lines_without_usage(tmp_path, argv, needle):
    spec = tmp_path / "ok.yaml"
    spec.write_text(f"outroot: {tmp_path / 'o'}\nfixed: {{model: rmc1, batches: 1}}\n")
    words = [str(spec), *argv] if argv and argv[0].startswith("--") else argv
    done = subprocess.run([*SWEEP, *words], capture_output=True, text=True, timeout=60)
    assert one_line(done).startswith(needle), done.stderr
    assert done.returncode == 2


SLURM_CLUSTER = [sys.executable, str(ROOT / "scripts" / "slurm_cluster.py")]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--cpus", "0"], "--cpus must be in 1.."),
        (["--cpus", str(10**6)], "--cpus must be in 1.."),
        (["--memory-mb", "1"], "--memory-mb must be in 64.."),
        (["--memory-mb", str(10**15)], "--memory-mb must be in 64.."),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--cpus", "x"], "argument --cpus: invalid int value: 'x'"),
    ],
)
def test_slurm_cluster_errors_are_one_prog_error_line(argv, needle):
    done = subprocess.run([*SLURM_CLUSTER, *argv], capture_output=True, text=True, timeout=60)
    line = one_line(done)
    assert line.startswith("slurm_cluster.py: error: ") and needle in line, line
    assert done.returncode == 2


OPTION_NAMES = [
    *("model", "batches", "batch_size", "seed", "system", "fail_at", "functional", "rows"),
    *("reuse", "zipf", "set.board.index_bytes", "set.board.cxl_mem.pmem.interleave"),
    *("bogus", "outdir"),
]
SCALARS = st.one_of(
    st.integers(-(2**66), 2**66),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["rmc1", "rm9", "cxl", "1ms", "0B", "64B", "1e30s", ""]),
    st.text(max_size=8),
)
VALUES_OR_LISTS = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))


@st.composite
def spec_texts(draw) -> bytes:
    """A spec document (fixed, axes, zip, slurm, outroot), then mutated as a file might
    be: a key repeated, an anchor and aliases, a cut, a non-UTF-8 byte."""
    fixed = draw(st.dictionaries(st.sampled_from(OPTION_NAMES), VALUES_OR_LISTS, max_size=3))
    axes = draw(st.dictionaries(st.sampled_from(OPTION_NAMES), VALUES_OR_LISTS, max_size=2))
    doc: dict = {"outroot": draw(st.one_of(st.just("out"), SCALARS)), "fixed": fixed, "axes": axes}
    if draw(st.booleans()):
        doc["slurm"] = draw(st.dictionaries(
            st.sampled_from(["time", "cpus", "mem", "gpus", "qos", "nope"]), SCALARS, max_size=2
        ))  # fmt: skip
    if draw(st.booleans()):
        doc["zip"] = [list(axes)] if axes else draw(SCALARS)
    lines = yaml.safe_dump(doc, sort_keys=False).splitlines()
    mutation = draw(st.sampled_from(["none", "repeat", "alias", "cut", "byte", "recursive"]))
    if mutation == "repeat" and lines:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(lines)))
    elif mutation == "alias":
        lines = ["base: &base {model: rmc1}", *lines, "more: [*base, *base]"]
    elif mutation == "recursive":
        lines = ["fixed2: &r {a: *r}", *lines]
    elif mutation == "cut" and lines:
        text = "\n".join(lines)
        return text[: draw(st.integers(0, len(text)))].encode()
    data = "\n".join(lines).encode() + b"\n"
    if mutation == "byte":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + bytes([draw(st.integers(0x80, 0xFF))]) + data[at:]
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=spec_texts())
def test_any_spec_loads_or_is_refused_with_one_line(tmp_path_factory, data):
    """No spec escapes as anything but a one-line SpecError (which the CLI prints as
    ``sweep.py: error: spec: ...``), and loading one writes nothing and changes nothing."""
    where = tmp_path_factory.mktemp("spec")
    path = where / "spec.yaml"
    path.write_bytes(data)
    try:
        sweep = load_sweep(path, outroot=str(where / "out"))
    except UsageError as exc:
        message = str(exc)
        assert message.startswith("spec: ") and "\n" not in error_line("sweep.py", message)
        event("refused")
    else:
        assert sweep.runs and all(run.options.outdir.startswith(str(where)) for run in sweep.runs)
        event("accepted")
    assert path.read_bytes() == data
    assert sorted(p.name for p in where.iterdir()) == ["spec.yaml"]
