"""Hardware against software failure tolerance, on the same memory first, over failure rates.

    python scripts/compare_ft.py --outdir ft [--model rm1] [--mtbf 3600,21600,86400,604800]
        [--memories pmem,ssd,dram] [--store table2-ssd] [--shares 0.125]

Rows are grouped by the memory that holds the tables, so that a group compares failure
tolerance on the same hardware: on PMEM (Table 2's modules), the PMEM baseline and
TrainingCXL's systems (cxl-b, cxl) with their own per-batch protocols beside CPR and
Check-N-Run (FP32, 8 bit, 4 bit) on the host PMEM system; then the SSD system and the
DRAM system with the same software policies. Each row states its hardware: the tables'
memory, its modules and capacity, its bandwidth, and the checkpoint store (``--store``,
components/memory/stores.py). The engine times each scheme's batch, checkpoint and
recovery and their energy, and counts the bytes each writes per batch (the paper's
protocols: their log records and flags; the software policies: checkpoint bytes over the
interval) (simulate/failures/costs.py); long runs of ``--days`` days of training under
exponential failures (seeded) give overhead, lost work and goodput
(simulate/failures/goodput.py). With ``--shares``, each CPR row gains CPR-MFU and
CPR-SSU rows for each share r (a full checkpoint, then ones of r of the rows until
they would outgrow a full one; simulate/failures/costs.cpr_prioritised_scheme) on one
node with CPR's partial recovery, their lost samples counted as scripts/cpr_shards.py
counts them (simulate/failures/partial.py), and REPORT.md a second table of the CPR
rows' time overhead and lost share. Writes REPORT.md (the table), goodput.png and
overhead.png. docs/software_ft.md discusses it."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simulate.run.startup import quiet_interrupts  # noqa: E402

quiet_interrupts("compare_ft.py")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from components.memory.stores import DEFAULT_STORE, STORES  # noqa: E402
from components.sim.outputs import check_outputs, replacing_dir  # noqa: E402
from simulate.failures.costs import (  # noqa: E402
    batch_joules,
    cnr_costs,
    cpr_costs,
    cpr_prioritised_scheme,
    hardware,
    hardware_text,
    log_bytes_per_batch,
    paper_scheme,
    snapshot_rates,
    timed_run,
)
from simulate.failures.goodput import (  # noqa: E402
    LongRun,
    Scheme,
    exponential_gaps,
    long_run,
    young_interval,
)
from simulate.failures.long_run_args import (  # noqa: E402
    check_long_runs,
    check_progress,
    number_list,
    share_list,
)
from simulate.failures.partial import ShardedRun, sharded_run  # noqa: E402
from simulate.run.cli import QuietParser, UsageError, run_main  # noqa: E402
from simulate.run.configure import batch_size_of  # noqa: E402
from simulate.run.options import RunOptions, check_gpu_name, check_seed  # noqa: E402
from simulate.run.preflight import check_outdir  # noqa: E402
from workloads.models import get_model  # noqa: E402

QUANTIZE = ("none", "8", "4")
OWNED = ("REPORT.md", "goodput.png", "overhead.png")
MEMORIES = ("pmem", "ssd", "dram")  # the tables' memory, same-memory rows first
PAPER_SYSTEMS = {"pmem": ("pmem", "cxl-b", "cxl"), "ssd": (), "dram": ()}
# systems whose host runs the software policies on tables in that memory
SOFTWARE_SYSTEMS = {"pmem": ("pmem", "cxl-d"), "ssd": ("ssd",), "dram": ("dram",)}
GROUPS = {
    "pmem": "same memory: PMEM (Table 2)",
    "ssd": "same memory: NVMe SSD (Table 2)",
    "dram": "DRAM-resident tables",
}


def parse_args(argv: list[str] | None):
    parser = QuietParser(prog="compare_ft.py", description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", default="ft", help="where the tables and figures go")
    parser.add_argument("--model", default="rm1", help="model preset (default rm1)")
    parser.add_argument(
        "--mtbf", default="3600,21600,86400,604800", help="seconds, comma-separated"
    )
    parser.add_argument("--days", type=float, default=30.0, help="training days per long run")
    parser.add_argument("--batches", type=int, default=6, help="batches per timing run")
    parser.add_argument("--seed", type=int, default=1, help="seed of every run (default 1)")
    parser.add_argument("--gpu", default=None, metavar="NAME", help="a GPU preset (docs/gpu.md)")
    parser.add_argument(
        "--memories",
        default=",".join(MEMORIES),
        help=f"the tables' memories to compare on, comma-separated (of {', '.join(MEMORIES)})",
    )
    parser.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help=f"the software policies' checkpoint store, one of {', '.join(STORES)}",
    )
    parser.add_argument(
        "--shares",
        default=None,
        help="rows per CPR-MFU / CPR-SSU checkpoint, comma-separated (default: none)",
    )
    args = parser.parse_args(argv)
    args.gpu = check_gpu_name(args.gpu)
    if args.store not in STORES:
        raise UsageError(f"--store {args.store!r}: one of {', '.join(STORES)}")
    args.memories = [m.strip() for m in args.memories.split(",") if m.strip()]
    unknown = [m for m in args.memories if m not in MEMORIES]
    if unknown or not args.memories:
        raise UsageError(f"--memories: one or more of {', '.join(MEMORIES)}, got {unknown}")
    args.mtbf = number_list(args.mtbf, "--mtbf", what="seconds")
    args.shares = [] if args.shares is None else share_list(args.shares, "--shares")
    check_long_runs(args.mtbf, args.days)
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
    rows = []
    for memory in args.memories:
        for mtbf, scheme, nbytes, hw, samples, sharded in compare_on(memory, args):
            n = int(args.days * 86400 / (scheme.batch_s + scheme.checkpoint_s / scheme.interval))
            gaps = exponential_gaps(mtbf, args.seed)
            if sharded is None:
                period = scheme.interval * scheme.batch_s + scheme.checkpoint_s
                check_progress(scheme.name, period, mtbf)
                run, part = long_run(scheme, n, samples, gaps), None
            else:  # partial recovery: nothing rolls back, nothing to check
                part = sharded_run(sharded, n, samples, gaps)
                run = as_long_run(scheme, part)
            rows.append((memory, mtbf, scheme, run, nbytes, hw, part))
    text = report(rows, args)
    with replacing_dir(Path(args.outdir), OWNED) as staging:
        (staging / "REPORT.md").write_text(text)
        plot(rows, staging)
    print(text)
    return 0


def compare_on(memory: str, args) -> list[tuple]:
    """Every scheme whose tables live in ``memory``: the systems' own protocols on it,
    then CPR and Check-N-Run driven by the host of each system that keeps its tables
    there (on PMEM: the host's own, and CXL-MEM's under CXL-D)."""
    systems = PAPER_SYSTEMS[memory]
    bar = tqdm(total=len(systems), desc=f"protocols ({memory})", unit="scheme", file=sys.stderr)
    papers = []
    for system in systems:
        options = RunOptions(
            system=system, model=args.model, seed=args.seed, gpu=args.gpu, progress=False
        )
        scheme = paper_scheme(options, args.batches)[0]
        hw = hardware_text(hardware(options))
        papers.append((scheme, log_bytes_per_batch(options), hw, batch_size_of(options)))
        bar.update(1)
    bar.close()
    rows = [(mtbf, *paper, None) for mtbf in args.mtbf for paper in papers]
    for system in SOFTWARE_SYSTEMS[memory]:
        rows += software_rows(system, args)
    order = {mtbf: i for i, mtbf in enumerate(args.mtbf)}
    return sorted(rows, key=lambda row: order[row[0]])  # stable: protocols first


def software_rows(system: str, args) -> list[tuple]:
    """CPR and Check-N-Run (FP32, 8 bit, 4 bit) on ``system``, at every MTBF: the batch
    from a run with ``--checkpoint none`` (the store installed, nothing written)."""
    base = RunOptions(
        system=system, model=args.model, seed=args.seed, progress=False, checkpoint="none",
        store=args.store, gpu=args.gpu,
    )  # fmt: skip
    samples = batch_size_of(base)
    bar = tqdm(total=3, desc=f"timing ({system}, software)", unit="step", file=sys.stderr)
    timing = timed_run(base, batches=args.batches)
    batch_s, batch_j = timing["batch_time_ms"]["mean"] / 1e3, batch_joules(timing)
    bar.update(1)
    hw = hardware_text(hardware(replace(base, checkpoint="cpr")))
    cpr = cpr_costs(base)
    bar.update(1)
    rates = snapshot_rates(base)
    bar.update(1)
    bar.close()
    cache: dict[tuple[str, int], dict] = {}

    def costs_at(bits: str, interval: int) -> dict:
        if (bits, interval) not in cache:
            options = replace(base, quantize=bits)
            cache[bits, interval] = cnr_costs(options, interval, batch_s, rates)
        return cache[bits, interval]

    rows = []
    for mtbf in tqdm(args.mtbf, desc=f"long runs ({system})", unit="mtbf", file=sys.stderr):
        cpr_k = young_interval(cpr["checkpoint_s"], mtbf, batch_s)
        scheme = Scheme(f"{system}+cpr", batch_s, cpr["checkpoint_s"], cpr["recovery_s"], cpr_k,
                        False, batch_j, cpr["checkpoint_j"], cpr["recovery_j"])  # fmt: skip
        schemes = [(scheme, cpr["bytes"], None)]
        for share in args.shares:
            for kind in ("mfu", "ssu"):
                schemes.append(
                    prioritised(base, cpr, f"{system}+cpr-{kind} {share:g}", mtbf, batch_s,
                                batch_j, share, kind)
                )  # fmt: skip
        for bits in QUANTIZE:
            options = replace(base, quantize=bits, checkpoint="check-n-run")
            k, costs = best_cnr_interval(options, batch_s, mtbf, costs_at)
            name = f"{system}+cnr" + ("" if bits == "none" else f"-{bits}b")
            scheme = Scheme(name, batch_s, costs["checkpoint_s"], costs["recovery_s"], k, True,
                            batch_j, costs["checkpoint_j"], costs["recovery_j"])  # fmt: skip
            schemes.append((scheme, costs["bytes_per_checkpoint"], None))
        for scheme, nbytes, sharded in schemes:
            rows.append((mtbf, scheme, nbytes, hw, samples, sharded))
    return rows


def prioritised(base, cpr: dict, name, mtbf, batch_s, batch_j, share, kind) -> tuple:
    """CPR-MFU or CPR-SSU (``kind``) on one node, with CPR's partial recovery: the full
    checkpoint and the recovery of ``cpr`` (cpr_costs), the prioritised save timed by
    the engine at Young's interval on the chain's mean save. The scheme as the long
    runs report it (a checkpoint's save, joules and bytes: the chain's means), its
    bytes per checkpoint, and the ShardedScheme that sharded_run runs."""
    full = {"save_s": cpr["checkpoint_s"], "load_s": cpr["recovery_s"]}
    sharded, chosen = cpr_prioritised_scheme(base, full, 1, mtbf, batch_s, share, kind, name)
    cycle = sharded.chain + 1
    joules = (cpr["checkpoint_j"] + sharded.chain * chosen["save_j"]) / cycle
    nbytes = (cpr["bytes"] + sharded.chain * chosen["stored"]) / cycle
    scheme = Scheme(name, batch_s, sharded.mean_save, cpr["recovery_s"], sharded.interval,
                    False, batch_j, joules, cpr["recovery_j"])  # fmt: skip
    return scheme, nbytes, sharded


def as_long_run(scheme: Scheme, part: ShardedRun) -> LongRun:
    """A prioritised chain's run in the long runs' terms: its lost samples as batches'
    worth of updates given up (the batches the final model does not hold), its
    checkpoints as mean saves."""
    lost = part.lost_samples / part.samples_per_batch
    checkpoints = part.save_s / scheme.checkpoint_s
    return LongRun(scheme, part.batches - lost, part.samples_per_batch, part.wall_s,
                   part.failures, part.load_s, lost, checkpoints)  # fmt: skip


def report(rows, args) -> str:
    lines = [
        f"# Failure tolerance on {args.model}: {args.days:g} days of training per run",
        "",
        f"Software policies' checkpoint store: {args.store} ({STORES[args.store].description}).",
        "",
        "Rows are grouped by the memory that holds the tables: a group compares failure "
        "tolerance on the same hardware; across groups the memory differs too.",
        "",
        "| tables in | MTBF (h) | scheme | hardware (tables; capacity budget) | "
        "interval (batches) | checkpoint (s) | recovery (s) | "
        "bytes per batch | failures | lost batches | overhead | goodput (samples/s) | "
        "energy per sample (mJ) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for memory, mtbf, scheme, run, nbytes, hw, part in rows:
        per_batch = f"{nbytes / scheme.interval:,.0f}"
        save = f"{scheme.checkpoint_s:.4g}" if part is None else chain_save(part.scheme)
        lines.append(
            f"| {GROUPS[memory]} | {mtbf / 3600:g} | {scheme.name} | {hw} | {scheme.interval:,} | "
            f"{save} | {scheme.recovery_s:.4g} | {per_batch} | "
            f"{run.failures} | {run.lost_batches:,.0f} | {run.overhead:.2%} | "
            f"{run.goodput:,.0f} | {run.energy_per_sample * 1e3:.4g} |"
        )
    if args.shares:
        lines += prioritised_report(rows)
    return "\n".join(lines) + "\n"


def chain_save(s) -> str:
    """A prioritised chain's saves: the full checkpoint's / a prioritised one's."""
    return f"{s.save_s:.4g} / {s.partial_save_s:.4g} (chain {s.chain})"


def prioritised_report(rows) -> list[str]:
    """The CPR rows as scripts/cpr_shards.py reports them: the time overhead (saving,
    loading, rerunning the batch in flight) apart from the lost share (the samples
    whose updates a recovery gave up: the batches since the newest checkpoint, and the
    prioritised chain's unsaved rows since the full one)."""
    lines = [
        "",
        "CPR's prioritised checkpoints (one node, partial recovery): time overhead "
        "(save + load + rerun, share of wall time) and lost share (samples whose updates "
        "were given up), as scripts/cpr_shards.py reports them.",
        "",
        "| tables in | MTBF (h) | scheme | interval (batches) | save (s) | time overhead | "
        "lost share |",
        "|---|---|---|---|---|---|---|",
    ]
    for memory, mtbf, scheme, run, _, _, part in rows:
        if part is None and not scheme.name.endswith("+cpr"):
            continue
        if part is None:
            ran = run.useful_batches + run.lost_batches
            time, lost = 1 - ran * scheme.batch_s / run.wall_s, run.lost_batches / ran
            save = f"{scheme.checkpoint_s:.4g}"
        else:
            time, lost, save = part.overhead, part.lost_share, chain_save(part.scheme)
        lines.append(
            f"| {GROUPS[memory]} | {mtbf / 3600:g} | {scheme.name} | {scheme.interval:,} | "
            f"{save} | {time:.2%} | {lost:.3%} |"
        )
    return lines


SYSTEM_COLORS = {"pmem": "C0", "cxl-b": "C1", "cxl": "C2", "cxl-d": "C3", "ssd": "C4", "dram": "C5"}
"""One colour per system whose memory holds the tables, in every panel."""
POLICY_STYLES = {
    "protocol": ("s", "-"),
    "cpr": ("o", "-"),
    "cpr-mfu": ("o", "--"),
    "cpr-ssu": ("o", ":"),
    "cnr": ("^", "-"),
    "cnr-8b": ("^", "--"),
    "cnr-4b": ("^", ":"),
}
"""Marker and line per failure-tolerance scheme: the paper's protocols squares, CPR
circles, Check-N-Run triangles; variants dashed and dotted."""


def scheme_style(name: str) -> tuple[str, str, str]:
    """Colour (the system), marker and line (the scheme) of a row's name, e.g.
    'cxl-d+cpr-mfu 0.125' or 'cxl'."""
    system, _, policy = name.partition("+")
    marker, line = POLICY_STYLES.get(policy.split(" ")[0] or "protocol", ("x", "-"))
    return SYSTEM_COLORS.get(system, "k"), marker, line


def mtbf_label(hours: float) -> str:
    return f"{hours / 24:g} d" if hours >= 24 else f"{hours:g} h"


def plot(rows, outdir: Path) -> None:
    """One panel per memory group: the schemes that share the tables' hardware, each
    system one colour and each scheme one marker and line, the legend below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    memories = list(dict.fromkeys(row[0] for row in rows))
    mtbfs = sorted({m / 3600 for _, m, *_ in rows})
    for key, ylabel, filename in (
        ("goodput", "goodput (samples/s)", "goodput.png"),
        ("overhead", "overhead (% of wall time)", "overhead.png"),
    ):
        fig, axes = plt.subplots(1, len(memories), figsize=(4.6 * len(memories), 6.2))
        for ax, memory in zip(np.atleast_1d(axes), memories, strict=True):
            group = [row for row in rows if row[0] == memory]
            names = list(dict.fromkeys(row[2].name for row in group))
            for name in names:
                points = [(m / 3600, getattr(r, key)) for _, m, s, r, *_ in group if s.name == name]
                color, marker, line = scheme_style(name)
                ax.plot(*zip(*points, strict=True), color=color, marker=marker, linestyle=line,
                        label=name)  # fmt: skip
            ax.set_xscale("log")
            ax.set_xticks(mtbfs, [mtbf_label(h) for h in mtbfs])
            ax.minorticks_off()
            if key == "overhead":
                ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=None))
            ax.set_xlabel("MTBF")
            ax.set_ylabel(ylabel)
            ax.set_title(GROUPS[memory], fontsize=9)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
        fig.tight_layout()
        fig.savefig(outdir / filename, dpi=120)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return run_main("compare_ft.py", lambda: compare(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
