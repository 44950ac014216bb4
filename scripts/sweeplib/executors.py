"""Where runs execute: a local spawn process pool, or SLURM job arrays through submitit.

Both report each Outcome as it arrives, so the caller can drive a progress bar and a
killed sweep has already recorded everything that finished.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from sweeplib.runid import run_id
from sweeplib.runner import FAILED, Outcome, run_one
from sweeplib.slurm import submitit_parameters
from workloads.options import RunOptions

Report = Callable[[Outcome], None]
PACKAGE_ROOTS = (Path(__file__).resolve().parents[2], Path(__file__).resolve().parents[1])
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
SUBMITIT_CLUSTERS = {"slurm": "slurm", "debug": "debug"}


def run_local(runs: list[RunOptions], workers: int, report: Report) -> None:
    """A spawn pool: workers never inherit the parent's threads or open files."""
    if not runs:
        return
    for name in THREAD_VARIABLES:  # runs are the parallelism: one BLAS thread per worker
        os.environ.setdefault(name, "1")
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context) as pool:
        futures = {pool.submit(run_one, options): options for options in runs}
        for future in as_completed(futures):
            try:
                report(future.result())
            except Exception as exc:  # the worker process died (killed, out of memory)
                report(Outcome(run_id(futures[future]), FAILED, f"worker died: {exc!r}"))


def _export_pythonpath() -> None:
    """Jobs unpickle run_one by reference: they must import sweeplib and workloads too."""
    paths = [str(p) for p in PACKAGE_ROOTS]
    current = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([current] if current else []))


def submit(
    runs: list[RunOptions], folder: Path, executor: str, resources: dict[str, Any]
) -> list[Any]:
    """One job array (one task per run) with the spec's resources; returns the jobs."""
    import submitit

    _export_pythonpath()
    pool = submitit.AutoExecutor(folder=folder / "%j", cluster=SUBMITIT_CLUSTERS[executor])
    pool.update_parameters(name="sweep", **submitit_parameters(resources))
    return pool.map_array(run_one, runs)


def wait(jobs: list[Any], runs: list[RunOptions], report: Report) -> None:
    """Report each job as it finishes; a crashed job (timeout, OOM) is a failed run."""
    import submitit

    ids = {id(job): run_id(options) for job, options in zip(jobs, runs, strict=True)}
    for job in submitit.helpers.as_completed(jobs, poll_frequency=5):
        try:
            report(job.result())
        except Exception as exc:  # the job itself failed, not the simulation
            lines = str(exc).strip().splitlines() or [type(exc).__name__]
            report(Outcome(ids[id(job)], FAILED, f"job {job.job_id}: {lines[-1]}"))
