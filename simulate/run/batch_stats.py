"""One schema for ``batch_time_ms`` in results.json, full-detail or sampled runs alike.

Every run reports the mean, median and 99th percentile of its batch times, a 95%
confidence half-width of the mean, and how many values stand behind them: the steady
batches of a full-detail run, or the sampled units of a sampled one. Behind fewer than
three, a percentile is one of a couple of numbers, and the run says so in ``warnings``.
"""

from __future__ import annotations

import math

import numpy as np

from components.sim.units import ticks_to_ms

FEW = 3  # fewer values than this behind p50/p99 earn a warning

# Student-t 0.975 quantiles for 1..30 degrees of freedom (any statistics table, e.g.
# NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959964


def t975(dof: int) -> float:
    """Student-t 0.975 quantile: the table to 30, then the Cornish-Fisher expansion
    (Abramowitz & Stegun 26.7.5), within 1e-4 of the exact value beyond 30."""
    if dof < 1:
        raise ValueError(f"no t quantile for {dof} degrees of freedom")
    if dof <= len(_T975):
        return _T975[dof - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def interval(values: np.ndarray) -> dict[str, float | int | None]:
    """Mean and 95% confidence half-width of independent observations."""
    n = int(values.size)
    mean = float(values.mean())
    if n < 2:
        return {"mean": mean, "ci95": None, "n": n}
    half = t975(n - 1) * float(values.std(ddof=1)) / math.sqrt(n)
    return {"mean": mean, "ci95": half, "n": n}


def batch_time_summary(ticks: np.ndarray, what: str) -> tuple[dict, list[str]]:
    """(batch_time_ms, warnings) of the batch times (ticks) behind a run's figure: the
    mean, p50, p99, the 95% half-width of the mean (None below two values; consecutive
    batches are treated as independent, which a full-detail run's are only
    approximately) and the count (``batches``), in ms. ``what`` names the values in a
    warning (steady batches, sampled units)."""
    values = np.asarray(ticks, dtype=np.float64)
    spread = interval(values)

    def ms(value: float) -> float:
        return round(ticks_to_ms(float(value)), 6)

    summary = {
        "mean": ms(spread["mean"]),
        "p50": ms(np.percentile(values, 50)),
        "p99": ms(np.percentile(values, 99)),
        "ci95_ms": None if spread["ci95"] is None else ms(spread["ci95"]),
        "batches": int(values.size),
    }
    warnings = []
    if values.size < FEW:
        warnings.append(
            f"fewer than {FEW} {what} ({values.size}) stand behind p50 and p99; give more batches"
        )
    return summary, warnings
