"""The Python API's arguments checked by type at construction, in the API's own terms.

The CLI's values arrive as strings that argparse converts; a script's arrive as they
are, so a bool batch count, a string of failure times or a number where a path belongs
is refused here with one line naming the argument, before any option is derived."""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Mapping
from typing import Any

from simulate.run.options import UsageError

KINDS = {
    "batches": "int",
    "fail_random": "int",
    "gpus": "int",
    "cxl_mems": "int",
    "pool_jobs": "int",
    "fail_device": "int?",
    "functional": "bool",
    "halt_on_failure": "bool",
    "plot": "bool",
    "progress": "bool",
    "pmem": "str?",
    "sample": "str?",
    "checkpoint": "str",
    "quantize": "str",
    "store": "str?",
    "recovery": "str?",
    "gpu": "str?",
    "sharding": "str",
    "mtbf": "number?",
    "ckpt_interval": "number?",
    "outdir": "path?",
    "pmem_image": "path?",
    "gpu_profile": "path?",
    "topology": "path?",
    "input_cache": "path?",
    "fail_at": "times",
    "sets": "sets",
}
"""Each Simulator argument's kind; ``?``: None allowed."""
WORKLOAD_KINDS = {
    "batch_size": "int?",
    "seed": "int",
    "rows": "int?",
    "reuse": "number?",
    "zipf": "number?",
    "trace": "path?",
}
WORDS = {
    "int": "an int",
    "bool": "True or False",
    "str": "a string",
    "number": "a number",
    "path": "a path (str or os.PathLike)",
    "times": "a list of failure times ('3.2ms') or ticks",
    "sets": "a mapping of parameter paths to values, or a list of 'PATH=VALUE' strings",
}


def check_arguments(values: Mapping[str, Any], kinds: Mapping[str, str], prefix: str = "") -> None:
    """Raise UsageError for the first value not of its kind (``prefix``: whose
    argument it is, e.g. "workload's ")."""
    for name, kind in kinds.items():
        value = values[name]
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if optional and value is None:
            continue
        if not _is(kind, value):
            words = WORDS[kind] + (" or None" if optional else "")
            raise UsageError(
                f"{prefix}{name} must be {words}, got {value!r} ({type(value).__name__})"
            )


def _is(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "number":
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind == "path":
        return isinstance(value, str | os.PathLike)
    if kind == "times":
        return _listed(value) and all(
            isinstance(t, str) or (isinstance(t, numbers.Integral) and not isinstance(t, bool))
            for t in value
        )
    if kind == "sets":
        if isinstance(value, Mapping):
            return all(isinstance(path, str) for path in value)
        return _listed(value) and all(isinstance(item, str) for item in value)
    raise AssertionError(f"unknown kind {kind}")


def _listed(value: Any) -> bool:
    """An iterable of items, not a string (whose characters would be taken one by one)."""
    return isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)
