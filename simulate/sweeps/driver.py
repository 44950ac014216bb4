"""Run a validated sweep: skip finished runs, execute the rest, summarize the outcome."""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from simulate.run import configure
from simulate.run.cli import raise_received
from simulate.run.options import RunOptions, UsageError
from simulate.run.preflight import check_memory
from simulate.run.provenance import code_version, provenance
from simulate.sweeps import executors, store
from simulate.sweeps.runid import canonical
from simulate.sweeps.runner import DONE, FAILED, SKIPPED, Outcome, run_one
from simulate.sweeps.spec import BOARD_INDEPENDENT, Run, Sweep

INPUT_CACHE = ".inputs"  # the batches the runs share, removed when the sweep ends


@dataclass
class Summary:
    total: int
    counts: Counter = field(default_factory=Counter)
    failures: list[tuple[Run, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        head = (
            f"sweep: {self.total} runs: {self.counts[DONE]} ran, "
            f"{self.counts[SKIPPED]} already complete, {self.counts[FAILED]} failed"
        )
        return [head] + [
            f"failed: run {run.index} ({run.id}): {message}" for run, message in self.failures
        ]


def status(sweep: Sweep, run: Run) -> str:
    if store.is_complete(sweep.outroot, run.id):
        return "done"
    return "failed" if store.failure_message(sweep.outroot, run.id) else "pending"


def share_inputs(options: list[RunOptions], folder: Path) -> list[RunOptions]:
    """The runs, those that draw the same batches as another given ``folder`` to keep
    them in (workloads/shared_inputs.py): one run generates a batch, the others load it."""
    keys = [configure.inputs_key(run) for run in options]
    runs_of = Counter(keys)
    return [
        replace(run, input_cache=str(folder)) if key is not None and runs_of[key] > 1 else run
        for run, key in zip(options, keys, strict=True)
    ]


def check_same_code(sweep: Sweep, runs: list[Run]) -> None:
    """Refuse to count runs that other code finished as part of this sweep: its table
    would mix results of two code versions under one set of options."""
    code = provenance()["code"]
    done = [run for run in runs if store.is_complete(sweep.outroot, run.id)]
    other = [run for run in done if store.code_of(sweep.outroot, run.id) != code]
    if other:
        found = store.code_of(sweep.outroot, other[0].id) or "unrecorded"
        raise UsageError(
            f"{len(other)} of {len(done)} finished runs under {sweep.outroot} were made by "
            f"other code (run {other[0].index}: code {found}; now {code_version()}); "
            "give a new --outroot, or --allow-mixed to keep them beside new runs"
        )


def check_local_memory(options: list[RunOptions]) -> None:
    """Each distinct run fits this machine's memory (one line and exit 2 before the
    first run otherwise, as the CLI's run would say), checked once per distinct board."""
    seen: set[str] = set()
    for run in options:
        key = repr(replace(run, **BOARD_INDEPENDENT))
        if key not in seen:
            seen.add(key)
            check_memory(run)


def execute(
    sweep: Sweep,
    runs: list[Run],
    executor: str,
    workers: int,
    shared_inputs: bool = True,
    allow_mixed: bool = False,
) -> Summary:
    """Run every unfinished run of runs; a run's failure never stops the others.
    ``shared_inputs``: local runs with the same inputs share their batches;
    ``allow_mixed``: count runs finished by other code as done (else refused)."""
    if executor == "slurm":
        executors.require_slurm()
    else:
        check_local_memory([run.options for run in runs])
    if not allow_mixed:
        check_same_code(sweep, runs)
    sweep.outroot.mkdir(parents=True, exist_ok=True)
    store.clean_stale(sweep.outroot)
    pending = [run for run in runs if not store.is_complete(sweep.outroot, run.id)]
    summary = Summary(len(runs))
    summary.counts[SKIPPED] = len(runs) - len(pending)
    by_id = {run.id: run for run in pending}
    bar = tqdm(
        total=len(runs),
        initial=summary.counts[SKIPPED],
        unit="run",
        file=sys.stderr,
        disable=None,
        desc="sweep",
    )

    def report(outcome: Outcome) -> None:
        raise_received()  # a Ctrl-C that a finalizer dropped stops the sweep here
        summary.counts[outcome.status] += 1
        if outcome.status == FAILED:
            run = by_id[outcome.id]
            summary.failures.append((run, outcome.message))
            if store.failure_message(sweep.outroot, run.id) is None:
                store.record_failure(sweep.outroot, run.id, outcome.message, canonical(run.options))
        bar.update()

    options = [run.options for run in pending]
    cache = sweep.outroot / INPUT_CACHE
    if executor == "local" and shared_inputs:
        options = share_inputs(options, cache)
    try:
        if executor == "local" and len(pending) == 1:
            report(run_one(options[0]))
        elif executor == "local":
            executors.run_local(options, workers, report)
        elif pending:
            jobs = executors.submit(options, sweep.outroot / ".submitit", executor, sweep.slurm)
            executors.wait(jobs, options, report)
    except KeyboardInterrupt:  # the pool's workers are dead: drop their temp dirs now
        store.clean_stale(sweep.outroot)
        raise
    finally:
        bar.close()
        shutil.rmtree(cache, ignore_errors=True)
    summary.failures.sort(key=lambda item: item[0].index)
    return summary
