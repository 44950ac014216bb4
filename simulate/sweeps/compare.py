"""Side by side: what differs between runs, in their options, results and every stat.

The first run is the reference. Results and breakdowns are listed whole (they are what a
reader asks about); options, board parameters and stats only where some run differs,
so an unchanged stat never hides a changed one. The host's own stats (wall time, memory)
differ between any two runs of the same simulation and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.sim.outputs import HOST_DEPENDENT
from simulate.run.options import UsageError
from simulate.sweeps import store
from simulate.sweeps.collect import CONFIG, board_params, flatten, read_json, run_row
from simulate.sweeps.labels import is_number, number

STATS = "stats.json"
RESULT_PREFIXES = ("batch_time_ms.", "energy_j.total", "energy_j.per_batch", "idle_ms")
BREAKDOWN_PREFIX = "breakdown_ms."


@dataclass
class Section:
    title: str
    rows: list[tuple[str, list[Any]]]  # name, one value per run


def _runs(paths: list[Path]) -> list[Path]:
    if len(paths) < 2:
        raise UsageError("compare: give at least two run outdirs")
    for path in paths:
        for name in (store.RESULTS, STATS, CONFIG):
            if not (path / name).is_file():
                raise UsageError(f"{path}: not a run outdir (no {name})")
    return paths


def labels_of(paths: list[Path]) -> list[str]:
    """Each run's shortest distinct name: its folder, or more of its path."""
    for depth in range(1, max(len(p.parts) for p in paths) + 1):
        names = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def _differing(values: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    names = list(dict.fromkeys(name for run in values for name in run))
    return [
        (name, [run.get(name) for run in values])
        for name in names
        if len({repr(run.get(name)) for run in values}) > 1
    ]


def compare(paths: list[Path]) -> list[Section]:
    """The sections of the comparison, each a list of (name, values per run)."""
    paths = _runs(paths)
    rows = [run_row(path, {}) for path in paths]
    results = [{k: v for k, v in row.items() if k.startswith(RESULT_PREFIXES)} for row in rows]
    breakdowns = [{k: v for k, v in row.items() if k.startswith(BREAKDOWN_PREFIX)} for row in rows]
    options = []
    for path in paths:
        flat: dict[str, Any] = {}
        flatten("", read_json(path / CONFIG).get("options", {}), flat)
        options.append({k: v for k, v in flat.items() if k not in ("outdir", "progress", "plot")})
    params = [
        {_with_unit(name, param): param.get("value") for name, param in board_params(path).items()}
        for path in paths
    ]
    return [
        Section("options", _differing(options)),
        Section("parameters", _differing(params)),
        Section("results", _all(results)),
        Section("breakdown (ms, mean steady batch)", _all(breakdowns)),
        Section("stats", stat_differences(paths)),
    ]


def _with_unit(name: str, param: dict) -> str:
    unit = param.get("unit")
    return f"{name} ({unit})" if unit else name


def _all(values: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    names = list(dict.fromkeys(name for run in values for name in run))
    return [(name, [run.get(name) for run in values]) for name in names]


def stat_differences(paths: list[Path]) -> list[tuple[str, list[Any]]]:
    """Every simulated stat whose value is not the same in all runs (missing counts)."""
    values = []
    for path in paths:
        stats = read_json(path / STATS)
        values.append(
            {
                name: entry.get("value") if isinstance(entry, dict) else entry
                for name, entry in stats.items()
                if name not in HOST_DEPENDENT
            }
        )
    return _differing(values)


def format_table(sections: list[Section], labels: list[str]) -> str:
    """Plain text: one block per section; with two runs, the change relative to the first."""
    header = ["", *labels] + (["change"] if len(labels) == 2 else [])
    lines = []
    for section in sections:
        if not section.rows:
            lines.append(f"{section.title}: no differences")
            continue
        table = [header] + [
            [name, *(_cell(v) for v in values)] + ([_change(*values)] if len(values) == 2 else [])
            for name, values in section.rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines.append(f"{section.title}:")
        for row in table:
            cells = [row[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  " + "  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return number(value) if is_number(value) else str(value)


def _change(first: Any, second: Any) -> str:
    if not (is_number(first) and is_number(second)):
        return ""
    if first == 0:
        return "" if second == 0 else "new"
    return f"{(second - first) / abs(first) * 100:+.1f}%"


def write_csv(sections: list[Section], labels: list[str], path: Path) -> Path:
    """section, name and one column per run."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["section", "name", *labels])
        for section in sections:
            for name, values in section.rows:
                writer.writerow([section.title, name, *values])
    return path
