"""SimObject: a named node in the component tree that owns parameters and stats.

As in gem5, assigning a SimObject to an attribute of another makes it a child whose
name is the attribute name, so ``board.cxl_mem.pmem`` is both a Python path and the
stat/parameter prefix. Parameters are resolved at construction from class defaults
and keyword overrides; ``set_by_path`` applies ``--set PATH=VALUE`` overrides later,
before the simulation starts.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterator
from typing import Any

from components.sim.params import ConfigError, Param
from components.sim.stats import Average, Formula, Scalar, Stat, Vector

_tree_version = 0  # bumped whenever an object is attached or renamed anywhere


class SimObject:
    """Base of every component. Subclasses declare Param class attributes."""

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        declared: dict[str, Param] = {}
        for klass in reversed(cls.__mro__):
            for key, value in vars(klass).items():
                if isinstance(value, Param):
                    declared[key] = value
        cls._params = declared

    _params: dict[str, Param] = {}

    def __init__(self, **overrides: Any) -> None:
        object.__setattr__(self, "_param_values", {})
        object.__setattr__(self, "_param_raw", {})
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_parent", None)
        object.__setattr__(self, "_name", type(self).__name__.lower())
        object.__setattr__(self, "_stats", [])
        unknown = set(overrides) - set(self._params)
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(
                f"{type(self).__name__}: unknown parameter {name!r}" + _suggest(name, self._params)
            )
        for key, param in self._params.items():
            setattr(self, key, overrides.get(key, param.default))

    # ----- tree -------------------------------------------------------------
    def __setattr__(self, key: str, value: Any) -> None:
        if isinstance(value, SimObject):
            object.__setattr__(value, "_parent", self)
            value.rename(key)
            self._children[key] = value
        elif key not in self.__dict__ and not hasattr(type(self), key) and _from_outside():
            # a script (not a component's own code) setting a name no parameter has: as
            # in gem5, a misspelt parameter is an error, not a silent new attribute
            raise ConfigError(
                f"{self.path}: unknown parameter {key!r} of {type(self).__name__}"
                + _suggest(key, self._params)
            )
        object.__setattr__(self, key, value)

    def rename(self, name: str) -> None:
        """Give this object (and so its subtree's paths) a new name."""
        global _tree_version
        _tree_version += 1
        object.__setattr__(self, "_name", name)

    @property
    def name(self) -> str:
        return self._name

    @property
    def path(self) -> str:
        """Dotted names from the root, kept until the tree next changes: the tree is
        built before a run, which asks for paths (resource names) thousands of times
        per batch."""
        memo = self.__dict__.get("_path_memo")
        if memo is not None and memo[0] == _tree_version:
            return memo[1]
        path = self._name if self._parent is None else f"{self._parent.path}.{self._name}"
        object.__setattr__(self, "_path_memo", (_tree_version, path))
        return path

    def children(self) -> Iterator[SimObject]:
        return iter(self._children.values())

    def descendants(self) -> Iterator[SimObject]:
        yield self
        for child in self._children.values():
            yield from child.descendants()

    # ----- parameters -------------------------------------------------------
    def param_paths(self) -> dict[str, tuple[SimObject, str]]:
        return {
            f"{obj.path}.{key}": (obj, key) for obj in self.descendants() for key in obj._params
        }

    def set_by_path(self, path: str, raw: Any) -> None:
        """Override one parameter anywhere below this object by its full path."""
        paths = self.param_paths()
        if path not in paths:
            raise ConfigError(f"unknown parameter path {path!r}" + _suggest(path, paths))
        obj, key = paths[path]
        setattr(obj, key, raw)

    def config(self) -> dict[str, Any]:
        """Every resolved parameter with its raw form, unit and source (config.json)."""
        params = {}
        for key, param in self._params.items():
            params[key] = {
                "value": _jsonable(self._param_values[key]),
                "given": _jsonable(self._param_raw[key]),
                "unit": param.unit,
                "source": param.source,
            }
        out: dict[str, Any] = {"type": type(self).__name__, "params": params}
        for key, child in self._children.items():
            out[key] = child.config()
        return out

    # ----- stats ------------------------------------------------------------
    def _register(self, stat: Stat) -> Any:
        self._stats.append(stat)
        return stat

    def scalar(self, name: str, desc: str, unit: str, served: bool = False) -> Scalar:
        """``served``: it counts work a stage does (bytes, accesses, energy), which a
        stage stopped early books only in part (components/sim/stats.py ``refund``)."""
        return self._register(Scalar(name, desc, unit, served))

    def average(self, name: str, desc: str, unit: str) -> Average:
        return self._register(Average(name, desc, unit))

    def vector(self, name: str, desc: str, unit: str, labels, served: bool = False) -> Vector:
        return self._register(Vector(name, desc, unit, labels, served))

    def formula(self, name: str, desc: str, unit: str, fn) -> Formula:
        return self._register(Formula(name, desc, unit, fn))

    def stat_rows(self) -> list[tuple[str, float, str, str]]:
        rows = []
        for obj in self.descendants():
            for stat in obj._stats:
                rows += stat.rows(f"{obj.path}.")
        return rows


INSIDE = ("components.", "workloads.", "simulate.")


def _from_outside() -> bool:
    """Whether the attribute being set is set by a script composing a board (a config,
    a test, a notebook) rather than by the simulator's own code keeping state: a
    SimObject's method, or a function of the components, workloads or simulate
    packages."""
    frame = sys._getframe(2)
    if isinstance(frame.f_locals.get("self"), SimObject):
        return False
    return not str(frame.f_globals.get("__name__", "")).startswith(INSIDE)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _suggest(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""
