"""The Optane model against the published thread sweeps, whole curves rather than rows.

    python scripts/optane_sweeps.py --outdir sweeps

docs/validation.md checks single points; a reviewer asks how the curves compare. This
runs ``configs/microbench.py --device pmem --optane --threads N`` at every point of
docs/validation/optane_sweeps.csv (one DIMM and six interleaved, random 256 B and 4 KiB
reads and ntstores, 1-24 threads, the medians of NVSL/OptaneStudy's repeats) and writes
sweeps.csv (measured, simulated, their ratio, the role) and sweeps.png (the curves). The
one-DIMM sweeps are what the model was calibrated on, the six-DIMM ones its validation.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("optane_sweeps.py")

from tqdm import tqdm  # noqa: E402

from components.sim.outputs import replacing_dir  # noqa: E402
from scripts.validate import run_command  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.preflight import check_outdir  # noqa: E402

POINTS = ROOT / "docs" / "validation" / "optane_sweeps.csv"
OUTPUTS = ("sweeps.csv", "sweeps.png")
REQUESTS = {("read", 256): "8000", ("write", 256): "8000", ("read", 4096): "200",
            ("write", 4096): "200"}  # fmt: skip
"""Requests per thread: enough for the steady rate (the run's start and drain are under
2% of it at 24 threads). A 4 KiB thread runs a stage per block (one DIMM at a time),
so 200 blocks a thread: 4,800 at 24 threads."""
BAND = 0.15
"""The bandwidth band of docs/validation.md, for the count of points inside it."""


def load_points(path: Path = POINTS) -> list[dict]:
    """The measured points: dimms, op, size, threads, measured_gbps."""
    with path.open() as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        return [
            {
                "dimms": int(r["dimms"]),
                "op": r["op"],
                "size": int(r["size"]),
                "threads": int(r["threads"]),
                "measured_gbps": float(r["measured_gbps"]),
            }
            for r in rows
        ]


def role(dimms: int) -> str:
    """The one-DIMM sweeps calibrated the model; the six-DIMM ones validate it."""
    return "calibration" if dimms == 1 else "validation"


def dimms_text(dimms: int) -> str:
    return f"{dimms} DIMM{'s' if dimms > 1 else ''}"


def command(point: dict) -> tuple[str, ...]:
    return (
        "configs/microbench.py", "--device", "pmem", "--optane",
        "--controllers", str(point["dimms"]), "--op", point["op"], "--pattern", "rand",
        "--size", str(point["size"]), "--threads", str(point["threads"]),
        "--requests", REQUESTS[point["op"], point["size"]],
    )  # fmt: skip


def simulate(points: list[dict], runner=run_command) -> list[dict]:
    """Each point with its simulated bandwidth, ratio and role."""
    done = []
    for point in tqdm(points, desc="sweeps", unit="point", file=sys.stderr, disable=None):
        simulated = runner(command(point), "results.json")["total_bandwidth_gbps"]
        done.append(
            {
                **point,
                "simulated_gbps": round(simulated, 3),
                "ratio": round(simulated / point["measured_gbps"], 3),
                "role": role(point["dimms"]),
            }
        )
    return done


def summary(results: list[dict]) -> list[str]:
    """Per sweep: the points inside the band and the worst ratio."""
    lines = []
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["dimms"], r["op"], r["size"]), []).append(r)
    for (dimms, op, size), rows in groups.items():
        inside = sum(abs(r["ratio"] - 1) <= BAND for r in rows)
        worst = max(rows, key=lambda r: abs(math.log(r["ratio"])))
        lines.append(
            f"{dimms_text(dimms)} {op} {size} B: {inside}/{len(rows)} within "
            f"{BAND:.0%}, worst {worst['ratio']:.2f}x at {worst['threads']} threads"
        )
    return lines


def plot(results: list[dict], path: Path) -> None:
    """One panel per kind of access; measured as markers, simulated as lines, one colour
    per DIMM count."""
    from components.sim.mpl import pyplot

    plt = pyplot()
    kinds = [("read", 256), ("read", 4096), ("write", 256), ("write", 4096)]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), layout="constrained", sharex=True)
    colours = {1: "tab:blue", 6: "tab:orange"}
    for ax, (op, size) in zip(axes.flat, kinds, strict=True):
        for dimms, colour in colours.items():
            rows = sorted(
                (r for r in results if (r["op"], r["size"], r["dimms"]) == (op, size, dimms)),
                key=lambda r: r["threads"],
            )
            threads = [r["threads"] for r in rows]
            label = f"{dimms_text(dimms)} ({role(dimms)})"
            ax.plot(threads, [r["measured_gbps"] for r in rows], "o", color=colour,
                    label=f"{label}, measured")  # fmt: skip
            ax.plot(threads, [r["simulated_gbps"] for r in rows], "-", color=colour,
                    label=f"{label}, simulated")  # fmt: skip
        verb = "reads" if op == "read" else "ntstores"
        ax.set_title(f"random {size:,} B {verb}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("threads")
    for ax in axes[:, 0]:
        ax.set_ylabel("bandwidth (GB/s)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False)
    fig.suptitle("Optane model vs NVSL/OptaneStudy thread sweeps (Yang et al. FAST'20)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(results: list[dict], outdir: Path) -> None:
    fields = ["dimms", "op", "size", "threads", "measured_gbps", "simulated_gbps", "ratio", "role"]
    with replacing_dir(outdir, OUTPUTS) as stage:
        with (stage / "sweeps.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(results)
        plot(results, stage / "sweeps.png")


def main(argv: list[str] | None = None) -> int:
    return run_main("optane_sweeps.py", lambda: sweeps(argv))


def sweeps(argv: list[str] | None) -> int:
    parser = QuietParser(prog="optane_sweeps.py", description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", required=True, help="where sweeps.csv and sweeps.png go")
    args = parser.parse_args(argv)
    check_outdir(args.outdir)
    if not POINTS.is_file():
        raise UsageError(f"{POINTS.relative_to(ROOT)}: missing")
    results = simulate(load_points())
    write(results, Path(args.outdir))
    print("\n".join(summary(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
