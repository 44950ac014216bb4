"""The near-memory engine's gather pipeline: in order, over a finite set of slots.

The engine sum-reduces each bag's rows in order, so a read retires only after every
read before it, and it keeps ``window`` reads in flight (its slots), so read j issues
only once read j - window has retired. A read of a line the previous update has not
yet drained retires only when that line drains, and holds its slot until then: every
read after it waits too. Read j therefore waits until each draining write stream has
passed the largest drain position any read up to j - window waits for: the prefix
maximum of the reads' waits, a staircase whose steps (the records) cut the gather into
segments, each issued once its step has drained. The segments are stages of one op,
so the flow network times them and the gates between them (time belongs to the
engine); a gather that waits for nothing stays one stage.
"""

from __future__ import annotations

import numpy as np


def in_order_segments(waits: list[np.ndarray], window: int) -> tuple[np.ndarray, np.ndarray]:
    """Where an in-order pipeline of ``window`` slots cuts a read stream whose request j
    waits for drain position ``waits[s][j]`` of write stream s (0: none): the segments'
    first requests (the first is 0) and, per stream and segment, the drain position
    the segment's requests wait for (0 for the first segment)."""
    count = waits[0].size if waits else 0
    prefix = [np.maximum.accumulate(wait) for wait in waits]
    rises = np.zeros(count, dtype=bool)
    for steps in prefix:
        rises[0] |= steps[0] > 0
        rises[1:] |= steps[1:] > steps[:-1]
    records = np.flatnonzero(rises)
    records = records[records + window < count]
    starts = np.r_[0, records + window].astype(np.int64)
    keys = np.zeros((len(prefix), starts.size))
    for s, steps in enumerate(prefix):
        keys[s, 1:] = steps[records]
    return starts, keys
