"""Sweeps on a real SLURM cluster: a throwaway single node (scripts/slurm_cluster.py).

A 12-run grid goes through submitit (`--executor slurm`) and through `--sbatch` +
`sbatch`; one array task is cancelled with scancel mid-run and one is held until SLURM
kills it at its time limit; resubmitting finishes exactly those, and every results.json
is byte-identical to a direct local run of the same options. The spec's resources are
read back from `scontrol show job` and `sacct`. Skips only where no cluster can run
(not root, or the Debian packages are missing and cannot be installed).
"""

import contextlib
import ctypes
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))  # slurm_cluster, the throwaway cluster

import slurm_cluster  # noqa: E402

from simulate.simulator import run_job  # noqa: E402
from simulate.sweeps import store  # noqa: E402
from simulate.sweeps.spec import load_sweep  # noqa: E402

pytestmark = pytest.mark.slow
SWEEP = [sys.executable, str(ROOT / "scripts" / "sweep.py")]
GRID = """outroot: {outroot}
fixed: {{model: rm3, batches: 1, batch_size: 8}}
axes:
  system: [cxl, cxl-b]
  seed: [1, 2, 3]
  set.board.cxl_mem.pmem.read_latency: [300ns, 600ns]
slurm: {slurm}
"""
UNSETTLED = ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")
RESULT_FILES = ("results.json", "timeline.csv")  # stats also hold the host's wall time
PTRACE_ATTACH, WALL = 16, 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_cluster.unavailable()
    if reason:
        pytest.skip(reason)
    # no default partition: a job reaches the node only if the spec's partition did
    with slurm_cluster.running(cpus=2, memory_mb=2048, default_partition=False) as running:
        yield running


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """results.json and timeline.csv of each of the 12 runs, run directly in this process."""
    folder = tmp_path_factory.mktemp("direct")
    spec = folder / "spec.yaml"
    spec.write_text(GRID.format(outroot=folder / "out", slurm="{}"))
    files = {}
    for run in load_sweep(spec).runs:
        outdir = folder / run.id
        outdir.mkdir()
        run_job(replace(run.options, outdir=str(outdir), progress=False))
        files[run.id] = {name: (outdir / name).read_bytes() for name in RESULT_FILES}
    assert len({f["results.json"] for f in files.values()}) == 12  # the grid's runs differ
    return files


def write_spec(tmp_path: Path, slurm: dict) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(GRID.format(outroot=tmp_path / "out", slurm=json.dumps(slurm)))
    return spec


def temp_dirs(outroot: Path) -> dict[str, int]:
    """run id -> pid of the job process now writing it (its temp dir is on disk)."""
    host, found = socket.gethostname(), {}
    if outroot.is_dir():
        for path in outroot.glob(f"{store.TEMP_PREFIX}*"):
            parts = path.name[len(store.TEMP_PREFIX) :].split(".", 2)
            if len(parts) == 3 and parts[2] == host:
                found[parts[0]] = int(parts[1])
    return found


class Hung:
    """A job process held in ptrace-stop, every thread of it: frozen mid-run and deaf to
    everything but SIGKILL (SLURM's SIGCONT and SIGTERM, submitit's USR2), like a run
    stuck in native code. The tracing thread reaps it, so SLURM sees it die."""

    def __init__(self, pid: int) -> None:
        self.pid, self.status, self.errno = pid, None, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._trace, daemon=True)
        self.thread.start()
        self.stopped.wait(10)

    def _trace(self) -> None:
        try:
            threads = [int(tid) for tid in os.listdir(f"/proc/{self.pid}/task")]
        except FileNotFoundError:
            threads = []
        live = set()
        for tid in threads:
            if LIBC.ptrace(PTRACE_ATTACH, tid, None, None) == 0:
                live.add(tid)
            elif tid == self.pid:
                self.errno = ctypes.get_errno()
        held: set[int] = set()
        while self.pid in live:
            for tid in list(live):
                try:
                    found, status = os.waitpid(tid, os.WNOHANG | WALL)
                except ChildProcessError:
                    live.discard(tid)
                    continue
                if found and os.WIFSTOPPED(status):  # never resumed: signals stay pending
                    held.add(tid)
                elif found:
                    live.discard(tid)
                    self.status = status if tid == self.pid else self.status
            if held >= live:
                self.stopped.set()
            time.sleep(0.02)
        self.stopped.set()

    @property
    def attached(self) -> bool:
        return self.stopped.is_set() and self.thread.is_alive()

    def killed_by_sigkill(self, timeout: float = 10) -> bool:
        self.thread.join(timeout)
        return self.status is not None and os.WTERMSIG(self.status) == signal.SIGKILL

    def release(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.thread.join(10)


def hang_next_run(outroot: Path, skip: set[str], timeout: float = 120) -> tuple[str, Hung]:
    """Hang the first run in flight whose id is not in skip; its id and the Hung."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for identity, pid in temp_dirs(outroot).items():
            if identity not in skip:
                hung = Hung(pid)
                if hung.attached:
                    return identity, hung
                if hung.errno == errno.EPERM:  # ESRCH: it finished meanwhile, try the next
                    pytest.skip("ptrace is not permitted here: no way to hold a run mid-run")
        time.sleep(0.02)
    raise AssertionError(f"no run started under {outroot} within {timeout} s")


def show_job(cluster, job: str) -> dict[str, str]:
    """`scontrol show job` of one job (or the first record of an array) as a dict."""
    text = cluster.command("scontrol", "show", "job", job, "--oneliner").splitlines()[0]
    return dict(re.findall(r"(\w+)=(\S*)", text))


def sacct(cluster, job: str) -> dict[str, dict[str, str]]:
    """Array task id -> its sacct record (State, Partition, Timelimit, ReqMem, ReqCPUS)."""
    fields = "JobID,State,Partition,Timelimit,ReqMem,ReqCPUS"
    text = cluster.command("sacct", "-X", "--parsable2", "-j", job, "-o", fields)
    lines = [line.split("|") for line in text.strip().splitlines()]
    return {row[0]: dict(zip(lines[0], row, strict=True)) for row in lines[1:]}


def settled(cluster, job: str, tasks: int) -> dict[str, dict[str, str]]:
    """sacct of an array once every task's final state has reached the database
    (slurmctld sends records to slurmdbd after squeue has forgotten the job)."""

    def final():
        states = sacct(cluster, job)
        done = all(s["State"].split()[0] not in UNSETTLED for s in states.values())
        return states if len(states) == tasks and done else None

    return wait_for(final, 60, f"sacct to settle on job {job}", cluster)


def wait_for(predicate, timeout: float, what: str, cluster=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    logs = f"\n{cluster.log_tails()}" if cluster else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{logs}")


def check_results(outroot: Path, spec: Path, expected: dict) -> None:
    """Exactly the grid's 12 runs landed, whole, each byte-identical to a direct run."""
    runs = load_sweep(spec).runs
    landed = [p.name for p in outroot.iterdir() if p.name[0] != "." and p.name != store.FAILED]
    assert sorted(landed) == sorted(run.id for run in runs)
    assert not temp_dirs(outroot)
    assert not list(outroot.glob(f"{store.FAILED}/*"))  # retried failures are cleared
    for run in runs:
        assert store.is_complete(outroot, run.id)
        for name in RESULT_FILES:
            assert (outroot / run.id / name).read_bytes() == expected[run.id][name], (run, name)


def test_submitit_array_with_scancel_and_timeout_resumes_to_12_results(cluster, expected, tmp_path):
    slurm = {"partition": cluster.partition, "time": 1, "cpus": 1, "mem": "400M"}
    spec = write_spec(tmp_path, slurm | {"array_parallelism": 2})
    outroot = tmp_path / "out"
    log = open(tmp_path / "sweep.log", "w+")
    sweep = subprocess.Popen(
        [*SWEEP, str(spec), "--executor", "slurm"], env=cluster.env, stdout=log, stderr=log
    )
    hung = []
    try:
        # the first run to start hangs past its time limit, the second is cancelled
        held, timed_out = hang_next_run(outroot, set())
        hung.append(timed_out)
        cancelled, killed = hang_next_run(outroot, {held})
        hung.append(killed)
        array = wait_for(cluster.jobs, 30, "the array in squeue", cluster)[0].split("_")[0]
        index = {run.id: run.index for run in load_sweep(spec).runs}
        record = show_job(cluster, f"{array}_{index[held]}")
        assert (record["Partition"], record["TimeLimit"]) == ("sweep", "00:01:00")
        assert (record["NumCPUs"], record["MinMemoryNode"]) == ("1", "400M")
        throttle = show_job(cluster, array)  # the array's pending remainder
        assert throttle.get("ArrayTaskThrottle") == "2", throttle
        cluster.command("scancel", f"{array}_{index[cancelled]}")
        sweep.wait(timeout=240)
        assert timed_out.killed_by_sigkill() and killed.killed_by_sigkill()  # mid-run
    finally:
        if sweep.poll() is None:
            sweep.kill()
        for process in hung:
            process.release()
    log.seek(0)
    output = log.read()
    assert sweep.returncode == 1, output
    assert "sweep: 12 runs: 10 ran, 0 already complete, 2 failed" in output, output
    assert f"failed: run {index[held]} ({held}): job {array}_{index[held]} (TIMEOUT)" in output
    assert f"({cancelled}): job {array}_{index[cancelled]} (CANCELLED" in output
    states = settled(cluster, array, 12)
    assert states[f"{array}_{index[held]}"]["State"] == "TIMEOUT", states
    assert states[f"{array}_{index[cancelled]}"]["State"].startswith("CANCELLED"), states
    assert not store.is_complete(outroot, held) and not store.is_complete(outroot, cancelled)
    for task in states.values():
        assert (task["Partition"], task["Timelimit"], task["ReqMem"], task["ReqCPUS"]) == (
            "sweep",
            "00:01:00",
            "400M",
            "1",
        ), task

    again = subprocess.run(
        [*SWEEP, str(spec), "--executor", "slurm"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "sweep: 12 runs: 2 ran, 10 already complete, 0 failed" in again.stdout
    check_results(outroot, spec, expected)

    collect = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "collect.py"), str(outroot)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert collect.returncode == 0, collect.stderr
    import pyarrow.parquet as pq

    table = pq.read_table(outroot / "sweep.parquet").to_pylist()
    assert sorted(row["id"] for row in table) == sorted(expected)
    for row in table:
        direct = json.loads(expected[row["id"]]["results.json"])
        assert row["batch_time_ms.mean"] == direct["batch_time_ms"]["mean"]
        assert row["energy_j.total"] == direct["energy_j"]["total"]


def test_sbatch_array_with_scancel_resubmits_only_the_unfinished_run(cluster, expected, tmp_path):
    slurm = {"partition": cluster.partition, "time": 2, "cpus": 2, "mem": "700M"}
    spec = write_spec(tmp_path, slurm | {"array_parallelism": 1})
    outroot = tmp_path / "out"
    script = tmp_path / "sweep.sbatch"

    def sbatch() -> str:
        text = subprocess.run(
            [*SWEEP, str(spec), "--sbatch"], capture_output=True, text=True, timeout=60
        )
        assert text.returncode == 0, text.stderr
        script.write_text(text.stdout)
        return cluster.command("sbatch", "--parsable", str(script)).strip()

    first = sbatch()
    assert "#SBATCH --array=0-11%1" in script.read_text()
    cancelled, killed = hang_next_run(outroot, set())
    try:
        index = {run.id: run.index for run in load_sweep(spec).runs}
        record = show_job(cluster, f"{first}_{index[cancelled]}")
        assert (record["Partition"], record["TimeLimit"]) == ("sweep", "00:02:00")
        assert (record["NumCPUs"], record["MinMemoryNode"]) == ("2", "700M")
        cluster.command("scancel", f"{first}_{index[cancelled]}")
        assert killed.killed_by_sigkill(30), (killed.status, killed.thread.is_alive())
    finally:
        killed.release()
    wait_for(lambda: not cluster.jobs(), 180, "the first array to end", cluster)
    states = settled(cluster, first, 12)
    assert (
        sorted(s["State"].split()[0] for s in states.values()) == ["CANCELLED"] + ["COMPLETED"] * 11
    ), states
    assert {
        (s["Partition"], s["Timelimit"], s["ReqMem"], s["ReqCPUS"]) for s in states.values()
    } == {("sweep", "00:02:00", "700M", "2")}

    second = sbatch()  # only the cancelled run is left
    assert f"#SBATCH --array={index[cancelled]}%1" in script.read_text()
    wait_for(lambda: not cluster.jobs(), 120, "the resubmitted task to end", cluster)
    assert [s["State"] for s in settled(cluster, second, 1).values()] == ["COMPLETED"]
    check_results(outroot, spec, expected)
    done = subprocess.run([*SWEEP, str(spec), "--sbatch"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "")
    assert "all 12 runs are complete" in done.stderr


def test_a_partition_the_cluster_lacks_is_one_line_and_exit_2(cluster, tmp_path):
    spec = write_spec(tmp_path, {"partition": "nope", "time": 1, "mem": "400M"})
    done = subprocess.run(
        [*SWEEP, str(spec), "--executor", "slurm"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "sweep.py: error: --executor slurm: submission failed: sbatch: error: "
        "Batch job submission failed: Invalid partition name specified"
    ]
    assert not cluster.jobs()
