"""Simulator cost of a disaggregated system against its size: CPU per simulated batch.

    python benchmarks/bench_topologies.py [--system cxl] [--model rm1] [--short 2]
        [--long 6] [--repeats 2] [--sizes 1x1,2x2,4x4,8x8,1x8,8x1]

Per N x M (GPUs x CXL-MEMs), each in a fresh subprocess: CPU seconds of a ``--short``
and a ``--long`` run; their difference over the extra batches is the CPU cost of one
simulated batch (start-up and output writing taken out; minimum of the repeats, since
noise only adds). The table shows it against N + M, normalised by 1 x 1's: the
requirement is that it grows at most linearly in the devices (the last column <= 1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = (
    "import json,sys,time; sys.path.insert(0, {repo!r});"
    "from simulate.simulator import run_job; from simulate.run.options import RunOptions;"
    "start = time.process_time();"
    "res = run_job(RunOptions(system={system!r}, model={model!r}, batches={batches},"
    " outdir={outdir!r}, progress=False, gpus={gpus}, cxl_mems={mems}));"
    "print(json.dumps([time.process_time() - start, res['batch_time_ms']['mean']]))"
)


def cpu_seconds(system: str, model: str, gpus: int, mems: int, batches: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as outdir:
        code = PROBE.format(repo=REPO, system=system, model=model, batches=batches,
                            outdir=outdir, gpus=gpus, mems=mems)  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=REPO)  # fmt: skip
    cpu, batch_ms = json.loads(out.stdout.strip().splitlines()[-1])
    return cpu, batch_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="cxl")
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--long", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--sizes", default="1x1,2x2,4x4,8x8,1x8,8x1")
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes.split(",")]
    rows = []
    for gpus, mems in sizes:
        short = long = math.inf
        for _ in range(args.repeats):
            short = min(short, cpu_seconds(args.system, args.model, gpus, mems, args.short)[0])
            cpu, batch_ms = cpu_seconds(args.system, args.model, gpus, mems, args.long)
            long = min(long, cpu)
        per_batch = (long - short) / (args.long - args.short) * 1e3
        rows.append((gpus, mems, per_batch, batch_ms))
        print(f"{gpus} x {mems}: {per_batch:.1f} ms CPU per batch", file=sys.stderr)
    base = rows[0][2] / 2  # per device of 1 x 1
    print(f"{args.system} {args.model}: CPU per simulated batch vs devices")
    print("| GPUs x CXL-MEMs | N + M | CPU ms / batch | simulated ms / batch | slowdown | "
          "CPU per device / 1 x 1's |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for gpus, mems, per_batch, batch_ms in rows:
        devices = gpus + mems
        print(f"| {gpus} x {mems} | {devices} | {per_batch:.1f} | {batch_ms:.3f} | "
              f"{per_batch / batch_ms:.1f} | {per_batch / devices / base:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
