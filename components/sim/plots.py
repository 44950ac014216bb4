"""PNG plots of a run's outputs: the per-resource timeline and breakdown bars.

Works from timeline.csv rows and results.json dictionaries, so the same functions
plot one run (``--plot``) and a whole reproduction (scripts/reproduce_paper.py).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from components.sim.mpl import pyplot

plt = pyplot()

CATEGORY_COLORS = {
    "embedding": "#4c72b0",
    "transfer": "#dd8452",
    "bottom_mlp": "#55a868",
    "top_mlp": "#8172b3",
    "checkpoint": "#c44e52",
    "contention": "#937860",
    "idle": "#bbbbbb",
}
BREAKDOWN = ("embedding", "transfer", "bottom_mlp", "top_mlp", "checkpoint", "contention")
CATEGORY_LABELS = {
    "embedding": "embedding",
    "transfer": "transfer",
    "bottom_mlp": "bottom MLP",
    "top_mlp": "top MLP",
    "checkpoint": "checkpoint",
    "contention": "contention",
    "idle": "idle",
    "allreduce": "all-reduce",
}
SHARE_PANEL_SPAN = 20  # tallest / shortest bar beyond which shares get a panel


def read_timeline(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def draw_timeline(
    ax, rows: Sequence[Mapping[str, str]], batches: Sequence[int], title: str
) -> None:
    """One lane per resource, one bar per op, coloured by category, hatched if background."""
    chosen = [r for r in rows if int(r["batch"]) in batches and r["resource"] != "-"]
    if not chosen:
        return
    origin = min(float(r["start_ms"]) for r in chosen)
    lanes = sorted({r["resource"] for r in chosen})
    for lane, resource in enumerate(lanes):
        for r in (r for r in chosen if r["resource"] == resource):
            start, end = float(r["start_ms"]) - origin, float(r["end_ms"]) - origin
            ax.barh(
                lane,
                max(end - start, 1e-4),
                left=start,
                height=0.6,
                color=CATEGORY_COLORS.get(r["category"], "#999999"),
                hatch="//" if r["background"] == "1" else None,
                edgecolor="black",
                linewidth=0.3,
            )
    ax.set_yticks(range(len(lanes)), lanes, fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title(title, fontsize=9)


def legend_handles():
    return [
        plt.Rectangle((0, 0), 1, 1, color=color, label=name)
        for name, color in CATEGORY_COLORS.items()
        if name != "idle"
    ]


def draw_resource_timeline(ax, rows: Sequence[Mapping[str, str]], batches: Sequence[int]) -> None:
    """One lane per shared resource (a device's controllers together, each link
    direction, the GPU's SMs...): every op that used it draws a bar, and ops that
    overlapped in time are stacked inside the lane, so sharing is visible."""
    chosen = [r for r in rows if int(r["batch"]) in batches and r.get("uses")]
    if not chosen:
        return
    origin = min(float(r["start_ms"]) for r in rows if int(r["batch"]) in batches)
    lanes = sorted({lane for r in chosen for lane in r["uses"].split(";")})
    for index, lane in enumerate(lanes):
        users = sorted(
            (r for r in chosen if lane in r["uses"].split(";")), key=lambda r: r["start_ms"]
        )
        ends: list[float] = []  # per stack level, when its last bar ends
        placed = []
        for r in users:
            start, end = float(r["start_ms"]) - origin, float(r["end_ms"]) - origin
            level = next((i for i, e in enumerate(ends) if e <= start), len(ends))
            ends[level : level + 1] = [end]
            placed.append((level, start, end, r))
        height = 0.8 / max(len(ends), 1)
        for level, start, end, r in placed:
            ax.barh(
                index - 0.4 + (level + 0.5) * height,
                max(end - start, 1e-4),
                left=start,
                height=height * 0.9,
                color=CATEGORY_COLORS.get(r["category"], "#999999"),
                hatch="//" if r["background"] == "1" else None,
                edgecolor="black",
                linewidth=0.3,
            )
    ax.set_yticks(range(len(lanes)), [lane.removeprefix("board.") for lane in lanes], fontsize=7)
    ax.set_xlabel("time (ms)")
    ax.set_title("shared resources: ops using each one (stacked where they overlap)", fontsize=9)


def plot_timeline(
    rows: Sequence[Mapping[str, str]], batches: Sequence[int], title: str, out: Path
) -> None:
    """Units (who ran what) above, shared resources (who shared what) below."""
    lanes = len({lane for r in rows for lane in r.get("uses", "").split(";") if lane})
    fig, (units, shared) = plt.subplots(
        2, 1, figsize=(10, 3 + 0.35 * lanes), sharex=True, height_ratios=[1, max(lanes, 1) / 4]
    )
    draw_timeline(units, rows, batches, title)
    units.set_xlabel("")
    draw_resource_timeline(shared, rows, batches)
    fig.legend(handles=legend_handles(), loc="upper right", fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.88, 1))  # the legend in a margin of its own
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_breakdown(
    results: Sequence[Mapping],
    labels: Sequence[str],
    title: str,
    out: Path,
    normalise_to: float | None = None,
    fmt: str = "png",
) -> None:
    """Stacked bars of the critical-path breakdown (the paper's Figure 11 style), on a
    linear axis, where a segment's height is its share. Where the bars span more than
    SHARE_PANEL_SPAN, a second panel gives each bar's shares, so the short bars' parts
    stay readable beside the tall ones."""
    totals = [sum(r["breakdown_ms"].get(key, 0.0) for key in BREAKDOWN) for r in results]
    shares = max(totals) > SHARE_PANEL_SPAN * max(min(totals), 1e-9)
    width = max(4, 0.5 * len(labels) + 2)
    fig, axes = plt.subplots(
        1, 2 if shares else 1, figsize=(width * (2 if shares else 1), 3.8), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    panels = [(axes[0][0], normalise_to or 1.0, False)]
    if shares:
        panels.append((axes[0][1], None, True))
    for ax, divisor, as_share in panels:
        bottom = [0.0] * len(results)
        for key in BREAKDOWN:
            values = [
                r["breakdown_ms"].get(key, 0.0)
                / (t if as_share else divisor)
                * (100 if as_share else 1)
                for r, t in zip(results, totals, strict=True)
            ]
            ax.bar(range(len(results)), values, bottom=bottom, color=CATEGORY_COLORS[key],
                   label=CATEGORY_LABELS[key])  # fmt: skip
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xticks(range(len(labels)), labels, rotation=60, fontsize=7, ha="right")
        ax.grid(axis="y", alpha=0.3)
        if not as_share:  # each bar's total, readable however short the bar
            for i, total in enumerate(bottom):
                ax.annotate(f"{total:.3g}", (i, total), ha="center", va="bottom", fontsize=7)
    axes[0][0].set_ylabel(
        "batch time, normalised" if normalise_to else "batch time per steady batch (ms)"
    )
    axes[0][0].set_title(title, fontsize=9)
    if shares:
        axes[0][1].set_ylabel("share of the batch (%)")
        axes[0][1].set_title("the same, as shares of each bar", fontsize=9)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(out, dpi=200, format=fmt)
    plt.close(fig)


def plot_bars(values: Mapping[str, float], title: str, ylabel: str, out: Path) -> None:
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(values) + 2), 3.5))
    ax.bar(range(len(values)), list(values.values()), color="#4c72b0")
    ax.set_xticks(range(len(values)), list(values), rotation=60, fontsize=7, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
