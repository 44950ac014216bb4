"""Scaling study: N CXL-GPUs x M CXL-MEMs under one switch, for CXL-B and CXL on RM1-RM4.

For every point: batch time, samples/s (and the speedup over 1 x 1), the checkpoint's
share of the batch's critical path, the cross-device commit's share of it and of the
bytes the switches forward (its acknowledgements; none on one device), energy per
sample, and the resource that saturates first with its utilisation: where scaling stops
and what stops it. Writes scaling.csv,
scaling.md (the table) and scaling.png (samples/s vs CXL-MEMs, a line per system and
GPU count, one panel per model). docs/topologies.md explains the knees.

    python scripts/scaling.py --outdir scaling          # the full grid (~10 min, 2 cores)
    python scripts/scaling.py --models rm1 --gpus 1 2 --mems 1 2 --batches 3
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("scaling.py")

from tqdm import tqdm  # noqa: E402

from components.interconnect.topology import MAX_ENDPOINTS  # noqa: E402
from components.sim.outputs import check_outputs, replacing_dir  # noqa: E402
from simulate.failures.inject import recovery_cost  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, add_names_option, names, run_main  # noqa: E402
from simulate.run.options import RunOptions, check_gpu_name, check_steady_batches  # noqa: E402
from simulate.run.preflight import (  # noqa: E402
    available_memory,
    check_outdir,
    estimate_memory,
    format_bytes,
)
from simulate.simulator import Simulator  # noqa: E402
from workloads.workload import DlrmWorkload  # noqa: E402

PROG = "scaling.py"
SYSTEMS = ("cxl-b", "cxl")  # the default grid; cxl-d on request (--systems)
CHOICES = ("cxl-d", *SYSTEMS)
MODELS = ("rm1", "rm2", "rm3", "rm4")
COUNTS = (1, 2, 4, 8)
TABLE_OUTPUTS = ("scaling.csv", "scaling.md", "scaling.png")
RECOVERY_OUTPUTS = ("recovery.md",)
RESOURCE_KINDS = (  # what a flow-network resource is, for the table
    (r"\.pmem\.ctrl\d+$", "CXL-MEM PMEM"),
    (r"cxl_gpu\d+\.link\.(up|down)$", "GPU link"),
    (r"cxl_mem\.link\.(up|down)$", "CXL-MEM link"),
    (r"uplink\.(up|down)$", "switch uplink"),
    (r"host_link\.(up|down)$", "host link"),
    (r"\.gpu\d*$", "GPU SMs"),
    (r"dcoh$", "DCOH trackers"),
    (r"nmp", "near-memory engine"),
)


def resource_kind(key: str) -> str:
    return next((kind for pattern, kind in RESOURCE_KINDS if re.search(pattern, key)), key)


def point(
    system: str, model: str, gpus: int, mems: int, batches: int, outdir: str, gpu: str | None
) -> dict:
    """One simulated configuration, as a row of the table."""
    results = Simulator(
        system, DlrmWorkload(model), batches, outdir, gpus=gpus, cxl_mems=mems, gpu=gpu,
        progress=False,
    ).run()  # fmt: skip
    batch_ms = results["batch_time_ms"]["mean"]
    samples = results["batch_size"]
    with open(os.path.join(outdir, "stats.json")) as handle:
        stats = {key: row["value"] for key, row in json.load(handle).items()}
    switched = sum(v for k, v in stats.items() if k.endswith(".bytesForwarded"))
    used = results["resource_utilisation"]
    busiest = max(sorted(used), key=lambda key: used[key])
    return {
        "system": system,
        "model": model,
        "gpus": gpus,
        "cxl_mems": mems,
        "batch_ms": batch_ms,
        "samples_per_s": samples / batch_ms * 1e3,
        "checkpoint_share": results["breakdown_ms"].get("checkpoint", 0.0) / batch_ms,
        "commit_share": stats.get("board.commitShare"),  # None: one device, no commit
        "commit_switch_share": (
            stats["board.commitSwitchedBytes"] / switched if "board.commits" in stats else None
        ),
        "energy_per_sample_mj": results["energy_j"]["total"] / (samples * batches) * 1e3,
        "saturated": resource_kind(busiest),
        "utilisation": used[busiest],
    }


def grid_of(args) -> list[tuple[str, str, int, int]]:
    return [(s, m, g, k) for m in args.models for s in args.systems for g in args.gpus
            for k in args.mems]  # fmt: skip


def check_grid(args) -> None:
    """Every point's options, checked before the first is run (a bad one refuses the
    study at once, not after the points before it)."""
    with tempfile.TemporaryDirectory() as scratch:
        for system, model, gpus, mems in grid_of(args):
            simulator = Simulator(system, DlrmWorkload(model), args.batches, scratch, gpus=gpus,
                                  cxl_mems=mems, progress=False)  # fmt: skip
            estimate, room = estimate_memory(simulator.options), available_memory()
            if room is not None and estimate.total > room:
                raise UsageError(
                    f"--models {model} --batches {args.batches} (--systems {system}, --gpus "
                    f"{gpus}, --mems {mems}) would need {estimate.describe()}, more than the "
                    f"{format_bytes(room)} of memory available; reduce them"
                )


def study(args) -> list[dict]:
    grid = grid_of(args)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for system, model, gpus, mems in tqdm(
            grid, desc="scaling", unit="run", file=sys.stderr, disable=None
        ):
            out = os.path.join(scratch, f"{system}_{model}_{gpus}x{mems}")
            rows.append(point(system, model, gpus, mems, args.batches, out, args.gpu))
    base = {(r["system"], r["model"]): r for r in rows if (r["gpus"], r["cxl_mems"]) == (1, 1)}
    for row in rows:
        one = base.get((row["system"], row["model"]))
        row["speedup"] = row["samples_per_s"] / one["samples_per_s"] if one else float("nan")
    return rows


def write_table(rows: list[dict], outdir: Path) -> str:
    with open(outdir / "scaling.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        "| model | system | GPUs x CXL-MEMs | batch (ms) | samples/s | speedup | checkpoint "
        "share | commit share (ppm) | commit switch bytes (ppm) | energy/sample (mJ) | saturated "
        "resource (utilisation) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['system']} | {r['gpus']} x {r['cxl_mems']} | "
            f"{r['batch_ms']:.3f} | {r['samples_per_s']:,.0f} | {r['speedup']:.2f}x | "
            f"{r['checkpoint_share']:.1%} | {_share(r['commit_share'])} | "
            f"{_share(r['commit_switch_share'])} | {r['energy_per_sample_mj']:.2f} | "
            f"{r['saturated']} ({r['utilisation']:.0%}) |"
        )
    table = "\n".join(lines) + "\n"
    with open(outdir / "scaling.md", "w") as handle:
        handle.write(table)
    return table


def _share(value: float | None) -> str:
    """A share in parts per million (the commit's are tiny); '-' on one device."""
    return "-" if value is None else f"{value * 1e6:.1f}"


def plot(rows: list[dict], outdir: Path) -> None:
    from components.sim.mpl import pyplot

    plt = pyplot()
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4.5 * len(models), 3.8), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        for system in dict.fromkeys(r["system"] for r in rows):
            for gpus in sorted({r["gpus"] for r in rows}):
                line = [
                    r for r in rows if (r["model"], r["system"], r["gpus"]) == (model, system, gpus)
                ]
                ax.plot([r["cxl_mems"] for r in line], [r["samples_per_s"] for r in line],
                        marker="o", linestyle="-" if system == "cxl" else "--",
                        label=f"{system}, {gpus} GPU{'s' * (gpus > 1)}")  # fmt: skip
        counts = sorted({r["cxl_mems"] for r in rows})
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_title(model.upper())
        ax.set_xlabel("CXL-MEMs (tables sharded over them)")
        ax.set_ylabel("training throughput (samples/s)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, title="system, GPUs", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "scaling.png", dpi=200)
    plt.close(fig)


def recovery_study(args, outdir: Path) -> str:
    """Recovery time vs M: a power cut one tick before batch 1's last update ends, on
    1 GPU x M CXL-MEMs (the functional default rows; 1 x 1 is the single-device board).
    Each device reads back its own logs and MLP stripe, all devices at once."""
    lines = ["| system | CXL-MEMs | resume | bytes read | recovery (ms) | phases (ms) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    points = [(s, m) for s in args.systems for m in args.mems]
    for system, mems in tqdm(points, desc="recovery", unit="point", file=sys.stderr, disable=None):
        options = RunOptions(system=system, model=args.models[0], batches=3, cxl_mems=mems,
                             gpu=args.gpu, progress=False)  # fmt: skip
        entry = recovery_cost(options)
        phases = ", ".join(f"{k.removeprefix('recovery_')} {v:.3f}"
                           for k, v in entry.get("recovery_phases_ms", {}).items())  # fmt: skip
        lines.append(
            f"| {system} | {mems} | {entry['resume_batch']} ({entry['verdict']}) | "
            f"{entry.get('recovery_bytes_read', '-')} | {entry['recovery_ms']:.3f} | {phases} |"
        )
    text = "\n".join(lines) + "\n"
    (outdir / "recovery.md").write_text(text)
    return text


def main(argv: list[str]) -> int:
    parser = QuietParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default="scaling", help="where the table and figures go")
    add_names_option(parser, "--systems", list(SYSTEMS), "systems to scale", CHOICES)
    add_names_option(parser, "--models", list(MODELS), "models to run", MODELS)
    parser.add_argument(
        "--gpus", nargs="+", type=int, default=list(COUNTS), help="GPU counts (default 1 2 4 8)"
    )
    parser.add_argument(
        "--mems", nargs="+", type=int, default=list(COUNTS), help="CXL-MEM counts (default 1 2 4 8)"
    )
    parser.add_argument("--batches", type=int, default=4, help="batches per point (default 4)")
    parser.add_argument("--gpu", default=None, metavar="NAME", help="a GPU preset (docs/gpu.md)")
    parser.add_argument(
        "--recovery",
        action="store_true",
        help="instead: recovery time vs CXL-MEMs (1 GPU, the first model, real numerics)",
    )

    def body() -> int:
        args = parser.parse_args(argv)
        args.systems = names(args.systems, "--systems", CHOICES)
        args.models = names(args.models, "--models", MODELS)
        args.gpu = check_gpu_name(args.gpu)
        check_steady_batches(args.batches)
        for flag, counts in (("--gpus", args.gpus), ("--mems", args.mems)):
            if min(counts) < 1:
                raise UsageError(f"{flag}: device counts must be at least 1, got {min(counts)}")
            if max(counts) > MAX_ENDPOINTS:
                raise UsageError(f"{flag}: at most {MAX_ENDPOINTS} devices, got {max(counts)}")
        check_outdir(args.outdir)
        outdir, owned = Path(args.outdir), RECOVERY_OUTPUTS if args.recovery else TABLE_OUTPUTS
        check_outputs(outdir, owned)
        if args.recovery:
            with replacing_dir(outdir, owned) as staging:
                text = recovery_study(args, staging)
            print(text, end="")
            print(f"-> {args.outdir}/recovery.md")
            return 0
        check_grid(args)
        rows = study(args)
        with replacing_dir(outdir, owned) as staging:  # all three, or none of them
            table = write_table(rows, staging)
            plot(rows, staging)
        print(table, end="")
        print(f"-> {args.outdir}/scaling.csv, scaling.md, scaling.png")
        return 0

    return run_main(PROG, body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
