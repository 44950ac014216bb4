"""This checkout against another, in alternating pairs of runs, for a shared machine.

    python benchmarks/bench_paired.py --baseline CHECKOUT [--system cxl] [--model rm1]
        [--batches 62] [--pairs 10]

bench_slowdown.py's minimum of a few repeats needs a quiet spell on both sides; on a VM
whose speed drifts by 30% within minutes two such minima rarely come from the same
spell. Here each pair runs the baseline and then this checkout back to back (one fresh
subprocess each, bench_slowdown.probe: wall and all-thread CPU seconds inside the run),
and the figure is the median over the pairs of this checkout's time over the
baseline's: drift between pairs cancels, and a slow moment inside one pair moves the
median little.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_slowdown import REPO, probe  # noqa: E402


def paired_ratios(
    system: str, model: str, batches: int, pairs: int, baseline: str
) -> dict[str, list[float]]:
    """Per pair, this checkout's wall and CPU seconds over the baseline's."""
    ratios: dict[str, list[float]] = {"wall": [], "cpu": []}
    for _ in range(pairs):
        base_cpu, base_wall, *_ = probe(system, model, batches, baseline)
        cpu, wall, *_ = probe(system, model, batches, REPO)
        ratios["wall"].append(wall / base_wall)
        ratios["cpu"].append(cpu / base_cpu)
    return ratios


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="another checkout")
    parser.add_argument("--system", default="cxl")
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--batches", type=int, default=62)
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args(argv)
    ratios = paired_ratios(args.system, args.model, args.batches, args.pairs, args.baseline)
    print("| system | model | pairs | wall ratio (median, range) | CPU ratio (median, range) |")
    print("|---|---|---|---|---|")
    cells = [
        f"{statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f})"
        for r in (ratios["wall"], ratios["cpu"])
    ]
    print(f"| {args.system} | {args.model} | {args.pairs} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
