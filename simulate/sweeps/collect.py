"""Gather finished runs into one table (CSV + Parquet): a sweep's, or any run outdirs.

Only complete runs are read (a sweep run's DONE marker; a plain outdir's results.json
and config.json), so collecting while a sweep is still running, or after it was killed,
never picks up a half-written result. Every run becomes one row: its options (the
``--set`` values as given and, beside them, ``.si`` numbers in SI base units), its
results flattened to one number per column, and the code that made it
(``provenance.*``). Plotting lives in collect_plot.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from components.sim.input_files import InputFileError, read_bytes
from components.sim.outputs import replacing_files
from components.sim.units import TICKS_PER_SECOND
from simulate.run.options import UsageError
from simulate.sweeps import store
from simulate.sweeps.runid import NAMED_DEFAULTS, canonical_dict

CONFIG = "config.json"
# a parameter's canonical unit (config.json) -> (SI base unit, factor to it)
SI = {"tick": ("s", 1 / TICKS_PER_SECOND)}


class Rows(list):
    """The table's rows, with ``units`` (column -> SI unit of its numbers) and
    ``options`` (the columns that describe a run rather than its results)."""

    def __init__(self, rows=(), units=None, options=None) -> None:
        super().__init__(rows)
        self.units: dict[str, str] = dict(units or {})
        self.options: list[str] = list(options or [])


def flatten(prefix: str, value: Any, into: dict[str, Any]) -> None:
    """Nested dicts become dotted columns; lists stay one JSON text column."""
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(f"{prefix}.{key}" if prefix else str(key), item, into)
    elif value is None or isinstance(value, str | int | float | bool):
        into[prefix] = value
    else:
        into[prefix] = json.dumps(value, sort_keys=True)


def _flat_options(options: dict[str, Any]) -> dict[str, Any]:
    row = {key: value for key, value in options.items() if key not in ("sets", "fail_at")}
    for name, default in NAMED_DEFAULTS.items():
        row.setdefault(name, default)
    row["fail_at"] = ";".join(options.get("fail_at", []))
    for key in ("model_spec", "topology"):
        if isinstance(row.get(key), dict | list):
            row[key] = json.dumps(row[key], sort_keys=True)
    for path, value in options.get("sets", {}).items():
        row[f"set.{path}"] = value
    return row


def _flat_results(results: dict[str, Any], taken: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in results.items():
        if key not in taken:
            flatten(key, value, row)
    return row


def _no_constant(name: str):
    raise ValueError(f"{name} is not standard JSON")


MAX_OUTPUT_BYTES = 256 << 20
"""A run's JSON output read back: the largest, a long multi-device run's stats.json, is
a few MiB; a file swapped for a device or a huge one is refused before it fills memory."""


def read_json(path: Path) -> dict[str, Any]:
    """A complete run's JSON object; one damaged since (cut, not UTF-8, NaN, not an
    object, not a regular file) is refused naming the file, as the simulator writes
    none of those."""
    try:
        data = json.loads(read_bytes(path, MAX_OUTPUT_BYTES).decode("utf-8"),
                          parse_constant=_no_constant)  # fmt: skip
    except InputFileError as exc:
        raise UsageError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _run_options(rundir: Path) -> dict[str, Any]:
    """A run's canonical options: a sweep's options.json, else config.json's (a run made
    by the CLI, the API or a script), canonicalized the same way."""
    if (rundir / store.OPTIONS).is_file():
        path, options = rundir / store.OPTIONS, read_json(rundir / store.OPTIONS).get("options")
    else:
        path, options = rundir / CONFIG, read_json(rundir / CONFIG).get("options")
        if isinstance(options, dict) and isinstance(options.get("sets"), list):
            options = canonical_dict(options)
            options.pop("rows_per_table", None)
            options.pop("sample", None)
    shapes = {"sets": dict, "fail_at": list}
    if not isinstance(options, dict) or any(
        not isinstance(options.get(key, kind()), kind) for key, kind in shapes.items()
    ):
        raise UsageError(f"{path}: not a run's options (expected options with sets, fail_at)")
    return options


def board_params(rundir: Path) -> dict[str, dict]:
    """config.json's parameters by path (value in canonical units, unit), or {}."""
    path = rundir / CONFIG
    if not path.is_file():
        return {}
    found: dict[str, dict] = {}

    def walk(node: dict, prefix: str) -> None:
        for key, param in node.get("params", {}).items():
            found[f"{prefix}.{key}"] = param
        for key, child in node.items():
            if isinstance(child, dict) and "params" in child:
                walk(child, f"{prefix}.{key}")

    board = read_json(path).get("board")
    if isinstance(board, dict):
        walk(board, "board")
    return found


def _si_columns(row: dict[str, Any], params: dict[str, dict], units: dict[str, str]) -> None:
    """Beside each ``set.PATH`` string, ``set.PATH.si``: the value the run used, in SI
    base units (seconds for times, B/s, B, W, J, Hz, FLOP/s)."""
    for column in [key for key in row if key.startswith("set.")]:
        param = params.get(column[len("set.") :])
        if param is None or isinstance(param.get("value"), bool | str):
            continue
        unit, factor = SI.get(param.get("unit", ""), (param.get("unit", ""), 1))
        row[f"{column}.si"] = param["value"] * factor
        units[f"{column}.si"] = unit


def run_dirs(paths: list[Path]) -> list[Path]:
    """Every complete run among paths: a path holding results.json is one run; any other
    directory is searched one level down (a sweep's outroot, a folder of outdirs)."""
    found = []
    for path in paths:
        if not path.is_dir():
            raise UsageError(f"{path}: no such directory")
        if (path / store.RESULTS).is_file():  # one run: a plain outdir or a sweep's run
            done = (path / store.DONE).exists()
            if not done or store.is_complete(path.parent, path.name):
                found.append(path)
            continue
        for child in sorted(path.iterdir()):
            if child.name.startswith(".") or not child.is_dir():
                continue
            sweep_run = (child / store.DONE).exists() and store.is_complete(path, child.name)
            plain = not (child / store.DONE).exists() and (child / CONFIG).is_file()
            if sweep_run or (plain and (child / store.RESULTS).is_file()):
                found.append(child)
    return found


def run_row(rundir: Path, units: dict[str, str], stats: list[str] = ()) -> dict[str, Any]:
    """One run's row: its options, results and provenance, plus the stats asked for."""
    options = _flat_options(_run_options(rundir))
    row = {"id": rundir.name} | options
    _si_columns(row, board_params(rundir), units)
    results = read_json(rundir / store.RESULTS)
    _check_results(rundir / store.RESULTS, results)
    row |= _flat_results(results, row)
    if "provenance.code" not in row and (rundir / store.OPTIONS).is_file():
        recorded = read_json(rundir / store.OPTIONS).get("provenance")
        flatten("provenance", recorded if isinstance(recorded, dict) else {}, row)
    if stats:
        values = read_json(rundir / "stats.json")
        for name in stats:
            entry = values.get(name)
            row[f"stat.{name}"] = entry.get("value") if isinstance(entry, dict) else entry
    return row


RESULT_FIELDS = {"system": str, "seed": int, "batch_time_ms": dict}
"""What collection reads of every results.json, and its type."""


def _check_results(path: Path, results: dict[str, Any]) -> None:
    """A results.json that a run did not write (a field of another type than runs write)
    is refused naming the file and the field, not tabled beside the others."""
    for name, kind in RESULT_FIELDS.items():
        value = results.get(name, kind())
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(f"{path}: {name} is {value!r}, not a {kind.__name__}")
    mean = results.get("batch_time_ms", {}).get("mean", 0.0)
    if not isinstance(mean, int | float) or isinstance(mean, bool):
        raise UsageError(f"{path}: batch_time_ms.mean is {mean!r}, not a number")


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, int | float) else type(value).__name__


def _check_column_kinds(rows: list[dict[str, Any]]) -> None:
    """Every column holds one kind of value across the runs (numbers, strings, flags):
    a column mixing them comes from a damaged or foreign run and would be tabled (and
    written to Parquet) as something no run recorded."""
    seen: dict[str, tuple[str, str]] = {}
    for row in rows:
        for key, value in row.items():
            if value is None:
                continue
            kind = _kind_of(value)
            first = seen.setdefault(key, (kind, row["id"]))
            if first[0] != kind:
                raise UsageError(
                    f"{key} is a {kind} in run {row['id']} ({value!r}) but a "
                    f"{first[0]} in run {first[1]}"
                )


def gather(outroot: Path | list[Path], ids: list[str] | None = None, stats: list[str] = ()) -> Rows:
    """One row per complete run: of ``ids`` under one outroot, in that order (a sweep's
    grid order), or of every run found under the paths, in the grid order of their
    options (each option sorted by its value)."""
    if ids is not None:
        root = Path(outroot)  # type: ignore[arg-type]
        dirs = [root / identity for identity in ids if store.is_complete(root, identity)]
    else:
        dirs = run_dirs([outroot] if isinstance(outroot, Path) else list(outroot))
    units: dict[str, str] = {}
    rows = []
    for rundir in tqdm(dirs, desc="collect", unit="run", file=sys.stderr, disable=None):
        rows.append(run_row(rundir, units, stats))
    _check_column_kinds(rows)
    missing = [name for name in stats if all(row.get(f"stat.{name}") is None for row in rows)]
    if rows and missing:
        raise UsageError(f"collect: --stat {missing[0]}: not in any run's stats.json")
    options = list(
        dict.fromkeys(
            key
            for row in rows
            for key in row
            if key in _OPTION_NAMES or key.startswith("set.") or key == "provenance.code"
        )
    )
    table = Rows(rows, units, options)
    if ids is None:
        table.sort(key=grid_key(table))
    return table


def _option_names() -> set[str]:
    from dataclasses import fields

    from simulate.run.options import RunOptions

    return {field.name for field in fields(RunOptions)} | {"board_class", "model_spec"}


_OPTION_NAMES = _option_names()


def value_key(values: list[Any]):
    """A sort key over one column's values: numeric where they all are, else text."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    return (lambda v: (0, v)) if numbers else (lambda v: (1, str(v)))


def grid_key(rows: Rows):
    """Rows in the order a grid lists them: by each option column in turn."""
    columns = [c for c in rows.options if not c.startswith("set.") or c.endswith(".si")]
    columns += [c for c in rows.options if c.startswith("set.") and f"{c}.si" not in rows.units]
    keys = {column: value_key([row.get(column) for row in rows]) for column in columns}

    def key(row: dict) -> tuple:
        return tuple((0,) if row.get(c) is None else (1, *keys[c](row.get(c))) for c in columns)

    return key


def write_table(rows: list[dict], prefix: Path) -> tuple[Path, Path]:
    """prefix.csv and prefix.parquet with the union of all rows' columns; a column's SI
    unit, where it has one, is in the Parquet field's metadata (``unit``)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    units = getattr(rows, "units", {})
    columns = list(dict.fromkeys(key for row in rows for key in row))
    arrays = {name: _column([row.get(name) for row in rows]) for name in columns}
    schema = pa.schema(
        [
            pa.field(name, array.type, metadata={"unit": units[name]} if name in units else None)
            for name, array in arrays.items()
        ]
    )
    table = pa.table(list(arrays.values()), schema=schema)
    csv_path, parquet_path = prefix.with_suffix(".csv"), prefix.with_suffix(".parquet")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with replacing_files(csv_path, parquet_path) as (csv_tmp, parquet_tmp):
        pacsv.write_csv(table, csv_tmp)
        pq.write_table(table, parquet_tmp)
    return csv_path, parquet_path


def _column(values: list[Any]):
    """One column as an Arrow array: text throughout when its runs mixed text and
    numbers (a --set given as "4GB/s" in one run and 4e9 in another)."""
    import pyarrow as pa

    kinds = {type(v) for v in values if v is not None}
    if str in kinds and len(kinds) > 1:
        values = [None if v is None else str(v) for v in values]
    elif kinds == {int, float}:
        values = [None if v is None else float(v) for v in values]
    return pa.array(values)
