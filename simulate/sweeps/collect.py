"""Gather finished runs into one table (CSV + Parquet) and plot a metric against an axis.

Only complete runs (DONE marker) are read, so collecting while a sweep is still
running, or after it was killed, never picks up a half-written result.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from components.sim.outputs import replacing_files
from simulate.run.options import UsageError
from simulate.sweeps import store

FLATTENED = ("batch_time_ms", "breakdown_ms")


def _flat_options(options: dict[str, Any]) -> dict[str, Any]:
    row = {key: value for key, value in options.items() if key not in ("sets", "fail_at")}
    row["fail_at"] = ";".join(options.get("fail_at", []))
    for path, value in options.get("sets", {}).items():
        row[f"set.{path}"] = value
    return row


def _flat_results(results: dict[str, Any], taken: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in results.items():
        if key in FLATTENED and isinstance(value, dict):
            row.update({f"{key}.{name}": item for name, item in value.items()})
        elif key == "energy_j" and isinstance(value, dict):
            row["energy_j.total"] = value.get("total")
        elif key in taken:
            continue
        elif value is None or isinstance(value, str | int | float | bool):
            row[key] = value
        else:
            row[key] = json.dumps(value, sort_keys=True)
    return row


def _no_constant(name: str):
    raise ValueError(f"{name} is not standard JSON")


def _read_json(path: Path) -> dict[str, Any]:
    """A complete run's JSON object; one damaged since (cut, not UTF-8, NaN, not an
    object) is refused naming the file, as the simulator writes none of those."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _run_options(path: Path) -> dict[str, Any]:
    """options.json's ``options``: a mapping, its ``sets`` a mapping, ``fail_at`` a list."""
    options = _read_json(path).get("options")
    shapes = {"sets": dict, "fail_at": list}
    if not isinstance(options, dict) or any(
        not isinstance(options.get(key, kind()), kind) for key, kind in shapes.items()
    ):
        raise UsageError(f"{path}: not a run's options (expected options with sets, fail_at)")
    return options


def gather(outroot: Path, ids: list[str] | None = None, stats: list[str] = ()) -> list[dict]:
    """One row per complete run (of ids, in order, or every run under outroot)."""
    if ids is None:
        ids = sorted(p.name for p in outroot.iterdir() if store.is_complete(outroot, p.name))
    rows, found = [], set()
    for identity in tqdm(ids, desc="collect", unit="run", file=sys.stderr, disable=None):
        if not store.is_complete(outroot, identity):
            continue
        rundir = outroot / identity
        row = {"id": identity} | _flat_options(_run_options(rundir / store.OPTIONS))
        row |= _flat_results(_read_json(rundir / store.RESULTS), row)
        if stats:
            values = _read_json(rundir / "stats.json")
            for name in stats:
                entry = values.get(name)
                found.update([name] if entry is not None else [])
                row[f"stat.{name}"] = entry.get("value") if isinstance(entry, dict) else entry
        rows.append(row)
    missing = [name for name in stats if name not in found]
    if rows and missing:
        raise UsageError(f"collect: --stat {missing[0]}: not in any run's stats.json")
    return rows


def write_table(rows: list[dict], prefix: Path) -> tuple[Path, Path]:
    """prefix.csv and prefix.parquet with the union of all rows' columns."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    columns = list(dict.fromkeys(key for row in rows for key in row))
    table = pa.table({name: [row.get(name) for row in rows] for name in columns})
    csv_path, parquet_path = prefix.with_suffix(".csv"), prefix.with_suffix(".parquet")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with replacing_files(csv_path, parquet_path) as (csv_tmp, parquet_tmp):
        pacsv.write_csv(table, csv_tmp)
        pq.write_table(table, parquet_tmp)
    return csv_path, parquet_path


def _order_key(values: list[Any]):
    """Sort x values numerically, through gem5 units when they carry one ("300ns")."""
    from components.sim import units

    parsers = (
        float,
        units.parse_time,
        units.parse_bandwidth,
        units.parse_size,
        units.parse_power,
        units.parse_energy,
        units.parse_frequency,
        units.parse_flops,
    )
    for parse in parsers:
        try:
            keys = {value: parse(value) for value in values}
        except (TypeError, ValueError):
            continue
        return keys.__getitem__
    return str


def _plotted(row: dict, metric: str) -> float:
    """The metric as a finite number: text, a missing value or an infinity is refused."""
    value = row.get(metric)
    try:
        number = float(value) if not isinstance(value, bool | str) else None
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number):
        raise UsageError(
            f"collect: --plot {metric}: run {row.get('id')} has {value!r}, not a finite number"
        )
    return number


def plot(rows: list[dict], metric: str, axis: str, path: Path) -> Path:
    """One line per system: metric (averaged over the other axes, e.g. seeds) vs axis."""
    from components.sim.mpl import pyplot

    plt = pyplot()

    for name in (metric, axis):
        if rows and name not in rows[0]:
            known = ", ".join(rows[0])
            raise UsageError(f"collect: {name!r} is not a column (columns: {known})")
    sums: dict[str, dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        sums[row.get("system", "all")][row[axis]].append(_plotted(row, metric))
    xs = sorted({row[axis] for row in rows}, key=_order_key([row[axis] for row in rows]))
    positions = {x: i for i, x in enumerate(xs)}
    figure, ax = plt.subplots(figsize=(6, 4))
    for system, points in sorted(sums.items()):
        ordered = sorted(points, key=positions.__getitem__)
        ax.plot(
            [positions[x] for x in ordered],
            [sum(points[x]) / len(points[x]) for x in ordered],
            marker="o",
            label=system,
        )
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_xlabel(axis)
    ax.set_ylabel(metric)
    ax.legend(title="system")
    ax.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing_files(path) as (temp,):
        figure.savefig(temp, dpi=120, format="png")
    plt.close(figure)
    return path
