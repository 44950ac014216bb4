"""Sweep specs: a YAML or TOML file of fixed options, axes, zip groups, outroot, slurm.

Every run is built through the same argparse options as configs/trainingcxl.py, so an
axis names exactly what a user would type, and every mistake is found before any run
starts and reported as one line naming the spec field (``spec: axes.seed: empty axis``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from simulate.run.configure import check_connected
from simulate.run.options import (
    QuietParser,
    RunOptions,
    UsageError,
    add_run_options,
    options_from_args,
)
from simulate.sweeps import specfile
from simulate.sweeps.runid import run_id
from simulate.sweeps.slurm import parse_slurm
from workloads.models import get_model

TOP_LEVEL = ("outroot", "fixed", "axes", "zip", "slurm")
SWEEP_MANAGED = ("help", "outdir", "sets", "progress", "input_cache")
SET_PREFIX = "set."
MAX_RUNS = 10_000  # a grid above this is refused before any run is built (docs/sweeps.md)


class SpecError(UsageError):
    """A malformed spec; the message starts with ``spec: FIELD:``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"spec: {field}: {message}")


@dataclass(frozen=True)
class Run:
    index: int
    id: str
    options: RunOptions
    point: dict[str, Any]


@dataclass(frozen=True)
class Sweep:
    path: Path
    outroot: Path
    runs: list[Run]
    slurm: dict[str, Any]


@functools.cache
def _run_parser() -> QuietParser:
    """One parser for every run: building it costs more than parsing with it."""
    parser = QuietParser(prog="sweep", add_help=False)
    add_run_options(parser)
    return parser


def _option_flags() -> dict[str, argparse.Action]:
    """Spec option name (argparse dest) -> its action, for every sweepable CLI option."""
    return {
        action.dest: action for action in _run_parser()._actions if action.dest not in SWEEP_MANAGED
    }


def _read_document(path: Path) -> dict[str, Any]:
    try:
        text = specfile.read_text(path)
    except specfile.SpecFileError as exc:
        raise SpecError(str(path), str(exc)) from None
    try:
        data = specfile.parse(path, text)
    except RecursionError:
        raise SpecError(str(path), "nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(str(path), f"bad TOML: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(str(path), f"bad YAML: {problem}{where}") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "expected a mapping with outroot, fixed, axes")
    return data


def _leaves(prefix: str, tree: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}"
        flat.update(_leaves(name, value) if isinstance(value, dict) else {name: value})
    return flat


def _flatten(section: str, mapping: Any) -> dict[str, Any]:
    """Normalize option names; nested ``set: {board: {...}}`` becomes ``set.board...``."""
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise SpecError(section, "expected a mapping of option names")
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = str(key)
        if (name == "set" or name.startswith(SET_PREFIX)) and isinstance(value, dict):
            flat.update(_leaves(name, value))
        else:
            flat[name if name.startswith(SET_PREFIX) else name.replace("-", "_")] = value
    return flat


def _scalar_text(value: Any, field: str) -> str:
    if value is None or isinstance(value, dict | list):
        raise SpecError(field, f"expected a single value, got {value!r}")
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _check_name(name: str, field: str, flags: dict[str, argparse.Action]) -> None:
    if not name.startswith(SET_PREFIX) and name not in flags:
        known = ", ".join([*flags, "set.PATH"])
        raise SpecError(field, f"unknown option (known: {known})")


def _argv(name: str, value: Any, field: str, flags: dict[str, argparse.Action]) -> list[str]:
    """The command-line words that set one option, as a user would type them."""
    if name.startswith(SET_PREFIX):
        path = name[len(SET_PREFIX) :]
        return [f"--set={path}={_scalar_text(value, field)}"]
    _check_name(name, field, flags)
    action = flags[name]
    flag = action.option_strings[0]
    if action.nargs == 0:
        if not isinstance(value, bool):
            raise SpecError(field, f"expected true or false, got {value!r}")
        return [flag] if value else []
    if isinstance(action.default, list):
        items = value if isinstance(value, list) else [value]
        return [f"{flag}={_scalar_text(item, field)}" for item in items]
    if value is None:
        return []
    if isinstance(value, bool):
        raise SpecError(field, f"expected a value, got {value!r}")
    return [f"{flag}={_scalar_text(value, field)}"]


def _options(argv: list[str], field: str) -> RunOptions:
    try:
        return options_from_args(_run_parser().parse_args(argv))
    except UsageError as exc:
        raise SpecError(field, str(exc)) from None


def _dimensions(axes: dict[str, list], groups: Any) -> list[list[dict[str, Any]]]:
    """One list of axis assignments per independent dimension; zip groups vary together."""
    if groups is None:
        groups = []
    if not isinstance(groups, list):
        raise SpecError("zip", "expected a list of axis-name lists")
    group_of: dict[str, int] = {}
    for number, group in enumerate(groups):
        field = f"zip[{number}]"
        if not isinstance(group, list) or len(group) < 2:
            raise SpecError(field, "expected a list of at least two axis names")
        for name in group:
            key = str(name) if str(name).startswith(SET_PREFIX) else str(name).replace("-", "_")
            if key not in axes:
                raise SpecError(field, f"{name!r} is not an axis")
            if key in group_of:
                raise SpecError(field, f"axis {name!r} is already in zip[{group_of[key]}]")
            group_of[key] = number
        lengths = {len(axes[k]) for k in group_of if group_of[k] == number}
        if len(lengths) > 1:
            raise SpecError(field, f"zipped axes differ in length ({sorted(lengths)})")
    dimensions, emitted = [], set()
    for name, values in axes.items():
        if name not in group_of:
            dimensions.append([{name: value} for value in values])
        elif group_of[name] not in emitted:
            emitted.add(group_of[name])
            members = [k for k in axes if group_of.get(k) == group_of[name]]
            rows = zip(*(axes[k] for k in members), strict=True)
            dimensions.append([dict(zip(members, row, strict=True)) for row in rows])
    return dimensions


BOARD_INDEPENDENT = {"seed": 0, "outdir": "", "progress": False, "input_cache": None}
"""Options that never change what a run's validation builds or checks: runs that differ
in these alone validate once (a seed axis of a thousand runs builds one board)."""


def _validate_boards(runs: list[Run], origins: dict[str, str]) -> None:
    """Build each distinct board once with its --set paths applied, without simulating:
    runs that differ in anything a board or its checks depend on (GPUs, CXL-MEMs,
    checkpoint policy, topology, batch size, ...) are each validated before any runs."""
    try:
        from simulate import simulator
    except ImportError:
        simulator = None
    validate = getattr(simulator, "validate", None)
    seen: set[str] = set()
    for run in runs:
        options = run.options
        try:
            get_model(options.model)
        except ValueError as exc:
            raise SpecError(origins["model"], str(exc)) from None
        key = repr(dataclasses.replace(options, **BOARD_INDEPENDENT))
        if validate is None or key in seen:
            continue
        seen.add(key)
        try:
            validate(options)
            check_connected(options)
        except ValueError as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            field = next(
                (origins[f"{SET_PREFIX}{path}"] for path, _ in options.sets if path in message),
                f"run {run.index} (system {options.system})",
            )
            raise SpecError(field, message) from None


def load_sweep(path: str | Path, outroot: str | None = None, check: bool = True) -> Sweep:
    """Parse and validate a spec; check=False skips building boards (e.g. for --list)."""
    path = Path(path)
    doc = _read_document(path)
    for key in doc:
        if key not in TOP_LEVEL:
            raise SpecError(str(key), f"unknown field (expected one of: {', '.join(TOP_LEVEL)})")
    root = outroot if outroot is not None else doc.get("outroot")
    if not isinstance(root, str) or not root.strip():
        raise SpecError("outroot", "expected a directory path")
    flags = _option_flags()
    fixed = _flatten("fixed", doc.get("fixed"))
    axes = _flatten("axes", doc.get("axes"))
    origins = {name: f"fixed.{name}" for name in fixed} | {name: f"axes.{name}" for name in axes}
    origins.setdefault("model", "fixed.model")
    fixed_argv: list[str] = []
    for name, value in fixed.items():
        words = _argv(name, value, f"fixed.{name}", flags)
        _options(words, f"fixed.{name}")
        fixed_argv += words
    _options(fixed_argv, "fixed")
    for name, values in axes.items():
        field = f"axes.{name}"
        _check_name(name, field, flags)
        if name in fixed:
            raise SpecError(field, "also given in fixed")
        if not isinstance(values, list):
            raise SpecError(field, f"expected a list of values, got {values!r}")
        if not values:
            raise SpecError(field, "empty axis")
    dimensions = _dimensions(axes, doc.get("zip"))
    size = math.prod(len(dimension) for dimension in dimensions)
    if size > MAX_RUNS:
        raise SpecError(
            "axes",
            f"the grid has {size:,} runs, more than the limit of {MAX_RUNS:,}; "
            "split it into several specs",
        )
    for name, values in axes.items():
        field = f"axes.{name}"
        for number, value in enumerate(values):
            _options(
                fixed_argv + _argv(name, value, f"{field}[{number}]", flags), f"{field}[{number}]"
            )
    slurm = parse_slurm(doc.get("slurm"))
    root_path = Path(root).expanduser().resolve()
    runs: list[Run] = []
    first_index: dict[str, int] = {}
    for index, parts in enumerate(itertools.product(*dimensions)):
        point = {k: v for part in parts for k, v in part.items()}
        argv = list(fixed_argv)
        for name, value in point.items():
            argv += _argv(name, value, f"axes.{name}", flags)
        options = _options(argv, f"run {index}")
        identity = run_id(options)
        if identity in first_index:
            raise SpecError(
                "axes",
                f"runs {first_index[identity]} and {index} resolve to the "
                f"same options (id {identity}): duplicate axis values?",
            )
        first_index[identity] = index
        options = replace(options, outdir=str(root_path / identity), progress=False)
        runs.append(Run(index, identity, options, point))
    if check:
        _validate_boards(runs, origins)
    return Sweep(path, root_path, runs, slurm)
