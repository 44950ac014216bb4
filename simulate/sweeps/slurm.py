"""The spec's ``slurm`` section: per-run resources for submitit and for sbatch arrays."""

from __future__ import annotations

import re
from typing import Any

from simulate.run.options import UsageError

_TIME = re.compile(r"^(?:(\d+)-)?(\d+):(\d\d):(\d\d)$")
_MEM = re.compile(r"^(\d+)\s*([KMGT])i?B?$", re.IGNORECASE)
TEXT_KEYS = ("partition", "account", "qos", "constraint")
COUNT_KEYS = ("cpus", "gpus", "array_parallelism")
SUBMITIT_NAMES = {
    "partition": "slurm_partition",
    "account": "slurm_account",
    "qos": "slurm_qos",
    "constraint": "slurm_constraint",
    "time": "timeout_min",
    "cpus": "cpus_per_task",
    "gpus": "gpus_per_node",
    "mem": "slurm_mem",
    "array_parallelism": "slurm_array_parallelism",
}
DEFAULTS = {"time": 60, "cpus": 1, "mem": "4G"}
SIGNAL_DELAY_S = 90
MAX_MINUTES = 365 * 1440
"""A year: SLURM's own limits are set per partition (MaxTime, typically hours to a few
days); no run of this simulator needs a year, and a larger value is a typo."""
MAX_COUNT = {"cpus": 4096, "gpus": 64, "array_parallelism": 100_000}
"""Per-task CPUs and per-node GPUs beyond the largest nodes built (a few hundred cores,
8-16 GPUs) with room to spare; array parallelism up to a grid's MAX_RUNS, times ten."""
MAX_MEM_MIB = 64 * 2**20
"""64 TiB per task: beyond the largest single nodes (a few TiB)."""
_MIB = {"K": 2**-10, "M": 1, "G": 2**10, "T": 2**20}


def _error(key: str, message: str) -> UsageError:
    return UsageError(f"spec: slurm.{key}: {message}")


def _minutes(value: Any) -> int:
    total = _parse_minutes(value)
    if total > MAX_MINUTES:
        raise _error("time", f"must be at most {MAX_MINUTES} minutes (a year), got {value!r}")
    return total


def _parse_minutes(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _TIME.match(str(value)) if isinstance(value, str) else None
    if not match:
        raise _error("time", f"expected minutes or [D-]HH:MM:SS, got {value!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = days * 1440 + hours * 60 + minutes + (1 if seconds else 0)
    if total < 1:
        raise _error("time", f"must be at least one minute, got {value!r}")
    return total


def _memory(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        value = f"{value}G"
    match = _MEM.match(value.strip()) if isinstance(value, str) else None
    if not match or int(match.group(1)) < 1:
        raise _error("mem", f"expected a size such as 16G or 512M, got {value!r}")
    if int(match.group(1)) * _MIB[match.group(2).upper()] > MAX_MEM_MIB:
        raise _error("mem", f"must be at most 64T, got {value!r}")
    return f"{match.group(1)}{match.group(2).upper()}"


def parse_slurm(section: Any) -> dict[str, Any]:
    """Validated resources with defaults: partition, time (minutes), cpus, mem, ..."""
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise UsageError("spec: slurm: expected a mapping of resources")
    resources: dict[str, Any] = dict(DEFAULTS)
    for key, value in section.items():
        if key == "time":
            resources[key] = _minutes(value)
        elif key == "mem":
            resources[key] = _memory(value)
        elif key in COUNT_KEYS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _error(key, f"expected a count, got {value!r}")
            if value > MAX_COUNT[key]:
                raise _error(key, f"must be at most {MAX_COUNT[key]}, got {value!r}")
            resources[key] = value
        elif key in TEXT_KEYS:
            if not isinstance(value, str) or not value.strip():
                raise _error(key, f"expected a name, got {value!r}")
            resources[key] = value.strip()
        else:
            known = ", ".join(SUBMITIT_NAMES)
            raise _error(str(key), f"unknown resource (known: {known})")
    return resources


def signal_delay_s(minutes: int) -> int:
    """How long before its time limit a job is warned (USR2) so that the run records its
    failure before SLURM kills it: submitit's 90 s, but at most a quarter of the limit,
    or a short job would be warned as it starts."""
    return min(SIGNAL_DELAY_S, minutes * 60 // 4)


def submitit_parameters(resources: dict[str, Any]) -> dict[str, Any]:
    """The spec's resources under submitit's AutoExecutor parameter names."""
    parameters = {
        SUBMITIT_NAMES[key]: value
        for key, value in resources.items()
        if not (key == "gpus" and value == 0)
    }
    parameters["slurm_signal_delay_s"] = signal_delay_s(resources["time"])
    return parameters


def array_ranges(indices: list[int]) -> str:
    """SLURM's --array syntax for these task ids, runs of consecutive ids as ranges."""
    parts: list[list[int]] = []
    for index in sorted(indices):
        if parts and parts[-1][1] == index - 1:
            parts[-1][1] = index
        else:
            parts.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def sbatch_directives(resources: dict[str, Any], indices: list[int]) -> list[str]:
    """#SBATCH lines for a plain job array whose task ids are these run indices."""
    hh, mm = divmod(resources["time"], 60)
    array = array_ranges(indices)
    if "array_parallelism" in resources:
        array += f"%{resources['array_parallelism']}"
    lines = [
        f"#SBATCH --array={array}",
        f"#SBATCH --time={hh:02d}:{mm:02d}:00",
        f"#SBATCH --cpus-per-task={resources['cpus']}",
        f"#SBATCH --mem={resources['mem']}",
    ]
    for key in TEXT_KEYS:
        if key in resources:
            lines.append(f"#SBATCH --{key}={resources[key]}")
    if resources.get("gpus"):
        lines.append(f"#SBATCH --gpus-per-node={resources['gpus']}")
    return lines
