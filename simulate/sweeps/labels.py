"""Human labels and scaled units for table columns, so a figure needs no legend of names.

A column is named as collected (``batch_time_ms.mean``, ``set.board.cxl_mem.pmem.
ctrl_write_bandwidth.si``); its label says what it is and its unit, and numbers in SI
base units are shown with the prefix that keeps them readable (4e9 B/s -> 4 GB/s).
"""

from __future__ import annotations

import math

RESULTS = {
    "batch_time_ms.mean": "Batch time, steady-state mean (ms)",
    "batch_time_ms.p50": "Batch time, median (ms)",
    "batch_time_ms.p99": "Batch time, 99th percentile (ms)",
    "energy_j.total": "Energy, whole run (J)",
    "energy_j.per_batch": "Energy per steady batch (J)",
    "idle_ms": "GPU idle per batch (ms)",
}
OPTIONS = {
    "system": "System",
    "model": "Model",
    "seed": "Seed",
    "batches": "Batches",
    "batch_size": "Batch size (samples)",
    "gpus": "GPUs",
    "cxl_mems": "CXL-MEMs",
    "pool_jobs": "Training jobs sharing the pool",
    "checkpoint": "Failure tolerance",
    "provenance.code": "Code version",
}
SUFFIX_UNITS = {"_ms": "ms", "_j": "J", "_bytes": "B"}
PREFIXES = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""), (1e-3, "m"),
            (1e-6, "µ"), (1e-9, "n"), (1e-12, "p")]  # fmt: skip


def scale(values: list[float], unit: str) -> tuple[float, str]:
    """(divisor, unit with prefix) that puts the largest |value| in [1, 1000)."""
    if not unit:
        return 1.0, ""
    largest = max((abs(v) for v in values if v), default=1.0)
    for factor, prefix in PREFIXES:
        if largest >= factor * 0.9999:
            return factor, f"{prefix}{unit}"
    return PREFIXES[-1][0], f"{PREFIXES[-1][1]}{unit}"


def number(value: float) -> str:
    """A tick or table number without float noise: 4, 2.5, 0.125."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def label(column: str, unit: str = "") -> str:
    """A column's human name, with its (scaled) unit in parentheses."""
    if column in RESULTS:
        return RESULTS[column]
    if column in OPTIONS:
        return OPTIONS[column]
    if column.startswith("set."):
        path = column.removesuffix(".si").removeprefix("set.").removeprefix("board.")
        owner, _, last = path.rpartition(".")
        words = f"{last.replace('_', ' ')} ({owner})" if owner else last.replace("_", " ")
    else:
        head, _, rest = column.partition(".")
        for suffix, implied in SUFFIX_UNITS.items():
            if head.endswith(suffix):
                head, unit = head.removesuffix(suffix), unit or implied
        rest = rest.removeprefix("components.").removeprefix("board.")
        words = head.replace("_", " ") + (f": {rest}" if rest else "")
    words = words[:1].upper() + words[1:]
    return f"{words} ({unit})" if unit else words


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
