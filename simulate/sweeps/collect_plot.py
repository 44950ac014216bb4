"""Plot a collected metric against one axis without inventing configurations.

Every option that varies across the runs is an axis. Each one must have a place in the
figure: the x axis, one line per value (``hue``), one panel per value (``facet``), or
replicates whose spread is drawn as error bars: the seed, and any axis named in
``average_over``. An axis with no place is refused, since averaging over it would plot a
configuration no run had (a CXL-B sweep over PMEM write bandwidth x link lanes plotted
against bandwidth alone would mix x2, x4 and x16 links into one point).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.sim.outputs import replacing_files
from simulate.run.options import UsageError
from simulate.sweeps.collect import Rows, value_key
from simulate.sweeps.labels import is_number, label, number, scale

REPLICATE_AXES = ("seed",)
FORMATS = ("png", "pdf", "svg")
LOG_SPAN = 20  # numeric x values spanning this ratio or more go on a log axis


@dataclass(frozen=True)
class Axis:
    """An option column as plotted: grouped by ``key`` (the SI number where the option
    has one), shown as ``shown`` (the value as the user wrote it)."""

    key: str
    shown: str

    def value(self, row: dict) -> Any:
        return row.get(self.key)

    def text(self, row: dict) -> str:
        value = row.get(self.shown)
        return number(value) if is_number(value) else str(value)


def resolve(rows: Rows, name: str, flag: str) -> str:
    """The column ``name`` means: exact, or the one column ending with ``.name``."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if name in columns:
        return name
    matches = [c for c in columns if c.endswith(f".{name}") and not c.endswith(".si")]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"collect: {flag} {name}: not a column (columns: {', '.join(columns)})")
    raise UsageError(f"collect: {flag} {name}: matches {', '.join(matches)}; give one in full")


def axis(rows: Rows, column: str) -> Axis:
    base = column.removesuffix(".si")
    return Axis(f"{base}.si" if f"{base}.si" in rows.units else base, base)


def varying_axes(rows: Rows) -> list[Axis]:
    """The option columns whose value differs between runs, in table order."""
    found = []
    for column in rows.options:
        if column.endswith(".si"):
            continue
        ax = axis(rows, column)
        if len({_hashable(ax.value(row)) for row in rows}) > 1:
            found.append(ax)
    return found


def _hashable(value: Any) -> Any:
    return value if not isinstance(value, list | dict) else repr(value)


@dataclass
class Layout:
    metric: str
    x: Axis
    hue: Axis | None
    facet: Axis | None
    replicates: list[Axis]


def layout(
    rows: Rows,
    metric: str,
    x: str,
    hue: str | None = None,
    facet: str | None = None,
    average_over: list[str] = (),
) -> Layout:
    """Place every varying axis, or refuse naming the first one left without a place."""
    metric = resolve(rows, metric, "--plot")
    placed = {
        role: axis(rows, resolve(rows, name, f"--{role}")) if name else None
        for role, name in (("x", x), ("hue", hue), ("facet", facet))
    }
    averaged = [axis(rows, resolve(rows, name, "--average-over")) for name in average_over]
    varying = varying_axes(rows)
    taken = {a.shown for a in [*placed.values(), *averaged] if a is not None}
    free = [a for a in varying if a.shown not in taken and a.shown not in REPLICATE_AXES]
    if placed["hue"] is None and any(a.shown == "system" for a in free):
        placed["hue"] = axis(rows, "system")  # one line per system, as before
        free = [a for a in free if a.shown != "system"]
    if free:
        ax = free[0]
        values = list(dict.fromkeys(ax.text(row) for row in _ordered(rows, ax)))
        short = ax.shown.rsplit(".", 1)[-1] if ax.shown.startswith("set.") else ax.shown
        raise UsageError(
            f"collect: plotting {metric} against {x} would average over {ax.shown} "
            f"({len(values)} values: {', '.join(values)}), a configuration no run had; "
            f"give --hue {short}, --facet {short} or --average-over {short}"
        )
    replicates = [a for a in varying if a.shown in REPLICATE_AXES] + averaged
    return Layout(metric, placed["x"], placed["hue"], placed["facet"], replicates)


def _ordered(rows: list[dict], ax: Axis) -> list[dict]:
    key = value_key([ax.value(row) for row in rows])
    return sorted(rows, key=lambda row: key(ax.value(row)))


def _plotted(row: dict, metric: str) -> float:
    """The metric as a finite number: text, a missing value or an infinity is refused."""
    value = row.get(metric)
    try:
        number_ = float(value) if not isinstance(value, bool | str) else None
    except (TypeError, ValueError):
        number_ = None
    if number_ is None or not math.isfinite(number_):
        raise UsageError(
            f"collect: --plot {metric}: run {row.get('id')} has {value!r}, not a finite number"
        )
    return number_


def figure_format(path: Path, given: str | None) -> str:
    fmt = given or path.suffix.lstrip(".").lower() or "png"
    if fmt not in FORMATS:
        raise UsageError(f"collect: figure format {fmt!r}: one of {', '.join(FORMATS)}")
    return fmt


def plot(rows: Rows, plan: Layout, path: Path, fmt: str = "png") -> Path:
    """Draw the figure and write it to path in fmt."""
    from components.sim.mpl import pyplot

    figure = draw(rows, plan)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing_files(path) as (temp,):
        figure.savefig(temp, dpi=200, format=fmt)
    pyplot().close(figure)
    return path


def draw(rows: Rows, plan: Layout):
    """The metric against x: a line per hue value, a panel per facet value, points the
    mean over the replicates with their min-max as error bars."""
    from components.sim.mpl import pyplot

    plt = pyplot()
    values = {id(row): _plotted(row, plan.metric) for row in rows}
    facets = _groups(rows, plan.facet)
    xs = [plan.x.value(row) for row in rows]
    numeric = all(is_number(v) for v in xs)
    unit = rows.units.get(plan.x.key, "")
    divisor, shown_unit = scale([float(v) for v in xs], unit) if numeric else (1.0, "")
    width = min(4.5 * len(facets), 13)
    figure, axes = plt.subplots(
        1, len(facets), figsize=(width, 4), sharey=True, squeeze=False, layout="constrained"
    )
    for ax, (facet_text, facet_rows) in zip(axes[0], facets, strict=True):
        categories = list(dict.fromkeys(plan.x.text(r) for r in _ordered(rows, plan.x)))
        for hue_text, hue_rows in _groups(facet_rows, plan.hue):
            points = defaultdict(list)
            for row in _ordered(hue_rows, plan.x):
                where = plan.x.value(row) / divisor if numeric else plan.x.text(row)
                points[where].append(values[id(row)])
            where = [p if numeric else categories.index(p) for p in points]
            means = [sum(v) / len(v) for v in points.values()]
            low = [m - min(v) for m, v in zip(means, points.values(), strict=True)]
            high = [max(v) - m for m, v in zip(means, points.values(), strict=True)]
            spread = any(len(v) > 1 for v in points.values())
            ax.errorbar(
                where, means, yerr=[low, high] if spread else None, marker="o", capsize=3,
                label=hue_text,
            )  # fmt: skip
        _x_axis(ax, numeric, sorted({float(v) / divisor for v in xs}) if numeric else categories)
        ax.set_xlabel(label(plan.x.shown if not numeric else plan.x.key, shown_unit))
        if plan.facet is not None:
            ax.set_title(f"{label(plan.facet.shown)}: {facet_text}", fontsize=10)
        ax.set_ylim(bottom=0) if all(v >= 0 for v in values.values()) else None
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(label(plan.metric))
    if plan.hue is not None:
        axes[0][-1].legend(title=label(plan.hue.shown), fontsize=8)
    note = _replicate_note(rows, plan)
    if note:
        figure.suptitle(note, fontsize=8, color="0.3")
    return figure


def _groups(rows: list[dict], ax: Axis | None) -> list[tuple[str, list[dict]]]:
    if ax is None:
        return [("", list(rows))]
    groups: dict[str, list[dict]] = {}
    for row in _ordered(rows, ax):
        groups.setdefault(ax.text(row), []).append(row)
    return list(groups.items())


def _x_axis(ax, numeric: bool, positions: list) -> None:
    if not numeric:
        ax.set_xticks(range(len(positions)), positions)
        return
    if positions[0] > 0 and positions[-1] / positions[0] >= LOG_SPAN:
        ax.set_xscale("log")
    if len(positions) <= 12:
        ax.set_xticks(positions, [number(p) for p in positions])
        ax.minorticks_off()


def _replicate_note(rows: Rows, plan: Layout) -> str:
    """What each point stands for, when it stands for more than one run."""
    if not plan.replicates:
        return ""
    parts = []
    for ax in plan.replicates:
        values = list(dict.fromkeys(ax.text(row) for row in _ordered(rows, ax)))
        parts.append(f"{label(ax.shown).lower()} {', '.join(values)}")
    return f"points: mean over {'; '.join(parts)}; bars: min to max"
