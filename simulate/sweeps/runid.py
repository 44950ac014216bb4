"""Run identity: a short hash of a run's fully resolved options.

The id names the run's outdir, so re-running a sweep finds finished runs by hashing
the same options again; anything that does not change the simulated result (outdir,
progress bar, PNG plots, the input cache) is left out of the hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from simulate.run.options import RunOptions
from workloads.models import DEFAULT_BATCH_SIZE

ID_LENGTH = 12
NOT_IDENTITY = ("outdir", "progress", "plot", "input_cache")
# options added after ids were published, whose default names today's behaviour: at
# their default they are absent, so every existing id stays what it was
NAMED_DEFAULTS = {
    "checkpoint": "paper",
    "quantize": "none",
    "gpus": 1,
    "cxl_mems": 1,
    "sharding": "table",
    "pool_jobs": 1,
}


def canonical(options: RunOptions) -> dict[str, Any]:
    """The options that decide a run's result, with defaults filled in."""
    return canonical_dict(asdict(options))


def canonical_dict(data: dict[str, Any]) -> dict[str, Any]:
    """``canonical`` of options as a mapping (asdict, or config.json's with ``sets`` as
    PATH=VALUE strings)."""
    data = dict(data)
    for name in NOT_IDENTITY:
        data.pop(name, None)
    sets = data.get("sets", [])
    if isinstance(sets, list) and all(isinstance(item, str) for item in sets):
        data["sets"] = [item.split("=", 1) for item in sets]
    if data.get("batch_size") is None:
        data["batch_size"] = DEFAULT_BATCH_SIZE
    data["sets"] = dict(sorted(dict(data["sets"]).items()))  # last --set of a path wins
    for name, default in NAMED_DEFAULTS.items():
        if data.get(name) == default:
            data.pop(name)
    # an option that is off (False, None, empty) is absent: a new off-by-default option
    # leaves every existing id unchanged
    return {key: value for key, value in data.items() if not _absent(value)}


def _absent(value: Any) -> bool:
    return value is False or value is None or (isinstance(value, list | dict) and not value)


def canonical_json(options: RunOptions) -> str:
    return json.dumps(canonical(options), sort_keys=True, separators=(",", ":"))


def run_id(options: RunOptions) -> str:
    """Stable across processes and machines: sha256 of the canonical JSON."""
    return hashlib.sha256(canonical_json(options).encode()).hexdigest()[:ID_LENGTH]
