"""One run without failures: a model's batches on one system's board, timed, summarized
and written out (the failure room adds its ``failure`` field through ``write_run``).

The host side generates each batch's inputs just ahead of the simulated machine
(batch N+1 is generated once batch N has started), so memory stays bounded by a few
batches whatever --batches is. Outputs go to --outdir in gem5's layout.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from components import gem5
from components.boards.base import TrainingBoard
from components.energy import EnergyReport
from components.sim.engine import Engine
from components.sim.outputs import global_rows, write_outdir
from components.sim.schedule import Scheduler, critical_path
from components.sim.units import ticks_to_ms, ticks_to_seconds
from simulate.run.batch_stats import batch_time_summary
from simulate.run.configure import (
    batch_size_of,
    connected_board,
    input_generator,
    resolve_spec,
)
from simulate.run.host import drive_batches
from simulate.run.options import RunOptions, UsageError
from simulate.run.provenance import provenance
from workloads.models import ModelSpec
from workloads.training import FunctionalTrainer

BREAKDOWN = ("embedding", "transfer", "bottom_mlp", "top_mlp", "checkpoint", "contention")


@dataclass
class Simulated:
    """What one simulation of a run leaves for its outputs: the model and batch size
    as resolved, the board and scheduler as they ended, the batches' end ops, the
    functional trainer and its inputs (functional runs), the end tick and a pool's
    other jobs' end ops."""

    spec: ModelSpec
    batch_size: int
    board: TrainingBoard
    scheduler: Scheduler
    ends: list
    trainer: FunctionalTrainer | None
    generator: Any
    sim_ticks: int
    pool_ends: list[list] = field(default_factory=list)


def refuse_under_gem5(options: RunOptions) -> None:
    """What the gem5 realization cannot replay, refused before any work."""
    if gem5.available() and (options.sample_plan is not None or options.checkpoint != "paper"):
        raise UsageError("under gem5 a run replays every batch of the paper's protocols: "
                         "drop --sample and --checkpoint")  # fmt: skip
    if gem5.available() and options.pool_jobs > 1:
        raise UsageError("the gem5 realization replays one job: drop --pool-jobs")


def run_plain(options: RunOptions) -> dict[str, Any]:
    """A run without failures: simulate every batch and write the outputs; returns
    results.json's content."""
    started = time.monotonic()
    return write_run(options, simulate_plain(options), started)


def write_run(
    options: RunOptions,
    run: Simulated,
    started: float,
    extra: Callable[[], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Summarize a simulated run, add the fields ``extra`` makes once the summary is
    taken (the failure room's ``failure``), replay it under gem5 where gem5 runs this,
    and write the outdir."""
    results = summarize(
        options, run.spec, run.batch_size, run.board, run.scheduler, run.ends, run.pool_ends
    )
    if run.trainer is not None and options.functional:
        results["train"] = {
            "loss": [round(x, 7) for x in run.trainer.losses],
            **run.trainer.evaluate(run.generator),
        }
    if extra is not None:
        results.update(extra())
    if gem5.available():  # under gem5.opt: the memory ops again, timed by gem5
        from simulate.run.gem5_run import run_under_gem5

        results["gem5"] = run_under_gem5(options)
        adopt_gem5_batch_times(results)
    rows = global_rows(run.sim_ticks, time.monotonic() - started, _peak_memory())
    rows += run.board.stat_rows()
    rows += resource_rows(run.scheduler.network.use, run.sim_ticks)
    results["provenance"] = provenance()
    config = {
        "options": options_dict(options, run.spec, run.batch_size),
        "provenance": provenance(),
        "board": run.board.config(),
    }
    plots = (lambda staging: plot_run(staging, results)) if options.plot else None
    write_outdir(Path(options.outdir), rows, config, results, run.scheduler.records, plots)
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
    results["batch_time_ms"], _ = batch_time_summary(steady, "steady batches")
    results["batch_times_ms"] = [_ms(t) for t in times]
    results["batch_time_source"] = "gem5"


def simulate_plain(options: RunOptions) -> Simulated:
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
    return Simulated(
        spec, batch_size, board, scheduler, ends, trainer, generator, engine.now, pool_ends
    )


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
    energy["per_steady_batch"] = _energy_per_batch(energy, sim_ticks, times.mean(), len(ends))
    busy = {name: unit.busy_ticks / sim_ticks for name, unit in scheduler.resources.items()}
    use = scheduler.network.use
    batch, warnings = batch_time_summary(times, "steady batches")
    return {
        "system": options.system,
        "model": spec.name,
        "batches": options.batches,
        "batch_size": batch_size,
        "seed": options.seed,
        "batch_time_ms": batch,
        "breakdown_ms": {key: _ms(value) for key, value in breakdown.items()},
        "contention_by_ms": {key: _ms(value) for key, value in contention.items()},
        "idle_ms": _ms(idle),
        "batch_times_ms": [_ms(w) for w in windows],
        "steady_state_from_batch": range(len(windows))[steady][0],
        "steady_state_to_batch": range(len(windows))[steady][-1],
        **_pool_jobs(board, scheduler, pool_ends),
        "unit_utilisation": {name: round(value, 6) for name, value in sorted(busy.items())},
        "resource_utilisation": {
            key: round(use[key].busy / sim_ticks, 6) for key in sorted(use) if sim_ticks
        },
        "energy_j": _round_tree(energy),
        "warnings": warnings,
        "failure": None,
    }


def _energy_per_batch(energy: dict, sim_ticks: int, steady_ticks: float, batches: int) -> float:
    """Joules of one steady batch: the run's static power over the steady batch time,
    plus its dynamic energy shared over its batches (each batch does the same work; the
    whole run's energy also pays for the warm-up batch and the last batch's tail)."""
    static_watts = energy["static"] / ticks_to_seconds(sim_ticks) if sim_ticks else 0.0
    return static_watts * ticks_to_seconds(steady_ticks) + energy["dynamic"] / max(batches, 1)


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
            (f"{key}.servedTicks", round(served.busy), "ticks of full-speed work served", "Tick"),
            (
                f"{key}.utilisation",
                round(served.busy / sim_ticks, 9) if sim_ticks else 0.0,
                "served ticks per simulated tick",
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
