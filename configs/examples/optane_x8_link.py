"""CXL-MEM built from other parts: measured Optane DIMMs and a x8 CXL link.

    python configs/examples/optane_x8_link.py --batches 4 --outdir m5out/optane-x8

The CLI's --set can change one parameter at a time; a script composes a board the way
gem5's stdlib configs do: swap the CXL-MEM's PMEM for the ``Pmem.optane()`` preset
(Izraelevitz 2019's per-DIMM figures instead of the paper's Table 2 ratios), halve the
device's link width, and compare the batch time with the paper's default board.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("optane_x8_link.py")

from components.boards.cxl import CxlBoard  # noqa: E402
from components.memory.pmem import Pmem  # noqa: E402
from simulate.run.cli import QuietParser, run_main  # noqa: E402
from simulate.simulator import Simulator, compare  # noqa: E402
from workloads.workload import DlrmWorkload  # noqa: E402


def optane_x8_board() -> CxlBoard:
    """The CXL system with Optane DIMMs behind its controllers and a x8 device link."""
    board = CxlBoard()
    board.cxl_mem.pmem = Pmem.optane()
    board.cxl_mem.link.lanes = 8
    return board


def main(argv: list[str]) -> int:
    parser = QuietParser(prog="optane_x8_link.py", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--outdir", default="m5out/optane-x8")
    args = parser.parse_args(argv)
    workload = DlrmWorkload(args.model)
    outdir = Path(args.outdir)
    runs = {
        "paper's CXL-MEM": Simulator(CxlBoard(), workload, args.batches, outdir / "default"),
        "Optane DIMMs, x8 link": Simulator(
            optane_x8_board(), workload, args.batches, outdir / "optane-x8"
        ),
    }
    compare(runs)
    return 0


if __name__ == "__main__":
    sys.exit(run_main("optane_x8_link.py", lambda: main(sys.argv[1:])))
