"""A checkpoint policy of your own: CXL-B's undo logs, but waited for at batch end.

    python configs/examples/synchronous_undo_log.py --batches 4 --outdir m5out/sync-undo

CXL-B writes its batch-aware undo logs in the background, and the next batch does not
wait for them. This board keeps the same logs and the same recovery (it is a CXL-B
board, so failure runs and crashcheck judge it by CXL-B's protocol) but ends a batch
only once both logs are durable, and starts the next batch after that: the ablation
that shows what running the checkpoint in the background buys. Two template methods
are overridden and nothing else, as gem5's HighBandwidthMemory does to ChanneledMemory.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("synchronous_undo_log.py")

from components.boards.base import BatchOps  # noqa: E402
from components.boards.cxl import CxlBBoard  # noqa: E402
from components.sim.schedule import Op  # noqa: E402
from simulate.run.cli import QuietParser, run_main  # noqa: E402
from simulate.simulator import Simulator, compare  # noqa: E402
from workloads.workload import DlrmWorkload  # noqa: E402


class SynchronousUndoBoard(CxlBBoard):
    """CXL-B whose batch ends when its embedding and MLP undo logs are durable."""

    def checkpoint(self, ops: BatchOps, prev: BatchOps | None) -> list[Op]:
        return [ops.extra["emb_log"], ops.extra["mlp_log"]]

    def next_batch_gate(self, prev: BatchOps | None) -> list[Op]:
        return [prev.end] if prev is not None else []


def main(argv: list[str]) -> int:
    parser = QuietParser(prog="synchronous_undo_log.py", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--outdir", default="m5out/sync-undo")
    args = parser.parse_args(argv)
    workload = DlrmWorkload(args.model)
    outdir = Path(args.outdir)
    runs = {
        "CXL-B, background undo log": Simulator(
            CxlBBoard(), workload, args.batches, outdir / "cxl-b"
        ),
        "CXL-B, undo log waited for": Simulator(
            SynchronousUndoBoard(), workload, args.batches, outdir / "synchronous"
        ),
    }
    compare(runs)
    return 0


if __name__ == "__main__":
    sys.exit(run_main("synchronous_undo_log.py", lambda: main(sys.argv[1:])))
