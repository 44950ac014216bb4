"""One table of the simulator's speed: full detail, sampled, and gem5, per system and model.

    python benchmarks/bench_speed_table.py [--models rm1,rm2] [--systems cxl,pmem]
        [--short 1] [--long 3] [--repeats 1] [--sampled-batches 1000] [--sample 199]
        [--gem5-models rm1] [--gem5-systems cxl,cxl-b,cxl-d] [--gem5-batches 1]
        [--sample-memory 1000,10000]

Per (system, model): the full-detail wall and CPU seconds per simulated batch
(bench_slowdown.py's long-less-short difference, minimum of ``--repeats``; "<0" where
the runs' one-off costs differ by more than the extra batches cost), the sampled
run's wall and CPU seconds over the batches it covers (``--sampled-batches`` batches
with ``--sample``: start-up and the skipped batches' fast-forward included, the minimum
of ``--repeats``), each divided by the simulated seconds per batch (the slowdown: below
1, faster than the hardware), and where gem5 replays the same batches (bench_gem5.py:
every memory op of the built-in schedule, concurrently; the minimum of ``--repeats``)
gem5's wall seconds per batch over the full-detail wall and CPU seconds per batch
(gem5 runs on one thread, so its wall time is its CPU time). gem5 is slow, so it runs
only on ``--gem5-models`` x ``--gem5-systems``. ``--sample-memory A,B`` adds the peak
RSS of sampled A- and B-batch runs (bench_slowdown's ``--memory`` is the full-detail
counterpart).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_slowdown  # noqa: E402

REPO = bench_slowdown.REPO


def sampled_per_batch(system: str, model: str, batches: int, plan: str, repeats: int):
    """Minimum wall and CPU ms of a sampled run per batch it covers, the estimated
    simulated ms per batch, and the run's peak RSS (MiB)."""
    cpu, wall, rss, mean = math.inf, math.inf, 0.0, 0.0
    for _ in range(repeats):
        c, w, rss, _times, mean = bench_slowdown.probe(system, model, batches, sample_plan=plan)
        cpu, wall = min(cpu, c), min(wall, w)
    return 1e3 * wall / batches, 1e3 * cpu / batches, mean, rss


def gem5_per_batch(system: str, model: str, batches: int, repeats: int) -> float | None:
    """gem5's wall seconds per batch replaying the run concurrently, the minimum of
    ``repeats`` (as the simulator's own figures: noise only adds); None: no gem5."""
    import bench_gem5  # imports the simulator; only when gem5 is asked for

    gem5 = bench_gem5.binary()
    if gem5 is None:
        return None
    return min(
        bench_gem5.measure(gem5, system, model, batches)["gem5_concurrent"] for _ in range(repeats)
    )


def _cost(ms: float, simulated: float) -> str:
    """A full-detail cost per batch and its slowdown, two cells; a difference that is
    not positive (the one-off costs of the short and the long run differed by more
    than the extra batches cost) measures nothing and reads "<0"."""
    return f"{ms:.1f} | {ms / simulated:.2f}" if ms > 0 else "<0 | <0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="rm1,rm2,rm3,rm4")
    parser.add_argument("--systems", default=",".join(bench_slowdown.SYSTEMS))
    parser.add_argument("--short", type=int, default=1)
    parser.add_argument("--long", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--sampled-batches", type=int, default=1000)
    parser.add_argument("--sample", default="199", help="the --sample plan of the sampled runs")
    parser.add_argument("--gem5-models", default="rm1")
    parser.add_argument("--gem5-systems", default="cxl,cxl-b,cxl-d")
    parser.add_argument("--gem5-batches", type=int, default=1)
    parser.add_argument("--sample-memory", default="", help="A,B: peak RSS of sampled runs")
    args = parser.parse_args()
    if args.long <= args.short:
        parser.error("--long must exceed --short")
    memory = [int(b) for b in args.sample_memory.split(",")] if args.sample_memory else []
    gem5_on = {(m, s) for m in args.gem5_models.split(",") for s in args.gem5_systems.split(",")}
    print(
        "| model | system | simulated ms / batch | full wall ms / batch | full slowdown | "
        "full CPU ms / batch | full CPU slowdown | "
        f"sampled ({args.sample}, {args.sampled_batches} batches) ms / batch | "
        "sampled wall ms / batch | sampled slowdown | sampled CPU ms / batch | "
        "gem5 s / batch | gem5 / full wall | gem5 / full CPU |"
        + "".join(f" sampled RSS MiB @{b} |" for b in memory)
    )
    print("|---" * (14 + len(memory)) + "|")
    for model in args.models.split(","):
        for system in args.systems.split(","):
            (cpu,), (wall,), simulated = bench_slowdown.per_batch(
                system, model, args.short, args.long, args.repeats, [REPO]
            )
            s_wall, s_cpu, s_sim, _ = sampled_per_batch(
                system, model, args.sampled_batches, args.sample, args.repeats
            )
            row = (
                f"| {model} | {system} | {simulated:.3f} | {_cost(wall, simulated)} "
                f"| {_cost(cpu, simulated)} | {s_sim:.3f} | {s_wall:.2f} | "
                f"{s_wall / s_sim:.3f} | {s_cpu:.2f} |"
            )
            g = (
                gem5_per_batch(system, model, args.gem5_batches, args.repeats)
                if (model, system) in gem5_on
                else None
            )
            row += (
                f" {g:.2f} | {1e3 * g / wall:.0f}x | {1e3 * g / cpu:.0f}x |"
                if g is not None
                else " - | - | - |"
            )
            for b in memory:
                row += f" {sampled_per_batch(system, model, b, args.sample, 1)[3]:.0f} |"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
