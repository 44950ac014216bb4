"""The memory ops of a run timed by gem5's own controllers (only under gem5.opt).

Imported lazily by workloads/job.py when ``components.gem5.available()``; see
docs/gem5.md for what is realized and what was verified.
"""

from __future__ import annotations

from typing import Any

from components.gem5.ops import batch_ops
from components.sim.engine import Engine
from components.sim.schedule import Scheduler
from workloads.configure import batch_size_of, connected_board, resolve_spec
from workloads.inputs import InputGenerator
from workloads.opgraph import build_demand
from workloads.options import RunOptions

START_TICK = 1000  # 1 ns


def run_under_gem5(options: RunOptions) -> dict[str, Any]:
    """Run the memory ops of ``options.batches`` batches in gem5, one op at a time.

    Returns ``{"backend": "gem5", "ops": [{"batch", "op", "ticks"}...], "failure"}``.
    Each batch's demand is built exactly as workloads/job.py builds it.
    """
    import m5

    from components.gem5.runner import Gem5Runner, PowerFailure
    from components.gem5.system import build

    spec, batch_size = resolve_spec(options), batch_size_of(options)
    engine = Engine()
    board = connected_board(options, spec, batch_size, engine, Scheduler(engine))
    sim = build(board)
    m5.instantiate()
    # a generator whose first packet is refused at tick 0 trips gem5's retry assertion
    # (BaseTrafficGen uses retryPktTick == 0 as "no retry"): start off tick 0
    m5.simulate(START_TICK)
    runner = Gem5Runner(sim)
    inputs = InputGenerator(spec, batch_size, seed=options.seed)
    ops, failure, previous = [], None, None
    try:
        for n in range(options.batches):
            batch = inputs.batch(n)
            demand = build_demand(spec, batch, n, previous)
            previous = batch
            for op in batch_ops(board, demand, sim.gpu_range[0]):
                ops.append({"batch": n, "op": op.name, "ticks": runner.run_op(op)})
    except PowerFailure as cut:
        failure = {"tick": cut.tick, "op": cut.op.name, "batch": cut.op.batch}
    return {"backend": "gem5", "ops": ops, "failure": failure}
