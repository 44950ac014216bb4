"""The options of the long-run failure studies (compare_ft, cpr_shards), refused before
any simulation: a long run loops once per failure, so an MTBF of a microsecond or a
checkpoint period of many MTBFs would never end."""

from __future__ import annotations

import math
from collections.abc import Callable

from components.sim.units import plain_text_number
from simulate.run.options import UsageError

MTBF_SECONDS = (60.0, 3.2e7)
"""A failure a minute to one a year: CPR evaluates hours to days; below a minute a
checkpoint of gigabytes to NVMe may never complete between failures."""
MIN_DAYS = 1e-3  # 86 s: longer than any scheme's batch plus its checkpoint
MAX_DAYS = 3650.0
MAX_FAILURES = 100_000
"""Failures one long run may draw: each is a step of the long run's loop."""
HOPELESS = 20.0
"""A scheme whose checkpoint period is this many MTBFs long completes one with odds of
e^-20: it would loop through failures without end."""


def number_list(
    text: str, flag: str, kind: Callable[[str], float] = float, what: str = "numbers"
) -> list:
    """Positive finite numbers (``what``, in the error) separated by commas, typed in
    ASCII digits; an empty item ('1,,2') is refused, not skipped."""
    items = [item.strip() for item in text.split(",")]
    try:
        values = [kind(plain_text_number(item)) for item in items]
    except ValueError:
        raise UsageError(f"{flag} expects {what} separated by commas, got {text!r}") from None
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise UsageError(f"{flag} values must be positive, got {text!r}")
    return values


def share_list(text: str, flag: str) -> list[float]:
    """Shares of the rows (CPR's prioritised checkpoints), each in (0, 1)."""
    shares = number_list(text, flag)
    if not all(0 < r < 1 for r in shares):
        raise UsageError(f"{flag} must be in (0, 1), got {shares}")
    return shares


def check_long_runs(mtbfs: list[float], days: float) -> None:
    """MTBFs within MTBF_SECONDS, days within MIN_DAYS..MAX_DAYS, and no more than
    MAX_FAILURES failures in one long run."""
    low, high = MTBF_SECONDS
    if not all(low <= m <= high for m in mtbfs):
        raise UsageError(f"--mtbf values must be in {low:g}..{high:g} seconds, got {mtbfs}")
    if not (math.isfinite(days) and MIN_DAYS <= days <= MAX_DAYS):
        raise UsageError(f"--days must be in [{MIN_DAYS:g}, {MAX_DAYS:g}], got {days}")
    failures = days * 86400 / min(mtbfs)
    if failures > MAX_FAILURES:
        raise UsageError(
            f"--days {days:g} at --mtbf {min(mtbfs):g} is ~{failures:,.0f} failures a "
            f"long run, more than {MAX_FAILURES:,}: fewer days or a longer MTBF"
        )


def check_progress(name: str, period_s: float, mtbf: float) -> None:
    """A scheme that rolls back to its last checkpoint must complete one between
    failures (HOPELESS)."""
    if period_s > HOPELESS * mtbf:
        raise UsageError(
            f"--mtbf {mtbf:g}: {name} needs {period_s:.3g} s between checkpoints, "
            f"{period_s / mtbf:.0f} MTBFs: it would never complete one"
        )
