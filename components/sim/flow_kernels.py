"""Compiled loops of the flow solver (components/sim/flows.py): accounting and progress,
filling, the completion and wake-up scans, the entries' index.

Each runs the list solver's loop (tests/flows_oracle.py) over the active arrays, so
every sum is added in the order it adds it, one term at a time, and the floats are the
same; numpy needs a dozen calls per filling round and a matrix per bottleneck to get
there, where these take one call per step of an event. Compiled with numba when the
module is imported (explicit signatures, cached on disk: later runs load them), so no
run pays a compile mid-simulation. Without numba (``COMPILED`` False) flows.py uses its
numpy definitions, which tests/test_flow_kernels.py checks these against.
"""

from __future__ import annotations

import numpy as np

from components.compiled import compile_kernel

try:
    import numba  # noqa: F401
except ImportError:  # a fresh install without numba: flows.py's numpy definitions
    COMPILED = False
else:
    import numpy.ma  # noqa: F401 - numba's first look at an array imports it: not mid-run

    COMPILED = True

EPSILON = 1e-12  # as in components/sim/flows.py
POSITIONS = 1 << 20  # as in components/sim/blame.py: rank = interval * POSITIONS + position


def _kernel(signature: str):
    """The function compiled now for ``signature`` where numba is available."""

    def compile_(function):
        if not COMPILED:
            return function
        return compile_kernel(function, signature)

    return compile_


@_kernel(
    "Tuple((f8[::1], i8[::1]))(i8[::1], i8[::1], i8[::1], f8[::1], f8[::1], f8[::1], f8[::1], i8)"
)
def fill(count, flow, resource, need, scale, weight, bounds, width):  # pragma: no cover
    """Weighted max-min rates and bottlenecks (resource rank, -1 for none) by
    progressive filling, as ``FlowNetwork._fill`` defines them: per round, the lowest
    level at which a resource saturates or a free flow reaches its bound freezes those
    flows; per flow its entries are contiguous (``flow``, ``resource``, ``need``)."""
    n = count.size
    rate = np.zeros(n)
    bottleneck = np.full(n, -1, dtype=np.int64)
    head = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        head[i + 1] = head[i] + count[i]
    demands = np.empty(need.size)
    for e in range(need.size):
        f = flow[e]
        demands[e] = need[e] / scale[f] * weight[f]
    capped = np.full(n, np.inf)
    free = np.zeros(n, dtype=np.bool_)
    left = 0
    for i in range(n):
        if bounds[i] > 0:
            capped[i] = scale[i] / bounds[i] / weight[i]
        if count[i] == 0:
            rate[i] = 1.0 / bounds[i] if bounds[i] > 0 else np.inf
        else:
            free[i] = True
            left += 1
    spare = np.ones(width)
    demand = np.empty(width)
    levels = np.empty(width)
    tolerance = 1 + 1e-12
    while left:
        demand[:] = 0.0
        for i in range(n):
            if free[i]:
                for e in range(head[i], head[i + 1]):
                    demand[resource[e]] += demands[e]
        level = np.inf
        for r in range(width):
            levels[r] = np.inf
            if demand[r] != 0:
                levels[r] = max(spare[r], 0.0) / demand[r]
                level = min(level, levels[r])
        for i in range(n):
            if free[i]:
                level = min(level, capped[i])
        tied = level * tolerance
        for i in range(n):
            if not free[i]:
                continue
            limit = width
            for e in range(head[i], head[i + 1]):
                if levels[resource[e]] <= tied:
                    limit = min(limit, resource[e])
            if limit == width and not capped[i] <= tied:
                continue
            rate[i] = level * weight[i] / scale[i]
            if limit < width:
                bottleneck[i] = limit
            free[i] = False
            left -= 1
            for e in range(head[i], head[i + 1]):
                spare[resource[e]] -= need[e] * rate[i]
    return rate, bottleneck


@_kernel(
    "i8(i8, f8[::1], f8[::1], i8[::1], f8[::1], f8[::1], f8[:, ::1], i8[::1], i8[::1], i8[::1],"
    " f8[::1], i8[::1], i8[::1], i8[::1], i8[::1], f8[:, ::1], i8[:, ::1], i8)"
)
def advance(
    elapsed,
    rate,
    alone,
    bottleneck,
    done,
    waited,
    use,
    spot,
    flow,
    resource,
    need,
    by_resource,
    first,
    row,
    col,
    values,
    rank,
    interval,
):  # pragma: no cover
    """``elapsed`` ticks at the current rates, in place: each slowed flow's lost time
    to its ``waited``, its bottleneck's queueing and, split over the bottleneck's
    other sharers in proportion to what each consumed of it, to the ledger cells
    (``values``, first-charge ``rank``) of its row and their owners' columns; then
    progress to ``done`` and each resource's busy time. ``use`` holds those two sums
    (busy, queueing) per resource with entries, its row ``spot[resource]``. Returns the
    next interval."""
    n = rate.size
    sharer = np.empty(by_resource.size, dtype=np.int64)  # per resource, its entries'
    share = np.empty(by_resource.size)  # flows and their consumption, in start order
    for k in range(by_resource.size):
        e = by_resource[k]
        sharer[k] = flow[e]
        share[k] = need[e] * rate[flow[e]]
    for i in range(n):
        b = bottleneck[i]
        if rate[i] >= alone[i] * (1 - 1e-9) or b < 0:
            continue
        lost = elapsed * (1.0 - rate[i] / alone[i])
        waited[i] += lost
        use[spot[b], 1] += lost
        total = 0.0
        for k in range(first[b], first[b + 1]):
            if sharer[k] != i:
                total += share[k]
        if not total > 0:
            continue
        mine = row[i]
        for k in range(first[b], first[b + 1]):
            other = sharer[k]
            if other == i:
                continue
            c = col[other]
            if values[mine, c] < 0:
                values[mine, c] = 0.0
                rank[mine, c] = interval * POSITIONS + k - first[b]
            values[mine, c] += lost * share[k] / total
    progress = np.empty(n)
    for i in range(n):
        progress[i] = min(rate[i] * elapsed, 1.0 - done[i])
        done[i] += progress[i]
    for e in range(need.size):
        use[spot[resource[e]], 0] += need[e] * progress[flow[e]]
    return interval + 1


@_kernel("UniTuple(i8[::1], 5)(i8[::1], i8[::1], i8)")
def index(count, resource, width):  # pragma: no cover
    """Per entry its flow; the entries by resource, in start order (a stable counting
    sort); where each resource's entries begin there (``width + 1`` bounds); the
    resources with entries, and per resource its place among those (-1 for none)."""
    flow = np.empty(resource.size, dtype=np.int64)
    e = 0
    for i in range(count.size):
        for _ in range(count[i]):
            flow[e] = i
            e += 1
    first = np.zeros(width + 1, dtype=np.int64)
    for e in range(resource.size):
        first[resource[e] + 1] += 1
    spot = np.full(width, -1, dtype=np.int64)
    touched = np.empty(width, dtype=np.int64)
    used = 0
    for r in range(width):
        if first[r + 1] > 0:
            spot[r] = used
            touched[used] = r
            used += 1
        first[r + 1] += first[r]
    by_resource = np.empty(resource.size, dtype=np.int64)
    place = first[:-1].copy()
    for e in range(resource.size):
        by_resource[place[resource[e]]] = e
        place[resource[e]] += 1
    return flow, by_resource, first, touched[:used].copy(), spot


@_kernel("f8(i8, f8[::1], f8[::1])")
def soonest(now, done, rate):  # pragma: no cover
    """The earliest tick (float; inf for none) at which an active flow completes."""
    wake = np.inf
    for i in range(done.size):
        if done[i] >= 1.0 - EPSILON:
            wake = min(wake, float(now))
        elif rate[i] > 0:
            wake = min(wake, now + np.ceil((1.0 - done[i]) / rate[i] - 1e-6))
    return wake


@_kernel("i8[::1](f8[::1], f8[::1])")
def ending(done, rate):  # pragma: no cover
    """The flows done, or with less than a tick of work left at their rate."""
    out = np.empty(done.size, dtype=np.int64)
    count = 0
    for i in range(done.size):
        if done[i] >= 1.0 - EPSILON or (rate[i] > 0 and (1.0 - done[i]) / rate[i] < 1.0):
            out[count] = i
            count += 1
    return out[:count]


@_kernel(
    "Tuple((f8[::1], i8[::1]))(i8[::1], i8[::1], i8[::1], f8[::1], f8[::1], f8[::1], f8[::1],"
    " f8[::1], f8[::1], f8[::1], f8[::1], i8)"
)
def solve(
    count, flow, resource, need, scale, weight, min_ticks, alone, service, fence, chains, width
):  # pragma: no cover
    """``FlowNetwork._fenced_fill``: one fill, or with fence chains an unbounded fill,
    their bounds stretched by their service loss at those shares, a second fill."""
    fenced = np.zeros(count.size, dtype=np.bool_)
    for i in range(count.size):
        fenced[i] = fence[i] > 0 and count[i] > 0
    if not fenced.any():
        return fill(count, flow, resource, need, scale, weight, min_ticks, width)
    bounds = min_ticks.copy()
    for i in range(count.size):
        if fenced[i]:
            bounds[i] = 0.0
    rate, first = fill(count, flow, resource, need, scale, weight, bounds, width)
    for i in range(count.size):
        if fenced[i]:
            lost = 0.0
            if rate[i] > 0 and rate[i] < service[i] * (1 - 1e-9):
                lost = (1.0 / rate[i] - 1.0 / service[i]) / chains[i]
            bounds[i] = max(min_ticks[i], fence[i] + lost)
    rate, bottleneck = fill(count, flow, resource, need, scale, weight, bounds, width)
    for i in range(count.size):
        if fenced[i] and bottleneck[i] < 0 and rate[i] < alone[i] * (1 - 1e-9):
            bottleneck[i] = first[i]  # where its acceptances waited
    return rate, bottleneck
