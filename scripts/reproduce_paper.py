"""Reproduce the paper's evaluation: every system on RM1-RM4, a report and its plots.

    python scripts/reproduce_paper.py --outdir repro [--batches 4] [--models rm1,rm3]

Writes REPORT.md (batch times, the headline ratios next to the paper's, energy
normalised to PMEM), breakdown.png (Figure 11 style), timeline_<model>.png (Figure 12
style: one batch of CXL-D, CXL-B and CXL) and energy.png (Figure 13 style), plus each
run's own outdir.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("reproduce_paper.py")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from components.sim.mpl import check_backend  # noqa: E402
from components.sim.outputs import check_outputs, replacing_dir  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.job import BREAKDOWN  # noqa: E402
from simulate.run.options import RunOptions, check_seed, check_steady_batches  # noqa: E402
from simulate.run.preflight import check_memory, check_outdir  # noqa: E402
from simulate.simulator import run_job, validate  # noqa: E402

SYSTEMS = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl", "dram")
PAPER = {
    "CXL vs PMEM speedup (mean)": "5.2x",
    "CXL vs PMEM energy saving (mean)": "76%",
    "CXL-D vs PCIe time reduction (mean)": "23%",
    "CXL vs CXL-B time reduction (mean)": "14%",
}


def headline(results: dict[tuple[str, str], dict], models: list[str]) -> dict[str, str]:
    def t(system, model):
        return results[system, model]["batch_time_ms"]["mean"]

    def e(system, model):
        return results[system, model]["energy_j"]["total"]

    speedup = np.mean([t("pmem", m) / t("cxl", m) for m in models])
    saving = np.mean([1 - e("cxl", m) / e("pmem", m) for m in models])
    d_vs_pcie = np.mean([1 - t("cxl-d", m) / t("pcie", m) for m in models])
    cxl_vs_b = np.mean([1 - t("cxl", m) / t("cxl-b", m) for m in models])
    return {
        "CXL vs PMEM speedup (mean)": f"{speedup:.1f}x",
        "CXL vs PMEM energy saving (mean)": f"{saving:.0%}",
        "CXL-D vs PCIe time reduction (mean)": f"{d_vs_pcie:.0%}",
        "CXL vs CXL-B time reduction (mean)": f"{cxl_vs_b:.0%}",
    }


def report(results, models, batches) -> str:
    lines = [
        "# TrainingCXL reproduction",
        "",
        f"Each run: {batches} batches of the model's default batch size; times are the",
        "mean steady-state batch (the first and last batches excluded). See",
        "docs/calibration.md for why the numbers differ from the paper.",
        "",
        "## Batch time (ms)",
        "",
        "| model | " + " | ".join(SYSTEMS) + " |",
        "|---|" + "---|" * len(SYSTEMS),
    ]
    for m in models:
        cells = [f"{results[s, m]['batch_time_ms']['mean']:.3f}" for s in SYSTEMS]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", "## Headline ratios", "", "| claim | simulated | paper |", "|---|---|---|"]
    for key, value in headline(results, models).items():
        lines.append(f"| {key} | {value} | {PAPER[key]} |")
    lines += [
        "",
        "## Energy per batch normalised to PMEM",
        "",
        "| model | " + " | ".join(SYSTEMS) + " |",
        "|---|" + "---|" * len(SYSTEMS),
    ]
    for m in models:
        base = results["pmem", m]["energy_j"]["total"]
        cells = [f"{results[s, m]['energy_j']['total'] / base:.3f}" for s in SYSTEMS]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Breakdown (ms, critical-path attribution)",
        "",
        "| model | system | " + " | ".join(BREAKDOWN) + " | contention from |",
        "|---|---|" + "---|" * (len(BREAKDOWN) + 1),
    ]
    for m in models:
        for s in SYSTEMS:
            b = results[s, m]["breakdown_ms"]
            causes = results[s, m].get("contention_by_ms", {})
            blame = ", ".join(f"{k} {v:.3f}" for k, v in sorted(causes.items()) if v >= 0.001)
            lines.append(
                f"| {m} | {s} | "
                + " | ".join(f"{b[k]:.3f}" for k in BREAKDOWN)
                + f" | {blame or '-'} |"
            )
    lines += ["", "Plots: breakdown.png, energy.png, timeline_<model>.png.", ""]
    return "\n".join(lines)


def plot_all(results, models, outdir: Path) -> None:
    from components.sim.mpl import pyplot

    plt = pyplot()  # here: bad options are refused before matplotlib loads

    from components.sim.plots import (
        draw_timeline,
        legend_handles,
        plot_bars,
        plot_breakdown,
        read_timeline,
    )

    keys = [(s, m) for m in models for s in SYSTEMS]
    plot_breakdown(
        [results[k] for k in keys],
        [f"{m}/{s}" for s, m in keys],
        "Per-batch breakdown (Figure 11 style)",
        outdir / "breakdown.png",
    )
    energy = {
        f"{m}/{s}": results[s, m]["energy_j"]["total"] / results["pmem", m]["energy_j"]["total"]
        for s, m in keys
    }
    plot_bars(
        energy,
        "Energy normalised to PMEM (Figure 13 style)",
        "energy / PMEM",
        outdir / "energy.png",
    )
    for m in models:
        fig, axes = plt.subplots(3, 1, figsize=(9, 7))
        for ax, system in zip(axes, ("cxl-d", "cxl-b", "cxl"), strict=True):
            rows = read_timeline(outdir / f"{system}-{m}" / "timeline.csv")
            draw_timeline(ax, rows, [1], f"{system}: batch 1 of {m}")
        fig.legend(handles=legend_handles(), loc="upper right", fontsize=7)
        fig.tight_layout(rect=(0, 0, 0.86, 1))  # the legend in a margin of its own
        fig.savefig(outdir / f"timeline_{m}.png", dpi=120)
        plt.close(fig)


def owned(name: str) -> bool:
    """Entries of a previous reproduction in the outdir (replaced as one set)."""
    return name == "REPORT.md" or name.endswith(".png") or name.startswith(SYSTEMS_PREFIXES)


def owned_dirs(name: str) -> bool:
    """The owned entries that are directories: one run's outdir per system and model."""
    return name.startswith(SYSTEMS_PREFIXES)


SYSTEMS_PREFIXES = tuple(f"{s}-" for s in SYSTEMS)


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="reproduce_paper.py", description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default="repro")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--models", default="rm1,rm2,rm3,rm4")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models:
        raise UsageError("--models names no model (e.g. --models rm1,rm3)")
    check_steady_batches(args.batches)
    check_seed(args.seed)
    check_outdir(args.outdir)
    check_outputs(Path(args.outdir), owned, owned_dirs)
    check_backend()
    return args


def reproduce(args) -> int:
    models, outdir = args.models, Path(args.outdir)
    runs = [
        RunOptions(system=s, model=m, batches=args.batches, seed=args.seed, progress=False)
        for m in models
        for s in SYSTEMS
    ]
    for options in runs:
        validate(options, writes_outdir=False)
        check_memory(options)
    results = {}
    with replacing_dir(outdir, owned, owned_dirs) as staging:
        for options in tqdm(runs, desc="reproduce", unit="run", file=sys.stderr):
            options.outdir = str(staging / f"{options.system}-{options.model}")
            results[options.system, options.model] = run_job(options)
        text = report(results, models, args.batches)
        (staging / "REPORT.md").write_text(text)
        plot_all(results, models, staging)
    print(text.split("## Energy")[0])
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main("reproduce_paper.py", lambda: reproduce(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
