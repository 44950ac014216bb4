"""CPR's partial recovery against full recovery when the tables are sharded over nodes.

    python scripts/cpr_shards.py --outdir cpr [--system pmem] [--model rm1]
        [--shards 1,2,4,8,16] [--mtbf 3600,86400] [--target 0.01] [--store table2-ssd]
        [--shares 0.125]

Each of N nodes like ``--system``'s host holds 1/N of the tables and checkpoints its
shard to a store of its own (``--store``); a failure takes one node down. Full
recovery reloads every shard and reruns the batches since the checkpoint; partial
recovery (CPR) reloads the failed node's shard only and gives its updates since the
checkpoint up. The engine times one shard's save and load
(simulate/failures/costs.cpr_shard_costs) and the batch (the system with
``--checkpoint none``); long runs of ``--days`` days under exponential failures
(simulate/failures/partial.py) report save, load and rerun time and the lost samples
separately, at Young's interval and, for partial recovery, at the longest interval whose
expected lost share stays within ``--target``. CPR's prioritised checkpoints ("partial,
MFU r" and "partial, SSU r" for each r of ``--shares``: after a full checkpoint, ones
of the most used rows, or of a uniform sample of the used rows, r of them, until they
would outgrow a full one) run with partial recovery at Young's interval on their mean
save; the engine times their save (simulate/failures/costs.cpr_prioritised_costs), and
their lost samples add the updates to rows they did not save
(simulate/failures/partial.py). Writes REPORT.md and overhead.png.
docs/software_ft.md discusses it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("cpr_shards.py")

import numpy as np  # noqa: E402

from components.boards.software_ft import SOFTWARE_FT_SYSTEMS  # noqa: E402
from components.memory.stores import DEFAULT_STORE, STORES  # noqa: E402
from components.sim.outputs import replacing_dir  # noqa: E402
from simulate.failures.costs import (  # noqa: E402
    cpr_prioritised_scheme,
    cpr_shard_costs,
    timed_run,
)
from simulate.failures.goodput import exponential_gaps, young_interval  # noqa: E402
from simulate.failures.long_run_args import (  # noqa: E402
    check_long_runs,
    check_progress,
    number_list,
    share_list,
)
from simulate.failures.partial import ShardedScheme, lost_share_interval, sharded_run  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.configure import batch_size_of  # noqa: E402
from simulate.run.options import RunOptions, check_seed  # noqa: E402
from simulate.run.preflight import check_outdir  # noqa: E402

OWNED = ("REPORT.md", "overhead.png")


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="cpr_shards.py", description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default="cpr")
    parser.add_argument("--system", default="pmem")
    parser.add_argument("--model", default="rm1")
    parser.add_argument("--shards", default="1,2,4,8,16", help="nodes, comma-separated")
    parser.add_argument("--mtbf", default="3600,86400", help="seconds, comma-separated")
    parser.add_argument("--target", type=float, default=0.01, help="lost share bound")
    parser.add_argument("--days", type=float, default=30.0, help="training days per long run")
    parser.add_argument("--store", default=DEFAULT_STORE)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--shares", default="0.125", help="rows per MFU / SSU checkpoint, comma-separated"
    )
    args = parser.parse_args(argv)
    if args.system not in SOFTWARE_FT_SYSTEMS:
        raise UsageError(f"--system {args.system!r}: one of {', '.join(SOFTWARE_FT_SYSTEMS)}")
    if args.store not in STORES:
        raise UsageError(f"--store {args.store!r}: one of {', '.join(STORES)}")
    args.shards = number_list(args.shards, "--shards", int)
    if max(args.shards) > 1024:
        raise UsageError("--shards: at most 1024 nodes")
    args.mtbf = number_list(args.mtbf, "--mtbf", what="seconds")
    if not (np.isfinite(args.target) and 0 < args.target < 1):
        raise UsageError(f"--target must be in (0, 1), got {args.target}")
    args.shares = share_list(args.shares, "--shares")
    check_long_runs(args.mtbf, args.days)
    check_seed(args.seed)
    check_outdir(args.outdir)
    return args


def compare(args) -> int:
    base = RunOptions(system=args.system, model=args.model, seed=args.seed, progress=False,
                      checkpoint="none", store=args.store)  # fmt: skip
    samples = batch_size_of(base)
    batch_s = timed_run(base, batches=4)["batch_time_ms"]["mean"] / 1e3
    rows = []
    for shards in args.shards:
        costs = cpr_shard_costs(base, shards)
        for mtbf in args.mtbf:
            young = young_interval(costs["save_s"], mtbf, batch_s)
            bound = lost_share_interval(args.target, shards, mtbf, batch_s, costs["save_s"])
            for name, partial, interval, load in (
                ("full", False, young, costs["load_all_s"]),
                ("partial", True, young, costs["load_s"]),
                (f"partial, lost share <= {args.target:g}", True, bound, costs["load_s"]),
            ):
                scheme = ShardedScheme(name, batch_s, costs["save_s"], load, interval, shards,
                                       partial)  # fmt: skip
                if not partial:  # rolls back to the checkpoint at every failure
                    check_progress(name, interval * batch_s + costs["save_s"], mtbf)
                n = int(args.days * 86400 / (batch_s + costs["save_s"] / interval))
                run = sharded_run(scheme, n, samples, exponential_gaps(mtbf, args.seed))
                rows.append((shards, mtbf, run))
            for share in args.shares:
                for kind in ("mfu", "ssu"):
                    name = f"partial, {kind.upper()} {share:g}"
                    scheme = cpr_prioritised_scheme(
                        base, costs, shards, mtbf, batch_s, share, kind, name
                    )[0]
                    n = int(args.days * 86400 / (batch_s + scheme.mean_save / scheme.interval))
                    run = sharded_run(scheme, n, samples, exponential_gaps(mtbf, args.seed))
                    rows.append((shards, mtbf, run))
    text = report(rows, args, batch_s)
    with replacing_dir(Path(args.outdir), OWNED) as staging:
        (staging / "REPORT.md").write_text(text)
        plot(rows, staging)
    print(text)
    return 0


def report(rows, args, batch_s: float) -> str:
    lines = [
        f"# CPR on {args.model}, tables sharded over nodes like {args.system}: "
        f"{args.days:g} days per run",
        "",
        f"Batch {batch_s * 1e3:.3f} ms; store {args.store}; save and load are one shard's "
        "(the nodes work in parallel).",
        "",
        "Prioritised rows (MFU, SSU): save is the full checkpoint's / a prioritised one's, "
        "chain the prioritised ones per full one.",
        "",
        "| shards | MTBF (h) | recovery | interval (batches) | save (s) | load (s) | failures | "
        "saving | loading | rerunning | overhead | lost share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shards, mtbf, run in rows:
        s = run.scheme
        save = f"{s.save_s:.4g}"
        if s.prioritised is not None:
            save += f" / {s.partial_save_s:.4g} (chain {s.chain})"
        lines.append(
            f"| {shards} | {mtbf / 3600:g} | {s.name} | {s.interval:,} | {save} | "
            f"{s.load_s:.4g} | {run.failures} | {run.save_s / run.wall_s:.2%} | "
            f"{run.load_s / run.wall_s:.2%} | {run.rerun_s / run.wall_s:.2%} | "
            f"{run.overhead:.2%} | {run.lost_share:.3%} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows, outdir: Path) -> None:
    """Top row: overhead (save + load + rerun) against the nodes, per MTBF; bottom row:
    the samples partial recovery gives up (full recovery loses none: not drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    mtbfs = list(dict.fromkeys(m for _, m, _ in rows))
    counts = sorted({n for n, _, _ in rows})
    names = list(dict.fromkeys(r.scheme.name for _, _, r in rows))
    styles = {
        name: ("o^sDvP<>"[i % 8], "--" if "SSU" in name else "-", f"C{i % 10}")
        for i, name in enumerate(names)
    }  # one look per scheme in every panel
    fig, axes = plt.subplots(2, len(mtbfs), figsize=(5 * len(mtbfs), 8), squeeze=False)
    for col, mtbf in enumerate(mtbfs):
        for row, (what, label) in enumerate((
            ("overhead", "overhead: save + load + rerun (% of wall time)"),
            ("lost_share", "samples whose updates were lost (% of samples)"),
        )):  # fmt: skip
            ax = axes[row][col]
            for name in names:
                mine = [(n, r) for n, m, r in rows if m == mtbf and r.scheme.name == name]
                points = [(n, getattr(r, what)) for n, r in mine if getattr(r, what) > 0]
                if points:
                    marker, line, color = styles[name]
                    ax.plot(*zip(*points, strict=True), marker=marker, linestyle=line,
                            color=color, label=legend_label(name))  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(c) for c in counts])
            ax.minorticks_off()
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=None))
            ax.set_xlabel("shards (nodes, each saving its share in parallel)")
            ax.set_ylabel(label)
            note = " (full recovery loses none)" if what == "lost_share" else ""
            ax.set_title(f"MTBF {mtbf / 3600:g} h{note}", fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "overhead.png", dpi=120)
    plt.close(fig)


def legend_label(name: str) -> str:
    """A scheme's name for the legend: a prioritised one's share as a percentage."""
    for kind in ("MFU", "SSU"):
        if f"{kind} " in name:
            share = float(name.rsplit(" ", 1)[1])
            return f"partial, CPR-{kind} ({share:.3g} of rows per checkpoint)"
    return name.replace("lost share <= ", "interval: lost share <= ")


def main(argv: list[str] | None = None) -> int:
    return run_main("cpr_shards.py", lambda: compare(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
