"""One training run: a model's batches on one system's board, timed and written out.

The host side generates each batch's inputs just ahead of the simulated machine
(batch N+1 is generated once batch N has started), so memory stays bounded by a few
batches whatever --batches is. Outputs go to --outdir in gem5's layout.
"""

from __future__ import annotations

import resource
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from components import gem5
from components.boards.base import TrainingBoard
from components.energy import EnergyReport
from components.sim.engine import Engine
from components.sim.outputs import global_rows, write_outdir
from components.sim.schedule import Scheduler, critical_path
from components.sim.units import ticks_to_ms
from simulate.configure import (
    batch_size_of,
    connected_board,
    input_generator,
    prepare,
    resolve_functional,
    resolve_spec,
)
from simulate.failures import failure_field, record_run
from simulate.host import drive_batches
from simulate.image_copy import named_as_given, working_image
from simulate.options import RunOptions, SamplePlan, UsageError
from simulate.preflight import check_paths, failure_run
from workloads.models import ModelSpec
from workloads.training import FunctionalTrainer

BREAKDOWN = ("embedding", "transfer", "bottom_mlp", "top_mlp", "checkpoint", "contention")


def validate(options: RunOptions, writes_outdir: bool = True) -> None:
    """Raise the error a run with these options would stop on, without running it.
    Machine-independent (a sweep validates here and may run elsewhere): the memory
    check against this machine is ``preflight.check_memory``."""
    prepare(options)
    check_paths(options, writes_outdir)


def run_job(options: RunOptions) -> dict[str, Any]:
    """Simulate one run and write its outputs; returns results.json's content. A failure
    run simulates once: its recorded run gives both the stats and the failure reference.
    A --pmem-image is changed only once everything else succeeded (image_copy)."""
    if gem5.available() and (options.sample_plan is not None or options.checkpoint != "paper"):
        raise UsageError("under gem5 a run replays every batch of the paper's protocols: "
                         "drop --sample and --checkpoint")  # fmt: skip
    if gem5.available() and options.pool_jobs > 1:
        raise UsageError("the gem5 realization replays one job: drop --pool-jobs")
    if options.sample_plan is not None:
        from simulate.sampling import run_sampled  # it builds on this module

        return run_sampled(options, SamplePlan.parse(options.sample_plan))
    with working_image(options) as working:
        return _run_job(options, working)


def _run_job(options: RunOptions, working: RunOptions) -> dict[str, Any]:
    started = time.monotonic()
    recorded, pool_ends = None, []
    if failure_run(options):
        recorded = record_run(working)
        spec, batch_size = resolve_functional(options)
        board, scheduler, ends = recorded.board, recorded.scheduler, recorded.ends
        trainer, generator = recorded.trainer, recorded.generator
        sim_ticks = recorded.end_tick
    else:
        spec, batch_size, board, scheduler, ends, trainer, generator, sim_ticks, pool_ends = (
            _simulate(options)
        )
    results = summarize(options, spec, batch_size, board, scheduler, ends, pool_ends)
    if trainer is not None and options.functional:
        results["train"] = {
            "loss": [round(x, 7) for x in trainer.losses],
            **trainer.evaluate(generator),
        }
    if recorded is not None:
        failure = failure_field(working, recorded)
        results["failure"] = named_as_given(failure, working, options)
    if gem5.available():  # under gem5.opt: the memory ops again, timed by gem5
        from simulate.gem5_run import run_under_gem5

        results["gem5"] = run_under_gem5(options)
        adopt_gem5_batch_times(results)
    rows = global_rows(sim_ticks, time.monotonic() - started, _peak_memory())
    rows += board.stat_rows()
    rows += resource_rows(scheduler.network.use, sim_ticks)
    config = {"options": options_dict(options, spec, batch_size), "board": board.config()}
    plots = (lambda staging: plot_run(staging, results)) if options.plot else None
    write_outdir(Path(options.outdir), rows, config, results, scheduler.records, plots)
    return results


def adopt_gem5_batch_times(results: dict[str, Any]) -> None:
    """Under gem5 the batch times are gem5's (its concurrent replay, between batch ends,
    over the same steady-state batches); the built-in engine's stay beside them as
    ``builtin_batch_time_ms`` and ``builtin_batch_times_ms``. The rest (breakdown,
    energy, utilisation) is the built-in engine's."""
    times = np.array([b["gem5"]["concurrent"] for b in results["gem5"]["batches"]], np.float64)
    steady = times[steady_batches(times.size)]
    results["builtin_batch_time_ms"] = results["batch_time_ms"]
    results["builtin_batch_times_ms"] = results["batch_times_ms"]
    results["batch_time_ms"] = {
        "mean": _ms(steady.mean()),
        "p50": _ms(np.percentile(steady, 50)),
        "p99": _ms(np.percentile(steady, 99)),
    }
    results["batch_times_ms"] = [_ms(t) for t in times]
    results["batch_time_source"] = "gem5"


def _simulate(options: RunOptions):
    """The plain run: timing, and the numerics too with --functional."""
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    engine = Engine()
    scheduler = Scheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    generator = input_generator(options, spec, batch_size)
    trainer = (
        FunctionalTrainer.create(
            spec, options.seed, relaxed=options.system == "cxl", replicas=board.gpu_count
        )
        if options.functional
        else None
    )
    pool = [
        (input_generator(replace(options, seed=options.seed + job), spec, batch_size), [])
        for job in range(1, options.pool_jobs)
    ]  # each job its own inputs
    ends = drive_batches(
        engine, board, spec, generator, range(options.batches), trainer=trainer,
        desc=f"{options.system}/{options.model}", progress=options.progress, pool=pool,
    )  # fmt: skip
    pool_ends = [job_ends for _, job_ends in pool]
    return spec, batch_size, board, scheduler, ends, trainer, generator, engine.now, pool_ends


def plot_run(outdir: Path, results: dict[str, Any]) -> None:
    """timeline.png (the first three batches) and breakdown.png of one run."""
    from components.sim import plots

    title = f"{results['system']} / {results['model']}"
    rows = plots.read_timeline(outdir / "timeline.csv")
    plots.plot_timeline(rows, range(3), f"{title}: batches 0-2", outdir / "timeline.png")
    plots.plot_breakdown(
        [results], [title], "mean batch, critical-path breakdown", outdir / "breakdown.png"
    )


def summarize(
    options: RunOptions,
    spec: ModelSpec,
    batch_size: int,
    board: TrainingBoard,
    scheduler: Scheduler,
    ends: list,
    pool_ends: list[list] = (),
) -> dict[str, Any]:
    """Per-batch windows between consecutive batch ends, their critical paths (with
    the time lost to contention, by the category of the ops that caused it), energy;
    a pool's other jobs' own (``pool_ends``) under ``jobs``."""
    board.absorb(scheduler)
    windows, times, breakdown, idle, contention, steady = _windows(board, scheduler, ends)
    sim_ticks = max([ends[-1].record.end] + [e[-1].record.end for e in pool_ends if e])
    energy = EnergyReport.build(board, sim_ticks).as_dict()
    busy = {name: unit.busy_ticks / sim_ticks for name, unit in scheduler.resources.items()}
    use = scheduler.network.use
    return {
        "system": options.system,
        "model": spec.name,
        "batches": options.batches,
        "batch_size": batch_size,
        "seed": options.seed,
        "batch_time_ms": {
            "mean": _ms(times.mean()),
            "p50": _ms(np.percentile(times, 50)),
            "p99": _ms(np.percentile(times, 99)),
        },
        "breakdown_ms": {key: _ms(value) for key, value in breakdown.items()},
        "contention_by_ms": {key: _ms(value) for key, value in contention.items()},
        "idle_ms": _ms(idle),
        "batch_times_ms": [_ms(w) for w in windows],
        "steady_state_from_batch": range(len(windows))[steady][0],
        "steady_state_to_batch": range(len(windows))[steady][-1],
        **_pool_jobs(board, scheduler, pool_ends),
        "utilisation": {name: round(value, 6) for name, value in sorted(busy.items())},
        "resource_utilisation": {
            key: round(use[key].busy / sim_ticks, 6) for key in sorted(use) if sim_ticks
        },
        "energy_j": _round_tree(energy),
        "failure": None,
    }


def _windows(board, scheduler: Scheduler, ends: list, job: int = 0):
    """One job's batch windows (recorded in its stats), steady-state times, critical-path
    breakdown (with the all-reduce where GPUs all-reduce), idle and contention."""
    windows, paths, blame = batch_windows(scheduler, ends)
    for window in windows:
        board.record_batch(window, job=job) if job else board.record_batch(window)
    steady = steady_batches(len(windows))
    times = np.array(windows[steady], dtype=np.float64)
    keys = BREAKDOWN + tuple(k for k in ("allreduce",) if any(k in p for p in paths))
    breakdown = {key: float(np.mean([p.get(key, 0) for p in paths[steady]])) for key in keys}
    idle = float(np.mean([p.get("idle", 0) for p in paths[steady]]))
    causes = sorted({key for b in blame[steady] for key in b})
    contention = {key: float(np.mean([b.get(key, 0.0) for b in blame[steady]])) for key in causes}
    return windows, times, breakdown, idle, contention, steady


def _pool_jobs(board, scheduler: Scheduler, pool_ends: list[list]) -> dict[str, Any]:
    """A pooled run's other jobs: each one's batch time, breakdown and contention."""
    if not pool_ends:
        return {}
    jobs = []
    for job, ends in enumerate(pool_ends, start=1):
        windows, times, breakdown, idle, contention, _ = _windows(board, scheduler, ends, job)
        jobs.append({
            "job": job,
            "batch_time_ms": {"mean": _ms(times.mean()), "p99": _ms(np.percentile(times, 99))},
            "breakdown_ms": {key: _ms(value) for key, value in breakdown.items()},
            "contention_by_ms": {key: _ms(value) for key, value in contention.items()},
            "batch_times_ms": [_ms(w) for w in windows],
        })  # fmt: skip
    return {"jobs": jobs}


def batch_windows(scheduler: Scheduler, ends: list) -> tuple[list[int], list[dict], list[dict]]:
    """Each batch's window (from the previous batch's end to its own), the critical
    path's breakdown of it, and the contention on that path by the category of the ops
    that caused it."""
    windows, paths, blame, start = [], [], [], 0
    for op in ends:
        end = op.record.end
        windows.append(end - start)
        by_category: dict[str, float] = {}
        paths.append(critical_path(scheduler.records, op.record.uid, start, by_category))
        blame.append(by_category)
        start = end
    return windows, paths, blame


def steady_batches(count: int) -> slice:
    """The batches a steady-state mean is taken over. Batch 0 warms up (empty buffers,
    no previous batch's background work beside it) and the last batch's window has no
    next batch competing with its background work (CXL RM1: 8.6 ms against 9.3-9.4 ms
    for the batches before it): both are left out where batches lie between them."""
    if count >= 3:
        return slice(1, count - 1)
    return slice(1, None) if count == 2 else slice(None)


def resource_rows(use: dict, sim_ticks: int) -> list[tuple]:
    """gem5-style stat rows for every shared resource the flow network served."""
    rows = []
    for key in sorted(use):
        served = use[key]
        rows += [
            (f"{key}.busyTicks", round(served.busy), "ticks of full-speed work served", "Tick"),
            (
                f"{key}.utilisation",
                round(served.busy / sim_ticks, 9) if sim_ticks else 0.0,
                "busy ticks per simulated tick",
                "Ratio",
            ),
            (
                f"{key}.queueingTicks",
                round(served.queueing),
                "op time lost waiting for this resource behind other ops",
                "Tick",
            ),
            (f"{key}.bytes", round(served.bytes), "bytes moved through it", "Byte"),
        ]
    return rows


def _ms(ticks: float) -> float:
    return round(ticks_to_ms(float(ticks)), 6)


def _round_tree(value):
    if isinstance(value, dict):
        return {key: _round_tree(item) for key, item in value.items()}
    return round(float(value), 9)


def _peak_memory() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def options_dict(options: RunOptions, spec: ModelSpec, batch_size: int) -> dict[str, Any]:
    """config.json's ``options``: the run's options as resolved."""
    data = dict(vars(options))
    board, custom = data.pop("board"), data.pop("spec")
    if board is not None:  # config.json's board tree has its parameters
        data["board_class"] = f"{type(board).__module__}.{type(board).__qualname__}"
    if custom is not None:
        data["model_spec"] = asdict(custom)
    data["sets"] = [f"{path}={value}" for path, value in options.sets]
    data["batch_size"] = batch_size
    data["rows_per_table"] = list(spec.rows_per_table)
    return data
