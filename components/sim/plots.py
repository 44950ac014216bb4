"""Figures of a run's outputs: the per-unit and per-resource timeline, breakdown bars.

Works from timeline.csv rows and results.json dictionaries, so the same functions
plot one run (``--plot``) and a whole reproduction (scripts/reproduce_paper.py). Bars
stay on linear axes (a stacked segment's height is its share); a bar that would flatten
the others (SSD's, 70x PMEM's) is cut at the axis' top and its value written on it.
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
    "allreduce": "#da8bc3",
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
CLIP_SPAN = 5  # tallest / next bar beyond which the tallest is cut at the axis' top


def read_timeline(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _device(lane: str) -> str:
    """The device a lane belongs to: its first path part (``cxl_mem1`` of
    ``cxl_mem1.pmem.ctrl0``), the board prefix dropped."""
    return lane.removeprefix("board.").split(".", 1)[0]


def _grouped(lanes: set[str]) -> list[str]:
    return sorted(lanes, key=lambda lane: (_device(lane), lane))


def _group_bands(ax, lanes: list[str]) -> None:
    """Lanes of one device together: alternate devices shaded, a line between them."""
    start = 0
    for index in range(1, len(lanes) + 1):
        if index == len(lanes) or _device(lanes[index]) != _device(lanes[start]):
            if len({_device(lane) for lane in lanes[:start]}) % 2:
                ax.axhspan(start - 0.5, index - 0.5, color="0.94", zorder=0)
            if index < len(lanes):
                ax.axhline(index - 0.5, color="0.6", linewidth=0.5)
            start = index


def _bar(ax, y, start, end, height, r) -> None:
    ax.barh(
        y,
        max(end - start, 1e-4),
        left=start,
        height=height,
        color=CATEGORY_COLORS.get(r["category"], "#999999"),
        hatch="//" if r["background"] == "1" else None,
        edgecolor="black",
        linewidth=0.3,
    )


def batch_ends(rows: Sequence[Mapping[str, str]], batches: Sequence[int]) -> dict[int, float]:
    """Each batch's end (ms): its last critical-path (foreground) op's end."""
    ends: dict[int, float] = {}
    for r in rows:
        batch = int(r["batch"])
        if batch in batches and r["background"] != "1":
            ends[batch] = max(ends.get(batch, 0.0), float(r["end_ms"]))
    return ends


def _origin(rows: Sequence[Mapping[str, str]], batches: Sequence[int]) -> float:
    """Where the batches' window starts: the previous batch's end (a batch's time is
    from it to its own end), or the first op's start for batch 0. Ops of a batch issued
    earlier (a lookup prefetched beside the previous update) start left of it."""
    first = min(batches)
    previous = batch_ends(rows, [first - 1]).get(first - 1)
    if previous is not None:
        return previous
    return min(float(r["start_ms"]) for r in rows if int(r["batch"]) in batches)


def _mark_batch_ends(ax, rows, batches, origin: float) -> None:
    for end in batch_ends(rows, [min(batches) - 1, *batches]).values():
        ax.axvline(end - origin, color="black", linestyle="--", linewidth=0.8)


def draw_timeline(
    ax, rows: Sequence[Mapping[str, str]], batches: Sequence[int], title: str
) -> None:
    """One lane per unit (grouped by device), one bar per op, coloured by category,
    hatched if in the background; time from the first batch's start."""
    chosen = [r for r in rows if int(r["batch"]) in batches and r["unit"] != "-"]
    if not chosen:
        return
    origin = _origin(rows, batches)
    lanes = _grouped({r["unit"] for r in chosen})
    _group_bands(ax, lanes)
    for lane, unit in enumerate(lanes):
        for r in (r for r in chosen if r["unit"] == unit):
            _bar(ax, lane, float(r["start_ms"]) - origin, float(r["end_ms"]) - origin, 0.6, r)
    _mark_batch_ends(ax, rows, batches, origin)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=7)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlabel("time from the batch's start, the previous batch's end (ms)")
    ax.set_title(title, fontsize=9)


def draw_resource_timeline(ax, rows: Sequence[Mapping[str, str]], batches: Sequence[int]) -> None:
    """One lane per shared resource (a device's controllers together, each link
    direction, the GPU's SMs...), grouped by device: every op that used it draws a bar,
    and ops that overlapped in time are stacked inside the lane, so sharing is visible."""
    chosen = [r for r in rows if int(r["batch"]) in batches and r.get("uses")]
    if not chosen:
        return
    origin = _origin(rows, batches)
    lanes = _grouped({lane for r in chosen for lane in r["uses"].split(";")})
    _group_bands(ax, lanes)
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
            _bar(ax, index - 0.4 + (level + 0.5) * height, start, end, height * 0.9, r)
    _mark_batch_ends(ax, rows, batches, origin)
    ax.set_yticks(range(len(lanes)), [lane.removeprefix("board.") for lane in lanes], fontsize=7)
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlabel("time from the first batch's start (ms)")
    ax.set_title("shared resources: ops using each one (stacked where they overlap)", fontsize=9)


def legend_handles(categories: Sequence[str] | None = None):
    """A patch per category drawn (all by default), and what the hatching means."""
    shown = [c for c in CATEGORY_COLORS if categories is None or c in categories]
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=CATEGORY_COLORS[name], label=CATEGORY_LABELS[name])
        for name in shown
    ]
    handles.append(
        plt.Rectangle(
            (0, 0), 1, 1, facecolor="white", edgecolor="black", hatch="//",
            label="background (off the critical path)",
        )
    )  # fmt: skip
    return handles


def timeline_legend(fig, rows: Sequence[Mapping[str, str]]) -> None:
    """Every category drawn, the hatching and the batch-end line, right of the axes."""
    drawn = {r["category"] for r in rows}
    handles = legend_handles(drawn)
    handles.append(plt.Line2D([], [], color="black", linestyle="--", label="batch ends"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=7)


def plot_timeline(
    rows: Sequence[Mapping[str, str]],
    batches: Sequence[int],
    title: str,
    out: Path,
    fmt: str = "png",
) -> None:
    """Units (who ran what) above, shared resources (who shared what) below, on one
    time axis; lanes grouped by device, each panel as tall as its lanes need."""
    chosen = [r for r in rows if int(r["batch"]) in batches]
    units = len({r["unit"] for r in chosen if r["unit"] != "-"})
    shared = len({lane for r in chosen for lane in r.get("uses", "").split(";") if lane})
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(11, 1.6 + 0.24 * (units + shared)), sharex=True,
        height_ratios=[max(units, 1), max(shared, 1)], layout="constrained",
    )  # fmt: skip
    draw_timeline(top, rows, batches, title)
    top.set_xlabel("")
    draw_resource_timeline(bottom, rows, batches)
    timeline_legend(fig, chosen)
    fig.savefig(out, dpi=200, format=fmt)
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


def clip_limit(totals: Sequence[float]) -> float | None:
    """The top of a linear axis that keeps the bars readable: None (all of them shown
    whole) unless the tallest is over CLIP_SPAN times the next, which then sets it."""
    ranked = sorted(totals, reverse=True)
    if len(ranked) < 2 or ranked[1] <= 0 or ranked[0] <= CLIP_SPAN * ranked[1]:
        return None
    return ranked[1] * 1.3


def plot_by_model(
    values: Mapping[tuple[str, str], Mapping[str, float] | float],
    systems: Sequence[str],
    models: Sequence[str],
    ylabel: str,
    title: str,
    out: Path,
    fmt: str = "png",
    unit: str = "",
) -> None:
    """One panel per model, one bar per system, on linear axes: a bar stacked from a
    mapping's categories (a breakdown) or a single value. A bar that would flatten the
    others (clip_limit) is cut at the panel's top, marked, and labelled with its value."""
    fig, axes = plt.subplots(
        1, len(models), figsize=(2.2 + 2.3 * len(models), 3.6), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    stacked = any(isinstance(v, Mapping) for v in values.values())
    for ax, model in zip(axes[0], models, strict=True):
        totals = []
        bottom = [0.0] * len(systems)
        parts = BREAKDOWN if stacked else ("value",)
        for part in parts:
            heights = [_part(values[s, model], part) for s in systems]
            colour = CATEGORY_COLORS[part] if stacked else "#4c72b0"
            label = CATEGORY_LABELS[part] if stacked else None
            ax.bar(range(len(systems)), heights, bottom=bottom, color=colour, label=label)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        totals = bottom
        top = clip_limit(totals)
        if top is not None:
            ax.set_ylim(0, top)
            for i, total in enumerate(totals):
                if total > top:
                    ax.annotate(
                        f"{total:,.0f}{unit} \u2191", (i, top), ha="center", va="top",
                        fontsize=7, color="white", fontweight="bold", rotation=90,
                        xytext=(0, -3), textcoords="offset points",
                    )  # fmt: skip
        ax.set_xticks(range(len(systems)), [s.upper() for s in systems], rotation=60, fontsize=7)
        ax.set_title(model.upper(), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    if stacked:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.savefig(out, dpi=200, format=fmt)
    plt.close(fig)


def _part(value: Mapping[str, float] | float, part: str) -> float:
    return value.get(part, 0.0) if isinstance(value, Mapping) else float(value)
