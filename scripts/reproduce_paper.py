"""Reproduce the paper's evaluation: every system on RM1-RM4, a report and its plots.

    python scripts/reproduce_paper.py --outdir repro [--batches 4] [--models rm1 rm3]
                                      [--gpu h100] [--pmem optane] [--format png|pdf|svg]

Writes REPORT.md (batch times, the headline ratios next to the paper's, energy
normalised to PMEM), breakdown.FORMAT (Figure 11 style: a panel per model, stacked
critical-path parts), timeline_<model>.FORMAT (Figure 12 style: one batch of CXL-D,
CXL-B and CXL on one time scale) and energy.FORMAT (Figure 13 style), plus each run's
own outdir. Bars stay on linear axes; one over five times the next (SSD's) is cut at the
panel's top and labelled with its value.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import note_first_compile, quiet_interrupts  # noqa: E402

quiet_interrupts("reproduce_paper.py")
note_first_compile("reproduce_paper.py")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from components.boards import build_board  # noqa: E402
from components.memory.pmem import PMEM_MODELS, pmem_modules  # noqa: E402
from components.sim.mpl import check_backend  # noqa: E402
from components.sim.outputs import check_outputs, replacing_dir  # noqa: E402
from simulate.run.cli import QuietParser, add_names_option, names, run_main  # noqa: E402
from simulate.run.job import BREAKDOWN  # noqa: E402
from simulate.run.options import (  # noqa: E402
    RunOptions,
    check_gpu_name,
    check_seed,
    check_steady_batches,
)
from simulate.run.preflight import check_memory, check_outdir  # noqa: E402
from simulate.simulator import run_job, validate  # noqa: E402

SYSTEMS = ("ssd", "pmem", "pcie", "cxl-d", "cxl-b", "cxl", "dram")
FORMATS = ("png", "pdf", "svg")
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
    lines += [
        "",
        "Figures: breakdown, energy and timeline_<model> (bars on linear axes; a bar",
        "over five times the next is cut at the top and labelled with its value).",
        "",
    ]
    return "\n".join(lines)


def plot_all(results, models, outdir: Path, fmt: str = "png") -> None:
    from components.sim.mpl import pyplot

    plt = pyplot()  # here: bad options are refused before matplotlib loads

    from components.sim.plots import draw_timeline, plot_by_model, read_timeline, timeline_legend

    plot_by_model(
        {(s, m): results[s, m]["breakdown_ms"] for m in models for s in SYSTEMS},
        SYSTEMS,
        models,
        "time per steady batch (ms)",
        "Critical-path breakdown of a steady batch (the paper's Figure 11 style)",
        outdir / f"breakdown.{fmt}",
        fmt,
        unit=" ms",
    )
    plot_by_model(
        {
            (s, m): results[s, m]["energy_j"]["total"] / results["pmem", m]["energy_j"]["total"]
            for m in models
            for s in SYSTEMS
        },
        SYSTEMS,
        models,
        "energy of the run / PMEM's",
        "Energy normalised to PMEM (the paper's Figure 13 style)",
        outdir / f"energy.{fmt}",
        fmt,
        unit="x",
    )
    for m in models:
        panels = ("cxl-d", "cxl-b", "cxl")
        timelines = [read_timeline(outdir / f"{system}-{m}" / "timeline.csv") for system in panels]
        fig, axes = plt.subplots(3, 1, figsize=(10, 7), sharex=True, layout="constrained")
        for ax, system, rows in zip(axes, panels, timelines, strict=True):
            draw_timeline(ax, rows, [1], f"{system.upper()}: batch 1 of {m.upper()}")
            ax.set_xlabel("")
        axes[-1].set_xlabel("time from the batch's start, the previous batch's end (ms)")
        timeline_legend(fig, [r for rows in timelines for r in rows if r["batch"] == "1"])
        fig.savefig(outdir / f"timeline_{m}.{fmt}", dpi=200, format=fmt)
        plt.close(fig)


def owned(name: str) -> bool:
    """Entries of a previous reproduction in the outdir (replaced as one set)."""
    figure = name.endswith(tuple(f".{fmt}" for fmt in FORMATS))
    return name == "REPORT.md" or figure or name.startswith(SYSTEMS_PREFIXES)


def owned_dirs(name: str) -> bool:
    """The owned entries that are directories: one run's outdir per system and model."""
    return name.startswith(SYSTEMS_PREFIXES)


SYSTEMS_PREFIXES = tuple(f"{s}-" for s in SYSTEMS)


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="reproduce_paper.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--outdir", default="repro", help="where REPORT.md, the figures and the runs go"
    )
    parser.add_argument("--batches", type=int, default=4, help="batches per run (default 4)")
    add_names_option(parser, "--models", ["rm1", "rm2", "rm3", "rm4"], "models to run")
    parser.add_argument("--seed", type=int, default=1, help="seed of every run (default 1)")
    parser.add_argument(
        "--format", choices=FORMATS, default="png", help="figure format (default png)"
    )
    parser.add_argument("--gpu", default=None, metavar="NAME", help="a GPU preset (docs/gpu.md)")
    parser.add_argument(
        "--pmem", choices=PMEM_MODELS, default=None, help="PMEM model of every system with PMEM"
    )
    args = parser.parse_args(argv)
    args.gpu = check_gpu_name(args.gpu)
    args.models = names(args.models, "--models")
    check_steady_batches(args.batches)
    check_seed(args.seed)
    check_outdir(args.outdir)
    check_outputs(Path(args.outdir), owned, owned_dirs)
    check_backend()
    return args


def paper_runs(args) -> list[RunOptions]:
    """Every system on every model; --pmem goes to the systems that have PMEM."""
    return [
        RunOptions(
            system=s,
            model=m,
            batches=args.batches,
            seed=args.seed,
            gpu=args.gpu,
            pmem=args.pmem if pmem_modules(build_board(s)) else None,
            progress=False,
        )
        for m in args.models
        for s in SYSTEMS
    ]


def reproduce(args) -> int:
    models, outdir = args.models, Path(args.outdir)
    runs = paper_runs(args)
    for options in runs:
        validate(options, writes_outdir=False)
        check_memory(options)
    results = {}
    with replacing_dir(outdir, owned, owned_dirs) as staging:
        for options in tqdm(runs, desc="reproduce", unit="run", file=sys.stderr, disable=None):
            options.outdir = str(staging / f"{options.system}-{options.model}")
            results[options.system, options.model] = run_job(options)
        text = report(results, models, args.batches)
        (staging / "REPORT.md").write_text(text)
        plot_all(results, models, staging, args.format)
    print(text.split("## Energy")[0])
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main("reproduce_paper.py", lambda: reproduce(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
