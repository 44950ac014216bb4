"""The other schedules of one recorded run: concurrent ops finishing in the other order.

The timing model produces ONE schedule; two ops that run at once and that no chain of
board dependencies orders (CXL-B's embedding and MLP undo logs of a batch, both
started by its lookup) finish in whichever order the devices' loads decide that day. A
recovery whose correctness depends on that order must be exercised in both. For every
such pair that wrote to PMEM, where op X finished after op Y, the variant runs X faster
so that it completes before Y's last epoch (its commit) is issued: X's pieces keep their
order and their start, their ticks scaled toward X's start (as if the device had served
X first; nothing X waited for moves, and every op that waited for X still starts after
it). The variant's states that differ from the recorded schedule lie between X's new
commit and Y's end: the window explored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from components.persistence.journal import Journal
from components.sim.schedule import OpRecord


@dataclass(frozen=True)
class Reordered:
    """One variant schedule: ``first`` now completes before ``second`` commits (a
    delayed commit: ``first`` is ``second``; a late device: neither); ``moved``: the ops
    that now end later (uid -> end tick), whose guarantees move with them."""

    journal: Journal
    window: tuple[int, int]
    first: OpRecord | None
    second: OpRecord | None
    moved: dict[int, int] | None = None


def ancestors(records: list[OpRecord]) -> dict[int, set[int]]:
    """Every op's transitive dependencies (uids), in record order (deps come first)."""
    out: dict[int, set[int]] = {}
    for r in sorted(records, key=lambda r: r.uid):
        seen: set[int] = set()
        for d in r.deps:
            seen |= {d} | out.get(d, set())
        out[r.uid] = seen
    return out


def unordered_pairs(journal: Journal, records: list[OpRecord]) -> list[tuple[OpRecord, OpRecord]]:
    """(earlier-finishing, later-finishing) pairs of PMEM-writing ops that overlapped in
    time and that no dependency chain orders."""
    writers = set(np.unique(journal.op).tolist())
    ops = sorted(
        (r for r in records if r.uid in writers and r.end > r.start), key=lambda r: r.start
    )
    before = ancestors(records)
    pairs = []
    for i, a in enumerate(ops):
        for b in ops[i + 1 :]:
            if b.start >= a.end:
                break
            if a.uid in before[b.uid] or b.uid in before[a.uid]:
                continue
            pairs.append((a, b) if a.end <= b.end else (b, a))
    return pairs


def reordered_schedules(journal: Journal, records: list[OpRecord]) -> Iterator[Reordered | None]:
    """For every unordered concurrent pair, the variant in which the op that finished
    later completes first (None for a pair that cannot be flipped this way: the later
    op started after the earlier one's commit began)."""
    for y, x in unordered_pairs(journal, records):
        ys = np.flatnonzero(journal.op == y.uid)
        commit = int(journal.lo[ys[journal.epoch[ys] == journal.epoch[ys].max()]].min())
        target = x.start + (commit - x.start) // 2
        if target <= x.start or x.end <= x.start:
            yield None
            continue
        xs = journal.op == x.uid
        scale = (target - x.start) / (x.end - x.start)
        times = {}
        for name in ("lo", "p", "hi"):
            col = getattr(journal, name).copy()
            col[xs] = x.start + np.floor((col[xs] - x.start) * scale).astype(np.int64)
            times[name] = col
        variant = replace(journal, **times, epoch=_fence_order(journal.epoch, times["hi"]))
        xe = np.flatnonzero(xs)
        last = xe[journal.epoch[xe] == journal.epoch[xe].max()]
        window = (int(times["lo"][last].min()), int(journal.hi[ys].max()))
        yield Reordered(variant, window, x, y)


def delayed_commits(
    journal: Journal, records: list[OpRecord], names: tuple[str, ...] = ("commit", "mlp_commit")
) -> Iterator[Reordered | None]:
    """For every cross-device commit op, the variant in which its word persists as late
    as the ops that wait for it allow (just before the first of them starts): every
    device's writes it does not order (the devices' updates, their next logs' records)
    then race it. Nothing but the commit orders persists across devices, so a recovery
    that trusts a device's own flags where only the commit may be trusted is caught
    here even when the recorded timing always committed first."""
    starts: dict[int, int] = {}
    for r in records:
        for d in r.deps:
            starts[d] = min(starts.get(d, r.start), r.start)
    for x in records:
        if x.name not in names:
            continue
        xs = journal.op == x.uid
        if not xs.any():
            continue
        latest = starts.get(x.uid, journal.end + 1) - 1
        delay = latest - int(journal.hi[xs].max())
        if delay <= 0:
            yield None
            continue
        times = {}
        for name in ("lo", "p", "hi"):
            col = getattr(journal, name).copy()
            col[xs] += delay
            times[name] = col
        variant = replace(journal, **times, epoch=_fence_order(journal.epoch, times["hi"]))
        yield Reordered(variant, (x.start, latest), x, x, {x.uid: latest})


def late_devices(
    journal: Journal, records: list[OpRecord], device_of: Callable[[str | None], int | None]
) -> Iterator[Reordered | None]:
    """For every device (``device_of`` an op's resource; None: a single device's, or the
    GPUs'), the variant in which that device is slow: each of its ops that writes to
    PMEM (logs, flags, the coordinator's commits and acknowledgements) persists as late
    as the ops that wait for it allow (and before the next op its unit serves), latest
    first (an op waiting for another of the device's ops moves first, so a chain of
    them slides together), every other device's ops as recorded. Nothing but the
    board's dependencies orders persists across devices: a commit that does not really
    wait for some device races that device's logs here, even when identical devices
    always finish them first."""
    writers = set(np.unique(journal.op).tolist())
    ran = [r for r in records if r.end >= 0]
    waiting: dict[int, list[OpRecord]] = {}
    for r in ran:
        for d in r.deps:
            waiting.setdefault(d, []).append(r)
    units: dict[str, list[OpRecord]] = {}
    for r in sorted(ran, key=lambda r: (r.start, r.uid)):
        if r.resource:
            units.setdefault(r.resource, []).append(r)
    for queue in units.values():  # a unit serves its ops in turn, however slow it is
        for r, after in zip(queue, queue[1:], strict=False):
            waiting.setdefault(r.uid, []).append(after)
    last = max((r.end for r in ran), default=0)
    groups: dict[int | None, list[OpRecord]] = {}
    for r in ran:
        if r.uid in writers:
            groups.setdefault(device_of(r.resource), []).append(r)
    for device in sorted(groups, key=lambda m: -1 if m is None else m):
        shift: dict[int, int] = {}
        for x in sorted(groups[device], key=lambda r: -r.uid):  # dependents come later
            starts = [w.start + shift.get(w.uid, 0) for w in waiting.get(x.uid, ())]
            shift[x.uid] = max(min(starts, default=last + 1) - 1 - x.end, 0)
        shift = {uid: delay for uid, delay in shift.items() if delay > 0}
        if not shift:
            yield None
            continue
        uids = np.array(sorted(shift), dtype=np.int64)
        at = np.clip(np.searchsorted(uids, journal.op), 0, uids.size - 1)
        hit = uids[at] == journal.op
        delay = np.where(hit, np.array([shift[u] for u in uids.tolist()])[at], 0)
        times = {name: getattr(journal, name) + delay for name in ("lo", "p", "hi")}
        variant = replace(journal, **times, epoch=_fence_order(journal.epoch, times["hi"]))
        window = (int(journal.lo[hit].min()), int(times["hi"][hit].max()))
        ends = {r.uid: r.end + shift[r.uid] for r in groups[device] if r.uid in shift}
        yield Reordered(variant, window, None, None, ends)


def _fence_order(epoch: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Epoch ids renumbered in the order of their (moved) fences, as the journal keeps
    them (two pieces writing one word: the later epoch's wins)."""
    ids, inverse = np.unique(epoch, return_inverse=True)
    fence = np.zeros(ids.size, dtype=np.int64)
    np.maximum.at(fence, inverse, hi)
    rank = np.empty(ids.size, dtype=np.int64)
    rank[np.lexsort((ids, fence))] = np.arange(ids.size)
    return rank[inverse]
