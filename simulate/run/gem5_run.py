"""The memory ops of a run replayed by gem5 (only under gem5.opt; docs/gem5.md).

The run is simulated once more by the built-in engine with a recording scheduler
(components/gem5/record.py), so gem5 replays exactly the streams that engine priced;
then each op runs in gem5 twice, on a stdlib board (components/gem5/board.py) run by
gem5's stdlib ``Simulator``: at its built-in start next to the others (concurrent)
and by itself (alone). Both sides' durations per op come back together.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from components.gem5.ops import (
    ShardedBatch,
    Unrealizable,
    check_realizable,
    multi_device,
    plan_ops,
    sampled,
)
from components.gem5.record import RecordingScheduler, record_devices
from components.sim.engine import Engine
from simulate.run.configure import (
    batch_size_of,
    connected_board,
    input_generator,
    prepare,
    resolve_spec,
)
from simulate.run.host import drive_batches
from simulate.run.options import RunOptions, parse_run_options


def refusal(argv: list[str]) -> str | None:
    """Why gem5 cannot replay the run these options describe (one line), or None (also
    when the options themselves are wrong: the run reports that)."""
    try:
        _, _, board = prepare(parse_run_options(argv, "trainingcxl.py", ""))
        check_realizable(board)
    except Unrealizable as exc:
        return str(exc)
    except ValueError:
        return None
    return None


def record_builtin(options: RunOptions):
    """The built-in run with every stage and stream recorded: (board, traces, demands);
    a disaggregated board's demands keep each CXL-MEM's part (ShardedBatch)."""
    spec, batch_size = resolve_spec(options), batch_size_of(options)
    engine = Engine()
    scheduler = RecordingScheduler(engine)
    board = connected_board(options, spec, batch_size, engine, scheduler)
    record_devices(board, scheduler)
    sharded = multi_device(board)
    inputs = input_generator(options, spec, batch_size)
    demands = {}

    def issued(n: int, demand, ops) -> None:
        demands[n] = ShardedBatch(demand, tuple(ops.extra["demands"])) if sharded else demand
        scheduler.created_after = ops.lookup.record.uid  # later ops: the next batch's

    drive_batches(engine, board, spec, inputs, range(options.batches), issued=issued)
    return board, scheduler.traces, demands


@contextmanager
def _quiet():
    """gem5's info messages off while the replay runs: every exit event re-enters the
    event queue with one ("Entering event queue @ ..."); warnings stay."""
    from _m5.core import LogLevel, setLogLevel

    setLogLevel(LogLevel.WARN)
    try:
        yield
    finally:
        setLogLevel(LogLevel.HACK)  # gem5's default: every message on


def run_under_gem5(options: RunOptions, sample: int = 0) -> dict[str, Any]:
    """Built-in and gem5 durations (ticks) of each memory op, concurrent and alone, and
    of each batch (concurrent: between batch ends; alone: its memory ops' sum).
    ``sample``: replay at most that many packets per stream (a smoke run)."""
    from gem5.simulate.simulator import Simulator

    from components.gem5.board import ReplayBoard
    from components.gem5.runner import Replay

    started = time.monotonic()
    board, traces, demands = record_builtin(options)
    check_realizable(board)
    plans = plan_ops(board, traces, demands)
    if sample:
        plans = sampled(plans, sample)
    builtin_wall = time.monotonic() - started
    gem5_board = ReplayBoard(board, plans)
    with tempfile.TemporaryDirectory(prefix="trainingcxl-gem5-") as workdir, _quiet():
        replay = Replay(gem5_board.get_processor().pools(), Path(workdir))
        simulator = Simulator(board=gem5_board, on_exit_event=replay.handlers())
        replay.attach(simulator)
        simulator.run()  # to the board's start tick
        started = time.monotonic()
        base = simulator.get_current_tick()
        spans = replay.concurrent(plans)
        concurrent_wall = time.monotonic() - started
        started = time.monotonic()
        alone = replay.alone(plans)
        alone_wall = time.monotonic() - started
    ops, batches = [], []
    for plan in plans:
        uid, trace = plan.trace.record.uid, plan.trace
        if plan.realized:
            begin, end = spans[uid]
            ops.append(
                {
                    "batch": plan.batch,
                    "op": plan.name,
                    "builtin": {"concurrent": trace.builtin_ticks, "alone": trace.builtin_alone},
                    "gem5": {"concurrent": end - begin, "alone": sum(alone[uid])},
                    "stages_alone": [
                        [stage.builtin_alone, ticks]
                        for stage, ticks in zip(plan.stages, alone[uid], strict=True)
                    ],
                }
            )
        if plan.name == "batch_end":
            previous = batches[-1]["ends"] if batches else (0, base)
            batch_ops = [op for op in ops if op["batch"] == plan.batch]
            batches.append(
                {
                    "batch": plan.batch,
                    "ends": (trace.record.end, spans[uid][1]),
                    "builtin": {
                        "concurrent": trace.record.end - previous[0],
                        "alone": sum(op["builtin"]["alone"] for op in batch_ops),
                    },
                    "gem5": {
                        "concurrent": spans[uid][1] - previous[1],
                        "alone": sum(op["gem5"]["alone"] for op in batch_ops),
                    },
                }
            )
    for batch in batches:
        del batch["ends"]
    return {
        "backend": "gem5",
        "ops": ops,
        "batches": batches,
        "wall_s": {
            "builtin_recorded": round(builtin_wall, 3),
            "gem5_concurrent": round(concurrent_wall, 3),
            "gem5_alone": round(alone_wall, 3),
        },
    }
