"""What sharing generated batches saves a sweep: the same grid with and without.

    python benchmarks/bench_shared_inputs.py [--model rm1] [--batches 40] [--workers 2]

First per batch, in this process: CPU to draw a batch (generate it and sort its distinct
rows), to draw and store it, and to load a stored one (workloads/shared_inputs.py), and
its size on disk. Then a local sweep of every system on one model and seed, run with
shared inputs and without: the workers' CPU seconds (user + system of the reaped pool
processes) and wall seconds, and whether every run's stats (host lines aside) are the
same both ways.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulate.run.options import SYSTEMS  # noqa: E402
from simulate.sweeps.driver import execute  # noqa: E402
from simulate.sweeps.spec import load_sweep  # noqa: E402
from workloads.inputs import InputGenerator  # noqa: E402
from workloads.models import DEFAULT_BATCH_SIZE, get_model  # noqa: E402
from workloads.shared_inputs import SharedBatches  # noqa: E402

SPEC = """outroot: {outroot}
fixed: {{model: {model}, batches: {batches}, seed: 1}}
axes: {{system: [{systems}]}}
"""


def per_batch(model: str, count: int = 20) -> dict[str, float]:
    """CPU ms per batch to draw (generate it and sort its distinct rows, as every run
    did), to draw and store it, to load it; MB per stored batch."""
    generator = InputGenerator(get_model(model), DEFAULT_BATCH_SIZE, seed=1)
    offsets = generator.spec.table_offsets

    def draw(index: int) -> None:
        generator.batch(index).distinct_rows(offsets)

    def cpu_ms(call) -> float:
        start = time.process_time()
        call()
        return (time.process_time() - start) / count * 1e3

    with tempfile.TemporaryDirectory(dir=ROOT) as folder:
        generate = min(cpu_ms(lambda: [draw(i) for i in range(count)]) for _ in range(2))
        storing = SharedBatches(generator, folder)
        store = cpu_ms(lambda: [storing.batch(i) for i in range(count)])
        loads = []
        for _ in range(3):
            loading = SharedBatches(generator, folder)
            loads.append(cpu_ms(lambda src=loading: [src.batch(i) for i in range(count)]))
        size = sum(path.stat().st_size for path in storing.folder.iterdir()) / count
    return {"generate": generate, "store": store, "load": min(loads), "mb": size / 1e6}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sweep(model: str, batches: int, workers: int, shared: bool) -> tuple[float, float, dict]:
    """(workers' CPU s, wall s, run id -> stats lines without host lines)."""
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".bench_shared.") as tmp:
        spec = Path(tmp, "spec.yaml")
        spec.write_text(
            SPEC.format(
                outroot=Path(tmp, "out"), model=model, batches=batches, systems=", ".join(SYSTEMS)
            )
        )
        loaded = load_sweep(spec)
        cpu, wall = children_cpu(), time.perf_counter()
        summary = execute(loaded, loaded.runs, "local", workers, shared)
        cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
        if summary.failures:
            raise SystemExit("\n".join(summary.lines()))
        stats = {}
        for run in loaded.runs:
            text = (loaded.outroot / run.id / "stats.txt").read_text()
            stats[run.id] = [line for line in text.splitlines() if "host" not in line.lower()]
    return cpu, wall, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 2))
    parser.add_argument("--repeats", type=int, default=2, help="sweeps each way (alternating)")
    args = parser.parse_args()
    print("| model | draw ms | draw + store ms | load ms | MB / batch |")
    print("|---|---|---|---|---|")
    for model in dict.fromkeys(["rm1", "rm2", "rm3", "rm4", args.model]):
        f = per_batch(model)
        print(
            f"| {model} | {f['generate']:.2f} | {f['store']:.2f} | {f['load']:.2f} | "
            f"{f['mb']:.2f} |",
            flush=True,
        )
    runs = f"{len(SYSTEMS)} systems x {args.model} x {args.batches} batches"
    measured: dict[bool, list[tuple[float, float, dict]]] = {False: [], True: []}
    for repeat in range(args.repeats):  # alternating, so neither way always goes first
        for shared in (False, True) if repeat % 2 == 0 else (True, False):
            measured[shared].append(sweep(args.model, args.batches, args.workers, shared))
    print(f"\nsweep of {runs}, {args.workers} workers, minimum of {args.repeats}:")
    for shared, name in ((False, "own inputs:   "), (True, "shared inputs:")):
        cpu = min(m[0] for m in measured[shared])
        wall = min(m[1] for m in measured[shared])
        print(f"  {name} {cpu:.1f} s CPU, {wall:.1f} s wall")
    same = all(m[2] == measured[False][0][2] for m in measured[False] + measured[True])
    print(f"  stats identical in every run: {same}")


if __name__ == "__main__":
    main()
