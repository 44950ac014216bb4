"""Load-dependent service: resources that slow with their requesters, windows that stretch
with queueing.

A device may tell the flow network, per flow (``Flow.load``), that its controllers do not
serve at a fixed speed: measured Optane DIMMs lose bandwidth as more requesters share
one (XPBuffer and write-combining thrashing; Yang et al. FAST'20 §3.3, Fig. 4), and a
request's latency rises with the load others put on the DIMM before it saturates
(Fig. 6). The device says what a flow is (how many requesters it stands for, the curve of
its kind of access, its idle per-request latency, the service time a request queues
behind); the network decides, from the flows active at the moment, what each resource
can serve and how long each window waits. Flows without a load never reach this module:
their rates are the plain max-min fill's.

Two terms, both recomputed whenever the active set changes:

- **Thrashing.** The pressure on a resource is the requesters there. A requester keeps
  ``spans`` requests in flight, each on a resource drawn in proportion to the flow's
  needs of them, so it is present on a resource with share s of the needs with
  probability ``1 - (1 - s) ** spans``: a thread whose fill buffers hold three 256 B
  writes has writes pending on up to three interleaved DIMMs at once, and each DIMM
  sees the interleaved lines of that many more threads (docs/calibration.md). ``spans``
  1 is the plain spread in proportion to the needs. A flow's work on a resource under
  pressure K takes ``min(1 + slope * max(K - onset, 0), cap)`` times its idle media time
  (its curve); the resource's slowdown is that factor averaged over the work it holds
  (flows without a curve count 1).
- **Queueing.** A request of a window-bound flow waits behind the requests of every other
  requester at the resource: M/D/1 (Pollaczek-Khinchine, deterministic service) at the
  utilisation the others make, ``service * rho / (2 (1 - rho))``. Its window bound
  stretches by ``(latency + wait) / latency``. The utilisation depends on the rates and the
  rates on the bounds, so the fill is repeated until the bounds hold still: each bound
  moves half way to its target, and half as far again each time it overshoots (the
  target falls as the bound rises, so this brackets the fixed point).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

RHO_MAX = 0.99
"""Utilisation the queueing term is evaluated at most: M/D/1's wait diverges at 1, where
the max-min fill's saturation takes over."""
ROUNDS = 60
TOLERANCE = 1e-4
"""Relative change of every window bound below which the fill stops repeating."""


@dataclass(frozen=True)
class FlowLoad:
    """What a flow is to a load-dependent device (see the module docstring)."""

    requesters: float  # requesters (threads) the flow stands for
    onset: float  # requesters on a resource before its service slows
    slope: float  # extra media time per requester past the onset (fraction)
    latency: float  # ticks: idle mean latency of one request (its window bound's unit)
    service: float  # ticks: service time a request queues behind (0: no queueing)
    resources: frozenset[str]  # the resources whose service depends on the load
    spans: float = 1.0  # requests one requester keeps in flight on distinct resources
    owner: str = ""  # the requester whose flows these are ("": the flow's own)
    cap: float = float("inf")  # the largest slowdown thrashing gives the flow's work


def solve(state, fill: Callable) -> tuple[np.ndarray, np.ndarray]:
    """Rates and bottlenecks of the active flows in ``state`` (flows._Active) with the
    thrashing and queueing terms of their loads; ``fill(state)`` is the network's plain
    fill, which reads the needs, scales and window bounds of the state it is given."""
    loads = [flow.load for flow in state.flows]
    entry_flow, entry_res = state.flow, state.resource
    names = state.names
    loaded = np.concatenate([_mask(flow) for flow in state.flows] or [np.zeros(0, bool)])
    field = np.array(
        [
            (ld.requesters, ld.onset, ld.slope, ld.latency, ld.service, ld.spans, ld.cap)
            if ld is not None
            else (0.0,) * 5 + (1.0, np.inf)
            for ld in loads
        ],
        dtype=float,
    ).reshape(-1, 7)
    requesters, onset, slope, latency, service, spans, cap = field.T
    width, count = len(names), len(state.flows)
    spread = np.bincount(entry_flow, weights=np.where(loaded, state.need, 0.0), minlength=count)
    share = np.divide(state.need, spread[entry_flow], out=np.zeros_like(state.need), where=loaded)
    reach = spans[entry_flow]
    present = np.where(reach == 1.0, share, 1.0 - (1.0 - share) ** reach)
    if any(ld is not None and ld.owner for ld in loads):
        pressure = _owned_pressure(loads, entry_flow, entry_res, present, requesters, width)
    else:
        pressure = np.bincount(entry_res, weights=present * requesters[entry_flow], minlength=width)
    excess = np.maximum(pressure[entry_res] - onset[entry_flow], 0.0)
    factor = np.where(loaded, np.minimum(1.0 + slope[entry_flow] * excess, cap[entry_flow]), 1.0)
    held = np.bincount(entry_res, weights=state.need, minlength=width)
    slowed = np.bincount(entry_res, weights=state.need * factor, minlength=width)
    slowdown = np.divide(slowed, held, out=np.ones(width), where=held > 0)

    shaped = copy.copy(state)
    shaped.need = state.need * slowdown[entry_res]
    scale = np.zeros(count)
    np.maximum.at(scale, entry_flow, shaped.need)
    shaped.scale = np.where(state.count > 0, scale, state.scale)

    waits = (service > 0) & (latency > 0) & (state.min_ticks > 0)
    shaped.min_ticks = state.min_ticks.copy()
    rate, bottleneck = fill(shaped)
    if not waits.any():
        return rate, bottleneck
    queued = loaded & waits[entry_flow]
    step, last = np.full(count, 0.5), np.zeros(count)
    for _ in range(ROUNDS):
        use = shaped.need * rate[entry_flow]
        busy = np.bincount(entry_res, weights=use, minlength=width)
        own = use / np.maximum(requesters[entry_flow], 1.0)
        rho = np.clip(busy[entry_res] - own, 0.0, RHO_MAX)
        wait = service[entry_flow] * rho / (2.0 * (1.0 - rho))
        mean_wait = np.bincount(
            entry_flow, weights=np.where(queued, share * wait, 0.0), minlength=count
        )
        target = np.where(
            waits,
            state.min_ticks * (latency + mean_wait) / np.where(waits, latency, 1.0),
            state.min_ticks,
        )
        residual = target - shaped.min_ticks
        if np.all(np.abs(residual) <= TOLERANCE * np.abs(target)):
            break
        # the target falls as the bound rises: where it overshot, halve the step
        step = np.where(residual * last < 0, 0.5 * step, step)
        last = residual
        shaped.min_ticks = shaped.min_ticks + step * residual
        rate, bottleneck = fill(shaped)
    return rate, bottleneck


def _owned_pressure(loads, entry_flow, entry_res, present, requesters, width) -> np.ndarray:
    """Pressure where flows name their requester: a requester's flows on a resource (a
    thread's request and the drains of its earlier posted writes) make it present there
    once, with the probability that any of them is, not once per flow."""
    names: dict[str, int] = {}
    owner = np.array(
        [
            names.setdefault(ld.owner, len(names)) if ld is not None and ld.owner else -1
            for ld in loads
        ],
        dtype=np.int64,
    )
    solo = owner < 0
    owner[solo] = len(names) + np.flatnonzero(solo)  # an unnamed flow is its own
    group = owner[entry_flow] * width + entry_res
    keys, index = np.unique(group, return_inverse=True)
    with np.errstate(divide="ignore"):
        absent = np.bincount(index, weights=np.log1p(-present), minlength=keys.size)
    weight = np.zeros(keys.size)
    np.maximum.at(weight, index, np.where(present > 0, requesters[entry_flow], 0.0))
    return np.bincount(keys % width, weights=-np.expm1(absent) * weight, minlength=width)


def _mask(flow) -> np.ndarray:
    """Per need of the flow (its entries, in its needs' order): whether it is on a
    load-dependent resource. Kept on the flow: its needs are fixed while it runs."""
    mask = flow.__dict__.get("_load_mask")
    if mask is None:
        resources = flow.load.resources if flow.load is not None else frozenset()
        mask = np.fromiter((r in resources for r in flow.needs), dtype=bool, count=len(flow.needs))
        flow._load_mask = mask
    return mask
