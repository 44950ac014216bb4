"""The entry to every run: the Python API, the CLI over it, and the dispatch of a run to
a plain, a sampled or a failure run (simulate/run/, simulate/failures/).

    from components.boards.cxl import CxlBoard
    from components.memory.pmem import Pmem
    from simulate.simulator import Simulator
    from workloads.workload import DlrmWorkload

    board = CxlBoard()
    board.cxl_mem.pmem = Pmem.optane()  # a component other than the default
    results = Simulator(board=board, workload=DlrmWorkload("rm1"), batches=4).run()

As gem5's stdlib ``Simulator`` drives the board it is handed, this one drives a
``TrainingBoard``: ``run`` writes stats.txt, config.json, results.json and timeline.csv
into ``outdir`` and returns results.json's content (``outdir=None``: nothing is kept
on disk and the stats come back in ``results["stats"]``). ``Simulator.map`` runs several
in parallel. ``BOARDS`` lists the board class of each system. ``configs/trainingcxl.py``
is this class behind an argument parser (``run_from_command_line``), so a script and
the CLI given the same machine produce byte-identical stats.
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from components.boards import BOARDS  # noqa: F401  (the API lists boards here)
from components.boards.base import TrainingBoard
from simulate.arguments import KINDS, WORKLOAD_KINDS, check_arguments
from simulate.failures.run import run_failure_job
from simulate.run.cli import run_main
from simulate.run.configure import prepare
from simulate.run.job import refuse_under_gem5, run_plain
from simulate.run.options import (
    SYSTEMS,
    RunOptions,
    SamplePlan,
    UsageError,
    options_from_args,
    parse_run_options,
)
from simulate.run.prefetch import share_cpus
from simulate.run.preflight import check_memory, check_paths, failure_run
from simulate.run.sampling import run_sampled
from workloads.models import ModelSpec
from workloads.workload import DlrmWorkload


def validate(options: RunOptions, writes_outdir: bool = True) -> None:
    """Raise the error a run with these options would stop on, without running it.
    Machine-independent (a sweep validates here and may run elsewhere): the memory
    check against this machine is ``preflight.check_memory``."""
    prepare(options)
    check_paths(options, writes_outdir)


def run_job(options: RunOptions) -> dict[str, Any]:
    """Simulate one run and write its outputs; returns results.json's content: a
    sampled run, a run with failures (or one recovering a --pmem-image), or a plain one."""
    refuse_under_gem5(options)
    if options.sample_plan is not None:
        return run_sampled(options, SamplePlan.parse(options.sample_plan))
    if failure_run(options):
        return run_failure_job(options)
    return run_plain(options)


class Simulator:
    """One run of ``workload`` on ``board`` (a TrainingBoard, or a system's name as the
    CLI's --system). The options are checked at construction, the way gem5 checks a
    SimObject's parameters at instantiation: a bad value, or a run too large for this
    machine's memory, raises before any simulation.
    The board is copied there too; each simulation of the run (a failure run has
    several) connects a copy of its own, so the board object can be reused."""

    def __init__(
        self,
        board: TrainingBoard | str = "cxl",
        workload: DlrmWorkload | str | ModelSpec | None = None,
        batches: int = 10,
        outdir: str | os.PathLike | None = "m5out",
        *,
        functional: bool = False,
        sets: Mapping[str, Any] | Iterable[str] = (),
        fail_at: Iterable[str] = (),
        fail_random: int = 0,
        fail_device: int | None = None,
        pmem_image: str | os.PathLike | None = None,
        pmem: str | None = None,
        halt_on_failure: bool = False,
        sample: str | None = None,
        checkpoint: str = "paper",
        quantize: str = "none",
        mtbf: float | None = None,
        ckpt_interval: float | None = None,
        store: str | None = None,
        recovery: str | None = None,
        plot: bool = False,
        progress: bool = True,
        gpu: str | None = None,
        gpu_profile: str | os.PathLike | None = None,
        gpus: int = 1,
        cxl_mems: int = 1,
        topology: str | os.PathLike | None = None,
        sharding: str = "table",
        pool_jobs: int = 1,
        input_cache: str | os.PathLike | None = None,
    ) -> None:
        arguments = dict(locals())
        check_arguments(arguments, KINDS)
        workload = _workload(workload)
        check_arguments(vars(workload), WORKLOAD_KINDS, "workload's ")
        fail_at, sets = list(fail_at), sets if isinstance(sets, Mapping) else list(sets)
        self.in_memory = outdir is None
        if self.in_memory:  # checked against a scratch folder; run() makes its own
            outdir = os.path.join(tempfile.gettempdir(), "trainingcxl-in-memory")
        if isinstance(board, str):
            if board not in SYSTEMS:
                raise UsageError(f"unknown system {board!r}; one of {', '.join(SYSTEMS)}")
            system, built = board, None
        elif isinstance(board, TrainingBoard):
            system, built = board.system, copy.deepcopy(board)
        else:
            raise UsageError(f"board must be a TrainingBoard or a system name, got {board!r}")
        spec = workload.spec
        custom = spec if isinstance(workload.model, ModelSpec) else None
        if isinstance(sets, Mapping):
            sets = [f"{path}={value}" for path, value in sets.items()]
        args = argparse.Namespace(
            system=system,
            model=spec.name if custom else workload.model,
            batches=batches,
            batch_size=workload.batch_size,
            seed=workload.seed,
            outdir=None if outdir is None else os.fspath(outdir),
            sets=list(sets),
            functional=functional,
            rows=workload.rows,
            reuse=workload.reuse,
            zipf=workload.zipf,
            trace=None if workload.trace is None else os.fspath(workload.trace),
            fail_at=list(fail_at),
            fail_random=fail_random,
            fail_device=fail_device,
            pmem_image=None if pmem_image is None else os.fspath(pmem_image),
            pmem=pmem,
            progress=progress,
            plot=plot,
            halt_on_failure=halt_on_failure,
            sample_plan=sample,
            checkpoint=checkpoint,
            quantize=quantize,
            mtbf=mtbf,
            ckpt_interval=ckpt_interval,
            gpu=gpu,
            gpu_profile=None if gpu_profile is None else os.fspath(gpu_profile),
            store=store,
            recovery=recovery,
            gpus=getattr(built, "gpu_count", gpus),
            cxl_mems=len(getattr(built, "shards", ())) or cxl_mems,
            topology=None if topology is None else os.fspath(topology),
            per_gpu_batch=None,
            sharding=getattr(built, "sharding", sharding),
            pool_jobs=len(getattr(built, "jobs", ())) or pool_jobs,
            input_cache=None if input_cache is None else os.fspath(input_cache),
        )
        with _in_api_terms():
            self.options = replace(options_from_args(args), board=built, spec=custom)
            validate(self.options)
            check_memory(self.options)

    @classmethod
    def from_options(cls, options: RunOptions) -> Simulator:
        """A simulator for options already parsed (the CLI's), checked the same way."""
        simulator = cls.__new__(cls)
        simulator.options, simulator.in_memory = options, False
        validate(options)
        return simulator

    def run(self) -> dict[str, Any]:
        """Simulate and write the outputs; returns results.json's content (with
        ``outdir=None``, plus ``stats``: every stat's value by name, and nothing kept on
        disk). A run whose memory estimate exceeds what the machine it runs on has is
        refused first (UsageError): a simulator may be built on one machine and run on
        another (Simulator.map, SLURM)."""
        check_memory(self.options)
        if not self.in_memory:
            return run_job(self.options)
        with tempfile.TemporaryDirectory(prefix="trainingcxl-") as scratch:
            results = run_job(replace(self.options, outdir=scratch))
            stats = json.loads((Path(scratch) / "stats.json").read_text())
        return results | {"stats": {name: entry["value"] for name, entry in stats.items()}}

    @staticmethod
    def map(simulators: Sequence[Simulator], workers: int = 1) -> list[dict[str, Any]]:
        """Run each simulator, ``workers`` at a time in forked processes (boards hold
        closures, which no spawned process could be sent); results in the given order.
        Each run must have an outdir of its own, or None."""
        simulators = list(simulators)
        outdirs = [s.options.outdir for s in simulators if not s.in_memory]
        if len(set(outdirs)) < len(outdirs):
            raise UsageError("Simulator.map: two simulators share an outdir; give each its own")
        if not isinstance(workers, int) or workers < 1:
            raise UsageError(f"Simulator.map: workers must be an integer >= 1, got {workers!r}")
        if workers == 1 or len(simulators) < 2:
            return [simulator.run() for simulator in simulators]
        global _MAPPED
        _MAPPED = simulators  # forked workers find them here, by index
        context = multiprocessing.get_context("fork")
        try:
            with ProcessPoolExecutor(
                min(workers, len(simulators)), mp_context=context, initializer=share_cpus,
                initargs=(workers,),
            ) as pool:  # fmt: skip
                return list(pool.map(_run_mapped, range(len(simulators))))
        finally:
            _MAPPED = []


_MAPPED: list[Simulator] = []


def _run_mapped(index: int) -> dict[str, Any]:
    return _MAPPED[index].run()


def _workload(workload: DlrmWorkload | str | ModelSpec | None) -> DlrmWorkload:
    """A DlrmWorkload from what a script gives: one, a preset's name or a ModelSpec."""
    if workload is None:
        return DlrmWorkload()
    if isinstance(workload, str | ModelSpec):
        return DlrmWorkload(workload)
    if not isinstance(workload, DlrmWorkload):
        raise UsageError(
            "workload must be a DlrmWorkload, a model preset's name (rm1..rm4) or a "
            f"ModelSpec, got {type(workload).__name__}"
        )
    return workload


# the CLI's flags in an error, as the Python API's argument names
API_NAMES = {
    "--system": "board",
    "--model": "workload",
    "--set": "sets",
    "--sample": "sample",
    "--batch-size": "workload's batch_size",
    "--seed": "workload's seed",
    "--rows": "workload's rows",
    "--reuse": "workload's reuse",
    "--zipf": "workload's zipf",
    "--trace": "workload's trace",
    "--no-progress": "progress=False",
}


def api_terms(message: str) -> str:
    """An options error reworded for a script: ``--fail-at`` becomes ``fail_at``."""

    def name(match: re.Match) -> str:
        flag = match.group(0)
        return API_NAMES.get(flag, flag[2:].replace("-", "_"))

    return re.sub(r"--[a-z][a-z0-9-]*", name, message)


class _in_api_terms:
    """Re-raise a UsageError from the CLI's checks naming the API's arguments."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, trace) -> bool:
        if isinstance(error, UsageError):
            raise UsageError(api_terms(str(error))) from None
        return False


def compare(simulators: Mapping[str, Simulator]) -> dict[str, dict[str, Any]]:
    """Run each labelled simulator in turn, print its mean batch time, and return the
    results by label (configs/examples/ set a board of their own beside the paper's)."""
    results = {}
    for label, simulator in simulators.items():
        results[label] = simulator.run()
        print(f"{label}: {results[label]['batch_time_ms']['mean']:.3f} ms/batch")
    return results


def run_from_command_line(argv: list[str], prog: str) -> int:
    """The CLI: one error line and exit 2 for bad input, never a traceback."""

    def main() -> int:
        if "--list-params" in argv:
            return list_params([word for word in argv if word != "--list-params"], prog)
        options = parse_run_options(argv, prog, "Simulate DLRM training on a TrainingCXL system.")
        results = Simulator.from_options(options).run()
        batch, head = results["batch_time_ms"], f"{results['system']} {results['model']}"
        if "sampling" in results:
            sampled = results["sampling"]
            half = "no interval" if batch["ci95_ms"] is None else f"+- {batch['ci95_ms']:.3f}"
            print(
                f"{head}: {results['batches']} batches, {sampled['sampled_units']} units "
                f"sampled, {batch['mean']:.3f} ms/batch {half} (95%) -> {options.outdir}"
            )
        else:
            if "builtin_batch_time_ms" in results:  # under gem5: its batch time first
                builtin = results["builtin_batch_time_ms"]["mean"]
                timing = f"{batch['mean']:.3f} ms/batch (gem5; built-in engine {builtin:.3f})"
            else:
                timing = f"{batch['mean']:.3f} ms/batch"
            print(
                f"{head}: {results['batches']} batches, {timing}, "
                f"{results['energy_j']['total']:.3f} J -> {options.outdir}"
            )
        for warning in results["warnings"]:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        return 0

    return run_main(prog, main)


def list_params(argv: list[str], prog: str) -> int:
    """``--list-params``: every --set path of the board these options build (their
    --system, --gpus, --cxl-mems, --topology and --set), with its value as given, unit
    and source, one per line; nothing runs."""
    from simulate.run.configure import prepare

    options = parse_run_options(argv, prog, "List every --set path of a system's board.")
    _, _, board = prepare(options)
    rows = [("path", "value", "unit", "source")]
    for path, (owner, name) in board.param_paths().items():
        param = type(owner)._params[name]
        rows.append((path, str(owner._param_raw[name]), param.unit or "-", param.source or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        print("  ".join([*cells, row[3]]))
    return 0
