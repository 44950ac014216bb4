"""Where runs execute: a local spawn process pool, or SLURM job arrays through submitit.

Both report each Outcome as it arrives, so the caller can drive a progress bar and a
killed sweep has already recorded everything that finished. Local workers die with
the driver (PR_SET_PDEATHSIG, or a watcher thread where prctl is missing), so killing
a sweep, even with SIGKILL, leaves no worker or resource tracker behind.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import shlex
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from simulate.run import prefetch
from simulate.run.cli import arm_parent_death
from simulate.run.options import RunOptions, UsageError
from simulate.sweeps.runid import run_id
from simulate.sweeps.runner import FAILED, Outcome, run_one
from simulate.sweeps.slurm import submitit_parameters

Report = Callable[[Outcome], None]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
SUBMITIT_CLUSTERS = {"slurm": "slurm", "debug": "debug"}
SLURM_COMMANDS = ("sbatch", "srun", "sacct", "scancel")
PARENT_POLL_S = 1.0
RESULT_POLL_S = 2.0  # result files are cheap to look for
SACCT_EVERY_S = 15.0  # one sacct call per interval for the whole array, as sites ask


def _init_worker(parent: int, workers: int) -> None:
    """Pool initializer: leave Ctrl-C to the driver, die with it, keep tqdm from
    making a named semaphore that a killed worker would leave to the resource tracker
    (which then warns of a leak): a worker's runs show no progress bar anyway; and
    tell the runs' batch prefetch how many runs share the CPUs."""
    from tqdm import tqdm

    prefetch.share_cpus(workers)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tqdm.set_lock(threading.RLock())
    _die_with(parent)


def _die_with(parent: int) -> None:
    """Exit when the driver does, even if it is SIGKILLed."""
    if not arm_parent_death(parent):  # not Linux: watch the parent instead
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the busy workers now and drop the queued runs: shutdown alone would let every
    queued run still execute. Python 3.11 has no public way to reach the workers."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    for worker in workers:
        with contextlib.suppress(OSError, ValueError):
            worker.kill()
    for worker in workers:
        with contextlib.suppress(OSError, ValueError):
            worker.join(5)
    # with the workers gone the pool breaks at once; waiting lets it release its queues
    # (no "leaked semaphore" warning from the resource tracker)
    pool.shutdown(wait=True, cancel_futures=True)


def run_local(runs: list[RunOptions], workers: int, report: Report) -> None:
    """A spawn pool: workers never inherit the parent's threads or open files."""
    if not runs:
        return
    for name in THREAD_VARIABLES:  # runs are the parallelism: one BLAS thread per worker
        os.environ.setdefault(name, "1")
    context = multiprocessing.get_context("spawn")
    workers = min(workers, len(runs))
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(os.getpid(), workers),
    )
    try:
        futures = {pool.submit(run_one, options): options for options in runs}
        for future in as_completed(futures):
            try:
                report(future.result())
            except Exception as exc:  # the worker process died (killed, out of memory)
                report(Outcome(run_id(futures[future]), FAILED, f"worker died: {exc!r}"))
    except BaseException:  # Ctrl-C or a failing report: no run goes on without us
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)


def require_slurm() -> None:
    """A one-line error (exit 2) before anything is written, where SLURM is absent."""
    missing = [name for name in SLURM_COMMANDS if shutil.which(name) is None]
    if missing:
        raise UsageError(
            f"--executor slurm: {', '.join(missing)} not found on PATH; run on a SLURM "
            "login node, or use --executor local (or --sbatch to write a job script)"
        )


def _setup_lines() -> list[str]:
    """Jobs unpickle run_one by reference: they must import simulate/ and workloads/ too,
    whatever environment the site's sbatch passes on."""
    checkout = str(Path(__file__).resolve().parents[2])  # read here: gem5 embeds no file
    return [f"export PYTHONPATH={shlex.quote(checkout)}${{PYTHONPATH:+:$PYTHONPATH}}"]


def submit(
    runs: list[RunOptions], folder: Path, executor: str, resources: dict[str, Any]
) -> list[Any]:
    """One job array (one task per run) with the spec's resources; returns the jobs."""
    import submitit

    if executor == "slurm":
        require_slurm()
    pool = submitit.AutoExecutor(folder=folder / "%j", cluster=SUBMITIT_CLUSTERS[executor])
    parameters = submitit_parameters(resources)
    if executor == "slurm":
        parameters["slurm_setup"] = _setup_lines()
    pool.update_parameters(name="sweep", **parameters)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's stderr
            return pool.map_array(run_one, runs)
    except (OSError, RuntimeError) as exc:  # sbatch refused: no controller, bad partition
        raise UsageError(f"--executor {executor}: submission failed: {_last_error(exc)}") from None


def _last_error(exc: BaseException) -> str:
    """The line of a failed command's output that says what went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [type(exc).__name__])[-1]


def _refresh(jobs: list[Any]) -> None:
    """One sacct call for every unfinished job of the array."""
    watcher = getattr(jobs[0], "watcher", None)
    if watcher is not None and hasattr(watcher, "update"):
        watcher.update()


def wait(jobs: list[Any], runs: list[RunOptions], report: Report) -> None:
    """Report each job as it finishes; a job that ended without a result (cancelled,
    timed out, out of memory, node lost) is a failed run."""
    pending = dict(zip((id(job) for job in jobs), zip(jobs, runs, strict=True), strict=True))
    last_sacct = time.monotonic()
    while pending:
        if time.monotonic() - last_sacct >= SACCT_EVERY_S:
            _refresh(jobs)
            last_sacct = time.monotonic()
        for key, (job, options) in list(pending.items()):
            if not job.done():
                continue
            del pending[key]
            try:
                report(job.result())
            except Exception as exc:  # the job itself failed, not the simulation
                message = f"job {job.job_id} ({job.state}): {_last_error(exc)}"
                report(Outcome(run_id(options), FAILED, message))
        if pending:
            time.sleep(RESULT_POLL_S)
