"""What a measured 3D XPoint (Optane DC PMM) does beyond a fixed-speed device: reads the
XPBuffer serves at the sequential latency, and the load-dependent service the flow network
applies (components/sim/loaded.py). Functions of arrays and numbers; Pmem calls them."""

from __future__ import annotations

import math

import numpy as np

from components.sim.loaded import FlowLoad


def buffered_requests(addr: np.ndarray, size: int, unit: int, hits: int) -> int:
    """Requests the XPBuffer serves: those whose first line is the line the request
    before ended in (a hit) or the next one (a sequential run, which the DIMM fetches
    ahead), and at least the buffer hits the stream's digest counted."""
    if addr.size < 2:
        return min(hits, int(addr.size))
    first = addr // unit
    last = (addr + (size - 1)) // unit
    step = first[1:] - last[:-1]
    sequential = int(np.count_nonzero((step == 0) | (step == 1)))
    return min(max(sequential, hits), int(addr.size))


def mean_read_latency(buffered: int, requests: int, miss: float, hit: float) -> float:
    """Idle mean latency of a stream's reads: buffered ones at ``hit``, the rest at
    ``miss``."""
    return (buffered * hit + (requests - buffered) * miss) / requests


def requesters(window: float, size: int, scattered: float, thread_bytes: int) -> float:
    """Requester equivalents of a stream. Its scattered requests (``scattered``: the
    share that do not continue the run before them) count as the bytes its window keeps
    in flight over what one requester (a core's fill buffers) keeps, as that many
    threads' random accesses do; its sequential runs as one stream at most, as a copy
    engine's or a log's appends do, however deep its window. A stream without a window
    is one."""
    if not math.isfinite(window):
        return 1.0
    threads = window * size / thread_bytes
    return scattered * threads + (1.0 - scattered) * min(threads, 1.0)


def spans(window: float, size: int, scattered: float, thread_bytes: int) -> float:
    """Requests one requester keeps in flight at distinct places. A stream that keeps no
    more than one requester's bytes in flight is a thread: each of its scattered
    requests lands on an interleave unit of its own, so it is present on as many modules
    as it has requests in flight. A deeper window (an engine's, a DMA's) is not one
    thread's: its requester equivalents spread over the modules in proportion to their
    needs (1), as its requests in flight do. Sequential runs stay on one unit."""
    one_thread = math.isfinite(window) and window * size <= thread_bytes
    return scattered * (max(window, 1.0) if one_thread else 1.0) + (1.0 - scattered)


def stream_load(
    resources: list[str],
    window: float,
    size: int,
    scattered: float,
    thread_bytes: int,
    curve: tuple[float, float, float],
    latency: float,
    service: float,
) -> FlowLoad:
    """The FlowLoad of one stream: its requesters (``scattered``: the share of its
    requests that start a new run), its kind's thrashing curve (onset, slope, cap), its idle
    mean latency and the service time its requests queue behind."""
    onset, slope, cap = curve
    return FlowLoad(
        requesters(window, size, scattered, thread_bytes),
        onset,
        slope,
        float(latency),
        float(service),
        frozenset(resources),
        spans(window, size, scattered, thread_bytes),
        cap=cap,
    )
