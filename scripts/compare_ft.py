"""Hardware against software failure tolerance on one machine model, over failure rates.

    python scripts/compare_ft.py --outdir ft [--model rm1] [--mtbf 3600,21600,86400,604800]

TrainingCXL's systems (cxl-b, cxl) and the PMEM baseline with their own per-batch
protocols, against CPR and Check-N-Run (FP32, 8 bit, 4 bit) on the DRAM system with an
NVMe checkpoint store. The engine times each scheme's batch, checkpoint and recovery and
their energy, and counts the bytes each writes per batch (the paper's protocols: their
log records and flags; the software policies: checkpoint bytes over the interval)
(simulate/failures/costs.py); long runs of ``--days`` days of training under exponential
failures (seeded) give overhead, lost work and goodput (simulate/failures/goodput.py). Writes
REPORT.md (the table), goodput.png and overhead.png. docs/software_ft.md discusses it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("compare_ft.py")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from components.sim.outputs import check_outputs, replacing_dir  # noqa: E402
from components.sim.units import plain_text_number  # noqa: E402
from simulate.failures.costs import (  # noqa: E402
    batch_joules,
    cnr_costs,
    cpr_costs,
    log_bytes_per_batch,
    paper_scheme,
    snapshot_rates,
    timed_run,
)
from simulate.failures.goodput import Scheme, exponential_gaps, long_run, young_interval  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.configure import batch_size_of  # noqa: E402
from simulate.run.options import RunOptions, check_seed  # noqa: E402
from simulate.run.preflight import check_outdir  # noqa: E402
from workloads.models import get_model  # noqa: E402

PAPER_SYSTEMS = ("pmem", "cxl-b", "cxl")
MTBF_SECONDS = (60.0, 3.2e7)
"""A failure a minute to one a year: CPR evaluates hours to days; below a minute a
checkpoint of gigabytes to NVMe may never complete between failures."""
MIN_DAYS = 1e-3  # 86 s: longer than any scheme's batch plus its checkpoint
MAX_FAILURES = 100_000
"""Failures one long run may draw: each is a step of the long run's loop."""
HOPELESS = 20.0
"""A scheme whose checkpoint period is this many MTBFs long completes one with odds of
e^-20: it would loop through failures without end."""
QUANTIZE = ("none", "8", "4")
OWNED = ("REPORT.md", "goodput.png", "overhead.png")


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="compare_ft.py", description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default="ft")
    parser.add_argument("--model", default="rm1")
    parser.add_argument(
        "--mtbf", default="3600,21600,86400,604800", help="seconds, comma-separated"
    )
    parser.add_argument("--days", type=float, default=30.0, help="training days per long run")
    parser.add_argument("--batches", type=int, default=6, help="batches per timing run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        args.mtbf = [float(plain_text_number(x)) for x in args.mtbf.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--mtbf expects seconds separated by commas, got {args.mtbf!r}") from None
    if not args.mtbf or not all(np.isfinite(m) and m > 0 for m in args.mtbf):
        raise UsageError("--mtbf values must be positive numbers of seconds")
    low, high = MTBF_SECONDS
    if not all(low <= m <= high for m in args.mtbf):
        raise UsageError(f"--mtbf values must be in {low:g}..{high:g} seconds, got {args.mtbf}")
    if not (np.isfinite(args.days) and MIN_DAYS <= args.days <= 3650):
        raise UsageError(f"--days must be in [{MIN_DAYS:g}, 3650], got {args.days}")
    failures = args.days * 86400 / min(args.mtbf)
    if failures > MAX_FAILURES:
        raise UsageError(
            f"--days {args.days:g} at --mtbf {min(args.mtbf):g} is ~{failures:,.0f} failures a "
            f"long run, more than {MAX_FAILURES:,}: fewer days or a longer MTBF"
        )
    if not 3 <= args.batches <= 1000:
        raise UsageError(f"--batches must be in 3..1000, got {args.batches}")
    check_seed(args.seed)
    get_model(args.model)  # an unknown model is refused before any progress bar
    check_outdir(args.outdir)
    check_outputs(Path(args.outdir), OWNED)
    return args


def best_cnr_interval(options, batch_s: float, mtbf: float, costs_at) -> tuple[int, dict]:
    """The interval minimising checkpoint cost per batch plus expected failure cost
    (half an interval of lost work and a recovery per MTBF), over a log grid: a
    differential's cost grows with its interval, so Young's constant-cost rule does
    not apply."""
    best = None
    for interval in INTERVALS:
        costs = costs_at(options.quantize, interval)
        span = interval * batch_s + costs["checkpoint_s"]
        waste = costs["checkpoint_s"] / span + (span / 2 + costs["recovery_s"]) / mtbf
        if best is None or waste < best[0]:
            best = (waste, interval, costs)
    return best[1], best[2]


INTERVALS = [int(k) for k in np.unique(np.geomspace(1, 1e7, 22).astype(int))]


def compare(args) -> int:
    base = RunOptions(system="dram", model=args.model, seed=args.seed, progress=False)
    samples = batch_size_of(base)
    bar = tqdm(total=len(PAPER_SYSTEMS) + 2, desc="timing", unit="scheme", file=sys.stderr)
    timing = timed_run(base, batches=args.batches)
    dram, dram_j = timing["batch_time_ms"]["mean"] / 1e3, batch_joules(timing)
    bar.update(1)
    papers = []
    for system in PAPER_SYSTEMS:
        options = RunOptions(system=system, model=args.model, seed=args.seed, progress=False)
        papers.append((paper_scheme(options, args.batches)[0], log_bytes_per_batch(options)))
        bar.update(1)
    cpr = cpr_costs(base)
    rates = snapshot_rates(base)
    bar.update(1)
    bar.close()
    cache: dict[tuple[str, int], dict] = {}

    def costs_at(bits: str, interval: int) -> dict:
        if (bits, interval) not in cache:
            options = RunOptions(**{**vars(base), "quantize": bits})
            cache[bits, interval] = cnr_costs(options, interval, dram, rates)
        return cache[bits, interval]

    int(args.days * 86400 / dram)
    rows = []
    for mtbf in tqdm(args.mtbf, desc="long runs", unit="mtbf", file=sys.stderr):
        schemes = list(papers)
        cpr_k = young_interval(cpr["checkpoint_s"], mtbf, dram)
        scheme = Scheme("dram+cpr", dram, cpr["checkpoint_s"], cpr["recovery_s"], cpr_k, False,
                        dram_j, cpr["checkpoint_j"], cpr["recovery_j"])  # fmt: skip
        schemes.append((scheme, cpr["bytes"]))
        for bits in QUANTIZE:
            options = RunOptions(**{**vars(base), "quantize": bits, "checkpoint": "check-n-run"})
            k, costs = best_cnr_interval(options, dram, mtbf, costs_at)
            name = "dram+cnr" + ("" if bits == "none" else f"-{bits}b")
            scheme = Scheme(name, dram, costs["checkpoint_s"], costs["recovery_s"], k, True,
                            dram_j, costs["checkpoint_j"], costs["recovery_j"])  # fmt: skip
            schemes.append((scheme, costs["bytes_per_checkpoint"]))
        for scheme, nbytes in schemes:
            period = scheme.interval * scheme.batch_s + scheme.checkpoint_s
            if period > HOPELESS * mtbf:
                raise UsageError(
                    f"--mtbf {mtbf:g}: {scheme.name} needs {period:.3g} s between checkpoints, "
                    f"{period / mtbf:.0f} MTBFs: it would never complete one"
                )
            n = int(args.days * 86400 / (scheme.batch_s + scheme.checkpoint_s / scheme.interval))
            run = long_run(scheme, n, samples, exponential_gaps(mtbf, args.seed))
            rows.append((mtbf, scheme, run, nbytes))
    text = report(rows, args)
    with replacing_dir(Path(args.outdir), OWNED) as staging:
        (staging / "REPORT.md").write_text(text)
        plot(rows, staging)
    print(text)
    return 0


def report(rows, args) -> str:
    lines = [
        f"# Failure tolerance on {args.model}: {args.days:g} days of training per run",
        "",
        "| MTBF (h) | scheme | interval (batches) | checkpoint (s) | recovery (s) | "
        "bytes per batch | failures | lost batches | overhead | goodput (samples/s) | "
        "energy per sample (mJ) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mtbf, scheme, run, nbytes in rows:
        per_batch = f"{nbytes / scheme.interval:,.0f}"
        lines.append(
            f"| {mtbf / 3600:g} | {scheme.name} | {scheme.interval:,} | "
            f"{scheme.checkpoint_s:.4g} | {scheme.recovery_s:.4g} | {per_batch} | "
            f"{run.failures} | {run.lost_batches:,} | {run.overhead:.2%} | {run.goodput:,.0f} | "
            f"{run.energy_per_sample * 1e3:.4g} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows, outdir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(scheme.name for _, scheme, _, _ in rows))
    for key, ylabel, filename in (
        ("goodput", "goodput (samples/s)", "goodput.png"),
        ("overhead", "overhead (share of wall time)", "overhead.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in names:
            points = [(m / 3600, getattr(r, key)) for m, s, r, _ in rows if s.name == name]
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("MTBF (hours)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(outdir / filename, dpi=120)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return run_main("compare_ft.py", lambda: compare(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
