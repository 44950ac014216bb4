"""How much slower than the hardware it models the simulator runs, per system and model.

    python benchmarks/bench_slowdown.py [--models rm1,rm2] [--systems cxl,pmem]
        [--short 2] [--long 8] [--repeats 3] [--memory 4,40] [--baseline CHECKOUT]

Per (system, model), each in a fresh subprocess: the CPU seconds (all threads) and the
wall seconds of a ``--short`` and a ``--long`` run of the same seed; their difference
over the extra batches is the cost of one simulated batch with start-up, imports,
kernel loading and output writing taken out. The machine may be shared, so each run is
repeated and the minimum taken (noise only ever adds time). The slowdown is the wall
time per batch over the simulated batch time (below 1: faster than the hardware); the
CPU one is the same with CPU time, which is what a sweep that keeps every core busy
pays (a run makes its next batch on a second thread where one is free:
simulate/run/prefetch.py, so its wall time is below its CPU time). With ``--memory A,B``
also the peak resident memory of A- and B-batch runs, which must stay flat in batches
(the host keeps only a few batches' inputs alive). With ``--baseline`` another checkout
(e.g. ``git worktree add --detach ../base <commit>``) runs the same configurations,
its runs alternating with this one's so both see the same load, and the table adds its
CPU and wall time per batch and the speed-ups.
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
SYSTEMS = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl", "dram")
PROBE = (
    "import json,resource,sys,time; sys.path.insert(0, {repo!r});"
    "from simulate.simulator import run_job; from simulate.run.options import RunOptions;"
    "start, wall = time.process_time(), time.perf_counter();"
    "res = run_job(RunOptions(**{options!r}, outdir={outdir!r}, progress=False));"
    "print(json.dumps([time.process_time() - start, time.perf_counter() - wall,"
    " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, res.get('batch_times_ms'),"
    " res['batch_time_ms']['mean']]))"
)


def probe(
    system: str, model: str, batches: int, repo: str = REPO, **options
) -> tuple[float, float, float, list[float] | None, float]:
    """CPU and wall seconds inside the run, peak RSS (MiB), the simulated batch times
    (ms; None for a sampled run) and their mean (a sampled run's estimate). ``options``:
    further RunOptions fields (sample_plan, seed)."""
    options = {"system": system, "model": model, "batches": batches, **options}
    with tempfile.TemporaryDirectory() as outdir:
        code = PROBE.format(repo=repo, options=options, outdir=outdir)
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo
        )
    cpu, wall, rss, times, mean = json.loads(out.stdout.strip().splitlines()[-1])
    return cpu, wall, rss / 1024, times, mean


def per_batch(system: str, model: str, short: int, long: int, repeats: int, repos: list[str]):
    """Per checkout: the minimum CPU and wall ms per extra batch, each a list in the
    order of ``repos``; and the simulated ms per batch of those batches (this
    checkout's). Checkouts alternate run by run."""
    best = {(repo, n): [math.inf, math.inf] for repo in repos for n in (short, long)}
    simulated = 0.0
    for _ in range(repeats):
        for repo in repos:
            for n in (short, long):
                cpu, wall, _rss, times, _mean = probe(system, model, n, repo)
                best[repo, n] = [min(best[repo, n][0], cpu), min(best[repo, n][1], wall)]
                if repo == repos[0] and n == long:
                    simulated = sum(times[short:]) / (long - short)
    cpu_ms, wall_ms = (
        [1e3 * (best[r, long][k] - best[r, short][k]) / (long - short) for r in repos]
        for k in (0, 1)
    )
    return cpu_ms, wall_ms, simulated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="rm1,rm2,rm3,rm4")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--long", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory", default="", help="A,B: peak RSS of A- and B-batch runs")
    parser.add_argument("--baseline", help="another checkout to measure alongside")
    args = parser.parse_args()
    if args.long <= args.short:
        parser.error("--long must exceed --short")
    memory = [int(b) for b in args.memory.split(",")] if args.memory else []
    repos = [REPO] + ([os.path.abspath(args.baseline)] if args.baseline else [])
    head = (
        "| model | system | simulated ms / batch | wall ms / batch | slowdown | "
        "CPU ms / batch | CPU slowdown |"
    )
    head += " baseline wall ms / batch | baseline CPU ms / batch | speed-up wall / CPU |" * bool(
        args.baseline
    )
    head += "".join(f" RSS MiB @{b} |" for b in memory)
    print(head)
    print("|---" * (7 + 3 * bool(args.baseline) + len(memory)) + "|")
    for model in args.models.split(","):
        for system in args.systems.split(","):
            cpu_ms, wall_ms, simulated = per_batch(
                system, model, args.short, args.long, args.repeats, repos
            )
            cpu, wall = cpu_ms[0], wall_ms[0]
            row = (
                f"| {model} | {system} | {simulated:.3f} | {wall:.1f} | {wall / simulated:.2f} "
                f"| {cpu:.1f} | {cpu / simulated:.2f} |"
            )
            if args.baseline:
                row += (
                    f" {wall_ms[1]:.1f} | {cpu_ms[1]:.1f} | "
                    f"{wall_ms[1] / wall:.2f}x / {cpu_ms[1] / cpu:.2f}x |"
                )
            row += "".join(f" {probe(system, model, b)[2]:.0f} |" for b in memory)
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
