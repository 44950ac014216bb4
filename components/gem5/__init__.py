"""The memory ops of a run realized with stock gem5 SimObjects (docs/gem5.md).

``translate`` and ``ops`` are pure and import anywhere; ``system`` and ``runner`` need
gem5's embedded ``m5`` and are imported only by ``run_under_gem5``.
"""

from __future__ import annotations

import importlib.util
from typing import Any


def available() -> bool:
    """True when running inside gem5.opt (its ``m5`` package is importable)."""
    try:
        return importlib.util.find_spec("m5") is not None
    except ValueError:  # m5 already imported without a spec (embedded module)
        return True


def run_under_gem5(options) -> dict[str, Any]:
    """Run the memory ops of ``options.batches`` batches in gem5, one op at a time.

    Returns ``{"backend": "gem5", "ops": [{"batch", "op", "ticks"}...], "failure"}``.
    The CLI glue reaches up into workloads/ (lazily) to resolve the model and build each
    batch's demand exactly as workloads/job.py does.
    """
    import m5

    from components.gem5.ops import batch_ops
    from components.gem5.runner import Gem5Runner, PowerFailure
    from components.gem5.system import build
    from components.sim.engine import Engine
    from components.sim.schedule import Scheduler
    from workloads.inputs import InputGenerator
    from workloads.job import prepare
    from workloads.opgraph import build_demand

    spec, batch_size, board = prepare(options)
    engine = Engine()
    board.connect(engine, Scheduler(engine), spec, batch_size)
    for path, value in options.sets:
        board.set_by_path(path, value)
    sim = build(board)
    m5.instantiate()
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
