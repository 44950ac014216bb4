"""Wall time and peak memory of whole simulations, per system and model.

    python benchmarks/bench_simulation.py [--batches 8] [--models rm1,rm2,rm3,rm4]

Each (system, model) runs in a fresh subprocess so peak RSS is its own. Prints a
markdown table: wall seconds per simulated batch inside the process (input generation,
timing and outputs; interpreter start and imports excluded), the same including them,
and peak resident memory. A long run must stay flat in memory: the host side keeps only
a few batches' inputs alive (compare --batches 8 with --batches 32).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl", "dram")
PROBE = (
    "import json,resource,sys,time; sys.path.insert(0, {repo!r});"
    "from simulate.simulator import run_job; from simulate.run.options import RunOptions;"
    "start = time.perf_counter();"
    "run_job(RunOptions(system={system!r}, model={model!r}, batches={batches},"
    " outdir={outdir!r}, progress=False));"
    "print(json.dumps([time.perf_counter() - start,"
    " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))"
)


def measure(system: str, model: str, batches: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as outdir:
        code = PROBE.format(repo=REPO, system=system, model=model, batches=batches, outdir=outdir)
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        wall = time.perf_counter() - start
    inside, rss = json.loads(out.stdout.strip().splitlines()[-1])
    return inside / batches, wall / batches, rss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--models", default="rm1,rm2,rm3,rm4")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    print("| model | system | s / batch in process | s / batch with startup | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for model in args.models.split(","):
        for system in args.systems.split(","):
            inside, wall, rss = measure(system, model, args.batches)
            print(f"| {model} | {system} | {inside:.3f} | {wall:.3f} | {rss:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
