"""One sweep run, as executed in a worker process or a SLURM job.

Module-level and picklable so that ProcessPoolExecutor (spawn) and submitit can call it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from simulate.run.cli import raise_received
from simulate.run.options import RunOptions
from simulate.sweeps import store
from simulate.sweeps.runid import canonical, run_id

DONE, SKIPPED, FAILED = "done", "skipped", "failed"


@dataclass(frozen=True)
class Outcome:
    id: str
    status: str
    message: str = ""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    detail = text[0] if text else ""
    if isinstance(exc, ValueError):
        return detail or type(exc).__name__
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def run_one(options: RunOptions) -> Outcome:
    """Simulate one run into a temp dir and rename it into outroot/<id> when complete.

    Errors become a failed/<id>.txt entry and a FAILED outcome, so a sweep goes on.
    """
    from simulate.simulator import run_job

    final = Path(options.outdir)
    outroot, identity = final.parent, run_id(options)
    if final.name != identity:
        raise ValueError(f"outdir {final} is not named by the run id {identity}")
    if store.is_complete(outroot, identity):
        return Outcome(identity, SKIPPED)
    outroot.mkdir(parents=True, exist_ok=True)
    store.clean_stale(outroot, identity)
    tmp = store.temp_dir(outroot, identity)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        run_job(replace(options, outdir=str(tmp), progress=False))
        raise_received()  # a Ctrl-C that a finalizer dropped: this run is not done
        placed = store.finalize(outroot, identity, tmp, canonical(options))
    except Exception as exc:  # a sweep records any run's failure and goes on
        shutil.rmtree(tmp, ignore_errors=True)
        if store.is_complete(outroot, identity):
            return Outcome(identity, SKIPPED)
        message = _one_line(exc)
        store.record_failure(outroot, identity, message, canonical(options))
        return Outcome(identity, FAILED, message)
    except BaseException:  # Ctrl-C, SystemExit: stop, but leave no temp dir behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Outcome(identity, DONE if placed else SKIPPED)
