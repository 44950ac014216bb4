"""Memory request streams as the engine runs them: what a stream needs of each resource
(``MemStream``), streams served side by side (``concurrent``, ``write_range``), and a
pipelined stage over streams, compute and a feeding transfer (``stage``): one flow whose
end the flow network decides next to everything else running."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from components.memory.digest import lines_of
from components.memory.streams import Geometry, as_int64
from components.memory.write_stream import WriteStream
from components.sim.flows import Flow
from components.sim.loaded import FlowLoad
from components.sim.schedule import Stage


class StreamDevice(Protocol):
    """What a stream needs of the device it runs on (components.memory.base.MemoryDevice)."""

    path: str
    controllers: int
    geometry: Geometry

    def resource_names(self) -> list[str]: ...

    def write(
        self, addresses: np.ndarray, size: int, outstanding: int | None = None
    ) -> MemStream: ...


@dataclass(eq=False)
class MemStream:
    """What one request stream needs of a device (see the module docstring)."""

    device: StreamDevice
    needs: dict[str, float]
    bytes: dict[str, float]
    min_ticks: float
    latency: int
    requests: int
    gates: list = field(default_factory=list)
    writes: list[WriteStream] = field(default_factory=list)
    turn: float | None = None  # media time per request, under ``requests`` arbitration
    idle_needs: dict[str, float] | None = None  # needs with an empty WPQ, where they differ
    load: FlowLoad | None = None  # load-dependent service (components/sim/loaded.py)


def with_needs(stream: MemStream, added: dict[str, float], **changes) -> MemStream:
    """The stream needing ``added`` besides what it needs (a path in front of the
    device, a requester's own resource), with or without the WPQ's help alike; other
    fields as ``changes`` give them."""
    idle = stream.idle_needs
    return replace(
        stream,
        needs=add_needs([stream.needs, added]),
        idle_needs=add_needs([idle, added]) if idle is not None else None,
        **changes,
    )


def owned_by(stream: MemStream, owner: str) -> MemStream:
    """The stream as one requester's: its load, and the drains of its posted writes,
    count that requester once on a resource however many of them are there
    (components/sim/loaded.py)."""
    if stream.load is None:
        return stream
    for write in stream.writes:
        if write.drain.load is not None:
            write.drain.load = replace(write.drain.load, owner=owner)
    return replace(stream, load=replace(stream.load, owner=owner))


def write_range(
    device: StreamDevice, start: int, nbytes: int, burst: int, outstanding: int | None = None
) -> MemStream:
    """Bytes [start, start + nbytes) written in bursts that never cross a burst boundary
    (the AXI 4 KiB rule DMA engines and page-wise copies follow): a head up to the first
    boundary, whole bursts, and a tail that stops at the end of the range. They are
    issued in address order, each part over its bytes' share of the flow's progress, so
    a flow stopped early has written a prefix of the range (a relaxed MLP log slice
    counts on it), not a share of every part."""
    end = start + nbytes
    first = min(-(-start // burst) * burst, end)
    last = max(end // burst * burst, first)
    count = (last - first) // burst
    parts = [
        device.write(np.array([start], dtype=np.int64), first - start, outstanding)
        if first > start
        else None,
        device.write(first + np.arange(count, dtype=np.int64) * burst, burst, outstanding)
        if count
        else None,
        device.write(np.array([last], dtype=np.int64), end - last, outstanding)
        if end > last
        else None,
    ]
    bounds = [start, first, last, end]
    for part, lo, hi in zip(parts, bounds[:-1], bounds[1:], strict=True):
        for writes in part.writes if part is not None else []:
            writes.share = ((lo - start) / nbytes, (hi - start) / nbytes)
    live = [part for part in parts if part is not None]
    return concurrent(*live) if live else device.write(np.zeros(0, dtype=np.int64), burst)


def concurrent(*streams: MemStream) -> MemStream:
    """Streams served side by side on different devices as one (a cache and its
    backing store): needs add up, the slower latency and window count."""
    live = [s for s in streams if s.requests]
    if not live:
        return streams[0]
    return MemStream(
        live[0].device,
        add_needs([s.needs for s in live]),
        add_needs([s.bytes for s in live]),
        max(s.min_ticks for s in live),
        max(s.latency for s in live),
        sum(s.requests for s in live),
        [g for s in live for g in s.gates],
        [w for s in live for w in s.writes],
        _turn_per_request(live),
        add_needs([s.idle_needs or s.needs for s in live])
        if any(s.idle_needs is not None for s in live)
        else None,
        _heaviest_load(live),
    )


def split_stream(stream: MemStream, addresses: np.ndarray, starts: np.ndarray) -> list[MemStream]:
    """A read stream of ``addresses`` cut into the consecutive parts that begin at
    request positions ``starts`` (the first 0), in issue order: each part needs the
    share of every controller's time that its requests there make of the stream's, and
    the requester's bound in proportion to its requests; the last part keeps the
    stream's gates and the latency of its last request (stats stay booked once, by the
    whole stream)."""
    device, count = stream.device, addresses.size
    geometry = device.geometry
    ctrl = geometry.ctrl(lines_of(as_int64(addresses), geometry.unit))
    part = np.searchsorted(starts, np.arange(count), side="right") - 1
    n = device.controllers
    per_part = np.bincount(part * n + ctrl, minlength=starts.size * n).reshape(-1, n)
    share = per_part / np.maximum(per_part.sum(axis=0), 1)
    names = device.resource_names()
    sizes = np.diff(np.r_[starts, count])
    parts = []
    for j, requests in enumerate(sizes.tolist()):
        last = j == starts.size - 1
        scale = {name: float(share[j, c]) for c, name in enumerate(names)}
        parts.append(
            MemStream(
                device,
                {k: v * scale.get(k, requests / count) for k, v in stream.needs.items()},
                {k: v * scale.get(k, requests / count) for k, v in stream.bytes.items()},
                stream.min_ticks * requests / count,
                stream.latency if last else 0,
                int(requests),
                list(stream.gates) if last else [],
                turn=stream.turn,
                load=stream.load,
            )
        )
    return parts


def add_needs(parts: list[dict[str, float]]) -> dict[str, float]:
    """Needs (or bytes) per resource, added over the parts."""
    total: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + value
    return total


def _turn_per_request(streams: list[MemStream]) -> float | None:
    """Streams served as one take one turn per request each, so their combined media
    time per request is the request-weighted mean: a record's one-request header does
    not lend its line write's cost to the thousands of small entries beside it."""
    turned = [s for s in streams if s.turn is not None]
    if not turned:
        return None
    return sum(s.turn * s.requests for s in turned) / sum(s.requests for s in turned)


def stage(
    *streams: MemStream,
    compute: dict[str, float] | None = None,
    latency: int = 0,
    along: Stage | None = None,
) -> Stage:
    """One pipelined stage over memory streams (and compute, and ``along``: a transfer
    feeding them): every stream's requests, the arithmetic and the transfer flow
    together, so the stage lasts as long as its most loaded resource under sharing; the
    first request's latencies (the transfer, then each stream in turn, as a row is read,
    then computed on, then written) come once, at the end."""
    feeding = along.flows if along is not None else []
    others = [f.needs for f in feeding] + [compute or {}]
    needs = add_needs([s.needs for s in streams] + others)
    nbytes = add_needs([s.bytes for s in streams] + [f.bytes for f in feeding])
    min_ticks = max([s.min_ticks for s in streams] + [f.min_ticks for f in feeding], default=0.0)
    weight = _stage_weight(streams, max(needs.values(), default=0.0))
    alone = None
    if any(s.idle_needs is not None for s in streams):
        idle = [s.idle_needs or s.needs for s in streams]
        alone = add_needs(idle + others)
    flow = Flow(
        needs,
        min_ticks=min_ticks,
        weight=weight,
        bytes=nbytes,
        alone_needs=alone,
        load=_heaviest_load(streams),
    )
    offset = along.latency if along is not None else 0
    gates = list(along.gates) if along is not None else []
    for s in streams:
        for writes in s.writes:
            writes.attach(flow, offset)
        offset += s.latency if s.requests else 0
        gates += s.gates
    return Stage([flow], latency + offset, gates)


def _stage_weight(streams: tuple[MemStream, ...], scale: float) -> float:
    """The weight of a stage's flow. A flow's share is counted on its most-needed
    resource (``scale``); under ``requests`` arbitration its share of the controller its
    heaviest stream needs most must be one turn per request there, so the turn is
    scaled up when something else (a link) is the flow's most-needed resource."""
    live = [s for s in streams if s.needs]
    if not live:
        return 1.0
    heaviest = max(live, key=lambda s: max(s.needs.values()))
    if heaviest.turn is None:
        return 1.0
    return heaviest.turn * scale / max(heaviest.needs.values())


def _heaviest_load(streams) -> FlowLoad | None:
    """The load of the stream that needs most of one resource: a flow pipelining several
    streams is served as fast as its heaviest one lets it."""
    live = [s for s in streams if s.load is not None and s.needs]
    if not live:
        return None
    return max(live, key=lambda s: max(s.needs.values())).load
