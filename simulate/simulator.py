"""The Python API: a board built by composition in a script, run, with the CLI's outputs.

    from components.boards.cxl import CxlBoard
    from components.memory.pmem import Pmem
    from simulate.simulator import Simulator
    from workloads.workload import DlrmWorkload

    board = CxlBoard()
    board.cxl_mem.pmem = Pmem.optane()  # a component other than the default
    results = Simulator(board=board, workload=DlrmWorkload("rm1"), batches=4).run()

As gem5's stdlib ``Simulator`` drives the board it is handed, this one drives a
``TrainingBoard``: ``run`` writes stats.txt, config.json, results.json and timeline.csv
into ``outdir`` and returns results.json's content. ``configs/trainingcxl.py`` is this
class behind an argument parser (``run_from_command_line``), so a script and the CLI
given the same machine produce byte-identical stats.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from components.boards.base import TrainingBoard
from simulate.cli import run_main
from simulate.job import run_job, validate
from simulate.options import SYSTEMS, RunOptions, UsageError, options_from_args, parse_run_options
from simulate.preflight import check_memory
from workloads.models import ModelSpec
from workloads.workload import DlrmWorkload


class Simulator:
    """One run of ``workload`` on ``board`` (a TrainingBoard, or a system's name as the
    CLI's --system). The options are checked at construction, the way gem5 checks a
    SimObject's parameters at instantiation: a bad value raises before any simulation.
    The board is copied there too; each simulation of the run (a failure run has
    several) connects a copy of its own, so the board object can be reused."""

    def __init__(
        self,
        board: TrainingBoard | str = "cxl",
        workload: DlrmWorkload | None = None,
        batches: int = 10,
        outdir: str | os.PathLike | None = None,
        *,
        functional: bool = False,
        sets: Mapping[str, Any] | Iterable[str] = (),
        fail_at: Iterable[str] = (),
        fail_random: int = 0,
        fail_device: int | None = None,
        pmem_image: str | os.PathLike | None = None,
        halt_on_failure: bool = False,
        sample: str | None = None,
        checkpoint: str = "paper",
        quantize: str = "none",
        mtbf: float | None = None,
        ckpt_interval: float | None = None,
        plot: bool = False,
        progress: bool = True,
        gpus: int = 1,
        cxl_mems: int = 1,
        topology: str | os.PathLike | None = None,
        sharding: str = "table",
        pool_jobs: int = 1,
        input_cache: str | os.PathLike | None = None,
    ) -> None:
        workload = workload if workload is not None else DlrmWorkload()
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
            progress=progress,
            plot=plot,
            halt_on_failure=halt_on_failure,
            sample_plan=sample,
            checkpoint=checkpoint,
            quantize=quantize,
            mtbf=mtbf,
            ckpt_interval=ckpt_interval,
            gpus=getattr(built, "gpu_count", gpus),
            cxl_mems=len(getattr(built, "shards", ())) or cxl_mems,
            topology=None if topology is None else os.fspath(topology),
            per_gpu_batch=None,
            sharding=getattr(built, "sharding", sharding),
            pool_jobs=len(getattr(built, "jobs", ())) or pool_jobs,
            input_cache=None if input_cache is None else os.fspath(input_cache),
        )
        self.options = replace(options_from_args(args), board=built, spec=custom)
        validate(self.options)

    @classmethod
    def from_options(cls, options: RunOptions) -> Simulator:
        """A simulator for options already parsed (the CLI's), checked the same way."""
        simulator = cls.__new__(cls)
        simulator.options = options
        validate(options)
        return simulator

    def run(self) -> dict[str, Any]:
        """Simulate and write the outputs; returns results.json's content. A run whose
        memory estimate exceeds what the machine has is refused first (UsageError)."""
        check_memory(self.options)
        return run_job(self.options)


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
            for warning in sampled["warnings"]:
                print(f"{prog}: warning: {warning}", file=sys.stderr)
            return 0
        if "builtin_batch_time_ms" in results:  # under gem5: its batch time first
            builtin = results["builtin_batch_time_ms"]["mean"]
            timing = f"{batch['mean']:.3f} ms/batch (gem5; built-in engine {builtin:.3f})"
        else:
            timing = f"{batch['mean']:.3f} ms/batch"
        print(
            f"{head}: {results['batches']} batches, {timing}, "
            f"{results['energy_j']['total']:.3f} J -> {options.outdir}"
        )
        return 0

    return run_main(prog, main)
