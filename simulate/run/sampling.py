"""Sampled simulation: a systematic sample of batches in full detail, the rest skipped.

As in SMARTS (Wunderlich et al., ISCA 2003), a run of B batches is measured on units
spread every ``period`` batches: each unit simulates ``warmup`` batches in detail to
refill the buffers, queues and the pipeline overlap of consecutive batches, then
``units`` measured batches, then one more batch so that the last measured one has its
successor competing with its background work, as in a full run. Between units nothing
is timed: what outlives a batch is carried (the board's ``carried_state``) and advanced
functionally, by address (the SSD's vector cache sees every skipped batch's rows) or by
the per-batch progress the detailed batches measured (the relaxed MLP log's position).
Each unit's mean is one observation; means come with a Student-t 95% interval over the
units. Where the sample cannot represent a mechanism (too few units, units that all
meet the MLP log at one phase) the results say so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from components.sim.engine import Engine
from components.sim.outputs import global_rows, write_outdir
from components.sim.schedule import Scheduler
from components.sim.units import ticks_to_ms
from simulate.run.batch_stats import batch_time_summary
from simulate.run.configure import batch_size_of, connected_board, input_generator, resolve_spec
from simulate.run.host import drive_batches
from simulate.run.job import BREAKDOWN, batch_windows, options_dict
from simulate.run.options import RunOptions, SamplePlan
from simulate.run.provenance import provenance
from workloads.opgraph import build_demand


def run_sampled(options: RunOptions, plan: SamplePlan) -> dict[str, Any]:
    """Simulate ``plan``'s units of ``options``' run, write stats.txt, config.json,
    results.json (and the first unit's timeline) and return results.json's content."""
    started = time.monotonic()
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    generator = input_generator(options, spec, batch_size)
    starts = plan.starts(options.batches)
    measured, breakdowns, phases = [], [], []
    previous, rates, done, first_unit = None, {}, 0, None
    bar = tqdm(
        total=len(starts), desc=f"{options.system}/{options.model} sampled", unit="unit",
        disable=None if options.progress else True, file=sys.stderr, leave=False,
    )  # fmt: skip
    for start in starts:
        return_freed_memory()  # the last unit's board and buffers, freed
        first = start - plan.warmup
        engine = Engine()
        scheduler = Scheduler(engine)
        board = connected_board(options, spec, batch_size, engine, scheduler)
        if previous is not None:
            _warm_skipped(previous, spec, generator, range(done, first))
            board.restore_carried(previous.carried_state(), first, first - done, rates)
        state = board.carried_state()
        phases.append((first, state.get("started")))
        batches = range(first, start + plan.units + 1)
        ends = drive_batches(engine, board, spec, generator, batches)
        windows, paths, _ = batch_windows(scheduler, ends)
        keep = slice(plan.warmup, plan.warmup + plan.units)
        measured.append(float(np.mean(windows[keep])))
        breakdowns.append(
            {k: float(np.mean([p.get(k, 0) for p in paths[keep]])) for k in BREAKDOWN}
        )
        rates = _rates(state, board.carried_state(), rates)
        previous, done = board, batches.stop
        if first_unit is None:
            first_unit = (board, scheduler, engine.now)
        bar.update(1)
    bar.close()
    cycle = _copy_cycle(previous.carried_state(), rates)
    warnings = _representativeness(phases, cycle, options.batches)
    results = _results(options, spec.name, batch_size, plan, measured, breakdowns, warnings)
    results["provenance"] = provenance()
    board, scheduler, ticks = first_unit
    rows = global_rows(ticks, time.monotonic() - started, 0) + _stat_rows(results)
    config = {
        "options": {**options_dict(options, spec, batch_size), "sample": vars(plan)},
        "provenance": provenance(),
        "board": board.config(),
    }
    write_outdir(Path(options.outdir), rows, config, results, scheduler.records, None)
    return results


def return_freed_memory() -> None:
    """Hand the pages the C allocator keeps after a unit's board is freed back to the
    system (glibc's malloc_trim), so a run's resident memory stays flat in its units
    instead of growing with the allocator's fragmented free lists (measured: 251 / 307 /
    445 MiB at 1,000 / 3,000 / 10,000 RM1 batches without it). Elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return
    gc.collect()
    trim(0)


def _warm_skipped(board, spec, generator, skipped: range) -> None:
    """Functional warming: each skipped batch's rows pass through the board's
    address-dependent state (only boards that have such state pay for it)."""
    if not board.warms_functionally:
        return
    previous = generator.batch(skipped.start - 1) if skipped.start > 0 else None
    for n in skipped:
        batch = generator.batch(n)
        board.warm(build_demand(spec, batch, n, previous))
        previous = batch


def _rates(before: dict, after: dict, rates: dict) -> dict:
    """Bytes one MLP log slice moves, over every detailed batch that moved some."""
    if "logged" not in after:
        return rates
    logged = rates.get("logged", 0) + after["logged"] - before.get("logged", 0)
    slices = rates.get("slices", 0) + after["slices"] - before.get("slices", 0)
    return {"logged": logged, "slices": slices, "mlp_log_bytes": logged / max(slices, 1)}


def _results(options, model, batch_size, plan, measured, breakdowns, warnings) -> dict[str, Any]:
    batch, few = batch_time_summary(np.array(measured), "sampled units")
    return {
        "system": options.system,
        "model": model,
        "batches": options.batches,
        "batch_size": batch_size,
        "seed": options.seed,
        "batch_time_ms": batch,
        "breakdown_ms": {
            key: _ms(float(np.mean([b[key] for b in breakdowns]))) for key in BREAKDOWN
        },
        "sampling": {
            "period": plan.period,
            "warmup": plan.warmup,
            "units": plan.units,
            "sampled_units": len(measured),
            "detailed_batches": len(measured) * plan.detail,
            "unit_batch_times_ms": [_ms(t) for t in measured],
            "warnings": warnings,
        },
        "warnings": warnings + few,
        "failure": None,
    }


def _copy_cycle(state: dict, rates: dict) -> float | None:
    """Batches from one MLP log copy's start to the next at the measured rate (None:
    no such log): its slices, and the batch that cannot yet see it complete."""
    per_slice = rates.get("mlp_log_bytes", 0.0)
    if not state.get("total") or per_slice <= 0:
        return None
    return math.ceil(state["total"] / per_slice) + 1


def _representativeness(phases: list[tuple], cycle: float | None, batches: int) -> list[str]:
    """Say where the units cannot stand for the whole run: a run that goes through whole
    MLP log copies, sampled at phases of the copy that leave half of it unseen (a period
    that aliases with the copy's length)."""
    if cycle is None or batches < cycle:
        return []
    known = sorted(((first - started) % cycle) / cycle for first, started in phases[1:])
    if len(known) < 2:
        return []
    gaps = np.diff(np.r_[known, known[0] + 1.0])
    if gaps.max() <= 0.5:
        return []
    return [
        f"the units meet the MLP log copy ({cycle:.0f} batches) at phases spanning only "
        f"{1 - gaps.max():.0%} of it: batches that start or finish a copy may be over- or "
        "under-represented; choose a period that does not divide the copy's length"
    ]


def _stat_rows(results: dict[str, Any]) -> list[tuple]:
    sampling, batch = results["sampling"], results["batch_time_ms"]
    ci = batch["ci95_ms"]
    return [
        ("sampling.units", sampling["sampled_units"], "detailed units measured", "Count"),
        ("sampling.period", sampling["period"], "batches between unit starts", "Count"),
        ("sampling.batchTime.mean", batch["mean"], "mean batch time over the units", "ms"),
        (
            "sampling.batchTime.ci95",
            ci if ci is not None else float("nan"),
            "95% confidence half-width of the mean batch time",
            "ms",
        ),
    ]


def _ms(ticks: float) -> float:
    return round(ticks_to_ms(float(ticks)), 6)
