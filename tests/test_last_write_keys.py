"""streams.last_write_keys: the lines pending writes hold, sorted and distinct, each
with the drain key of its last write, against a dictionary over the writes; streams
whose lines are already distinct and increasing (a log, an update of sorted rows) take
the path without a sort and must give the same."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from components.memory.streams import last_write_keys


def reference(lines: np.ndarray, keys: np.ndarray) -> tuple[list[int], list[float]]:
    last: dict[int, float] = {}
    for line, key in zip(lines.tolist(), keys.tolist(), strict=True):
        last[line] = max(last.get(line, -np.inf), key)
    ordered = sorted(last)
    return ordered, [last[line] for line in ordered]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 400),
    st.sampled_from(["increasing", "sorted with repeats", "shuffled", "decreasing"]),
)
def test_last_write_keys_matches_a_dictionary(seed, size, order):
    rng = np.random.default_rng(seed)
    lines = rng.integers(0, max(2 * size, 1), size)
    if order == "increasing":
        lines = np.unique(lines)
    elif order == "sorted with repeats":
        lines = np.sort(lines)
    elif order == "decreasing":
        lines = np.unique(lines)[::-1].copy()
    keys = rng.random(lines.size) * 2.0
    waiting, last = last_write_keys(lines, keys)
    want_lines, want_keys = reference(lines, keys)
    assert waiting.tolist() == want_lines
    assert last.tolist() == want_keys
    assert waiting.dtype == lines.dtype and last.dtype == keys.dtype


def test_a_line_written_twice_keeps_its_later_drain():
    lines = np.array([4, 7, 7, 9], dtype=np.int64)  # increasing, but not distinct
    waiting, last = last_write_keys(lines, np.array([0.1, 0.9, 0.3, 0.5]))
    assert waiting.tolist() == [4, 7, 9] and last.tolist() == [0.1, 0.9, 0.5]
