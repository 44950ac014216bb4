"""The CXL-MEM's PMEM on gem5's own TestBoard, read by stdlib random generators.

    gem5.opt -d out configs/examples/cxl_mem_on_test_board.py [--optane] [--cores 4]

A gem5 config, not a TrainingCXL run: it takes only the memory component
(components/gem5/memory.py: the four PMEM controllers, their interleaving and
XPBuffers, with the paper's Table 2 parameters or ``--optane``'s measured DIMM) and
puts it on stdlib parts this project does not use itself: ``TestBoard``, ``NoCache``
and ``RandomGenerator``. Each generator reads random XPLines (256 B) for
``--duration``, ``--window`` reads in flight; gem5's stats.txt (in -d) holds what the
controllers read. The last line compares the bandwidth gem5 measured with what our
model gives the controllers together (controllers x ctrl_read_bandwidth), which a
saturating window reaches; a small one is bound by the read latency instead.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from components.gem5.bootstrap import ensure_dependencies  # noqa: E402

ensure_dependencies(sys.path[0])

import m5  # noqa: E402
from gem5.components.boards.test_board import TestBoard  # noqa: E402
from gem5.components.cachehierarchies.classic.no_cache import NoCache  # noqa: E402
from gem5.components.processors.random_generator import RandomGenerator  # noqa: E402
from gem5.simulate.simulator import Simulator  # noqa: E402

from components.gem5.memory import TableMemory  # noqa: E402
from components.memory.pmem import Pmem  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--optane", action="store_true", help="measured Optane DIMMs (Pmem.optane)")
parser.add_argument("--cores", type=int, default=4, help="random generators (default 4)")
parser.add_argument("--duration", default="200us", help="how long they read (default 200us)")
parser.add_argument("--window", type=int, default=64, help="reads each keeps in flight")
args = parser.parse_args()

pmem = Pmem.optane() if args.optane else Pmem()
memory = TableMemory(pmem, size="1GiB")
generator = RandomGenerator(
    num_cores=args.cores, duration=args.duration, rate="100GB/s", block_size=pmem.access_unit,
    min_addr=0, max_addr=memory.get_size(), rd_perc=100,
)  # fmt: skip
for core in generator.get_cores():  # a requester's window, as the engine's tags
    core.generator.max_outstanding_reqs = args.window
board = TestBoard(clk_freq="1GHz", generator=generator, memory=memory, cache_hierarchy=NoCache())
board.cache_line_size = pmem.access_unit  # the XPBuffer's and the media's line (XPLine)
simulator = Simulator(board=board)
simulator.run()


def bytes_read(ctrl) -> float:
    value = ctrl.dram.getCCObject().resolveStat("bytesRead").value  # per requestor, or total
    return sum(value) if isinstance(value, list) else value


seconds = m5.curTick() / 1e12
read = sum(bytes_read(ctrl) for ctrl in memory.mem_ctrl)
ours = pmem.controllers * pmem.ctrl_read_bandwidth
print(f"read {read / seconds / 1e9:.2f} GB/s in gem5; our model's media: {ours / 1e9:.2f} GB/s")
