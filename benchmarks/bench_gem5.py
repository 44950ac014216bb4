"""Wall time per simulated batch: gem5's replay of the memory ops vs the built-in engine.

    python benchmarks/bench_gem5.py [--batches 2] [--models rm1,rm3] [--systems cxl,pmem]

For each (system, model) the same batches run once under gem5 (scripts/compare_backends.py's
gem5 side: the built-in engine records the run, gem5 replays every memory op in the
built-in schedule and again alone). Prints a markdown table: the built-in engine's
wall per batch (its recording run), gem5's per batch for the concurrent replay and for
the alone replay, and the slowdown of the concurrent replay. Needs a gem5 binary
(``GEM5`` or ../shared/gem5/gem5 beside the checkout).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "scripts"))

import compare_backends  # noqa: E402

from components.gem5 import binary  # noqa: E402


def measure(gem5: str, system: str, model: str, batches: int) -> dict[str, float]:
    """Wall seconds per batch of each side."""
    argv = ["--system", system, "--model", model, "--batches", str(batches)]
    with tempfile.TemporaryDirectory() as outdir:
        wall = compare_backends.run_gem5(gem5, argv, Path(outdir))["wall_s"]
    return {side: seconds / batches for side, seconds in wall.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--models", default="rm1,rm3")
    parser.add_argument("--systems", default="cxl,cxl-b,cxl-d,pcie,pmem,dram")
    args = parser.parse_args()
    gem5 = binary()
    if gem5 is None:
        print(
            "bench_gem5.py: error: no gem5 binary (GEM5, or ../shared/gem5/gem5)", file=sys.stderr
        )
        return 2
    print("| model | system | built-in s/batch | gem5 concurrent s/batch | gem5 alone s/batch "
          "| gem5 / built-in |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for system in args.systems.split(","):
            w = measure(gem5, system, model, args.batches)
            ours, conc, alone = w["builtin_recorded"], w["gem5_concurrent"], w["gem5_alone"]
            print(
                f"| {model} | {system} | {ours:.3f} | {conc:.2f} | {alone:.2f} | "
                f"{conc / ours:.0f}x |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
