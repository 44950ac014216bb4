"""A posted write stream followed as its flows run: when the controller's write pending
queue (WPQ) accepts each request, when each persists (ADR: at acceptance; eADR/GPF: at
issue), and the drain of what the WPQ holds afterwards (components/memory/base.py
explains the device model it belongs to)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from components.memory.streams import last_write_keys
from components.sim.flows import Flow


class PostingDevice(Protocol):
    """What a posted write stream follows on its device (components.memory.base's
    MemoryDevice): its WPQ, its persistence domain, who listens for persisted writes,
    and the streams still draining."""

    path: str
    write_queue: int
    write_latency: int
    write_listeners: list
    active_writes: list
    event_source: Callable[[], object] | None

    def by_resource(self, per_ctrl: np.ndarray) -> dict[str, float]: ...

    def effective_domain(self) -> str: ...


@dataclass(frozen=True)
class PersistedWrites:
    """Requests of one write stream and the tick each entered the persistence domain."""

    owner: int | None
    addresses: np.ndarray
    size: int
    ticks: np.ndarray
    issued: int  # tick the stream's first request was issued


_NOTHING = np.empty(0, dtype=np.int64)


def _no_accept() -> np.ndarray:
    """A drained stream's acceptance: its per-request arrays are gone."""
    return _NOTHING


class WriteStream:
    """A write stream's acceptance, persistence and drain, followed as its flows run.

    ``accept``: computes, per request, the progress of the requester-visible flow at
    which the WPQ has room for it (asked for only when a flow stops early or someone
    listens for persist ticks); ``issue_step``: the ticks between requests its window
    lets the requester issue on an idle device; ``key``: per media write (``lines``),
    its drain position (in (0, 1] within the visible flow, in (1, 2] within the drain
    flow that follows). Each is on the stream's own progress, which is its flow's over
    ``share`` (all of it, unless set: streams of a flow are served side by side, except
    write_range's parts, which go one after another)."""

    def __init__(
        self,
        device: PostingDevice,
        addresses: np.ndarray,
        size: int,
        accept: Callable[[], np.ndarray],
        issue_step: float,
        lines: np.ndarray,
        key: np.ndarray,
        drain_needs: dict[str, float],
        writes: np.ndarray,
        per_write: np.ndarray,
        visible: np.ndarray,
        span: tuple[int, int],
        window: float = math.inf,
    ) -> None:
        self.device, self.addresses, self.size = device, addresses, size
        self.window = window  # the requester's outstanding requests (inf: no bound)
        self.writes, self.per_write = writes, per_write  # per controller: media writes, ticks
        self.held = writes - visible  # per controller, writes that wait in the WPQ to drain
        self.accept, self.issue_step, self.lines, self.key = accept, issue_step, lines, key
        self.span = span  # the first and last line it writes
        self.drain = Flow(drain_needs, label=f"{device.path}.drain")
        self.visible: Flow | None = None
        self.offset = 0  # ticks between the flow's progress and this stream's issue
        self.persisted = 0  # requests accepted (all, unless the flow was stopped)
        self.share = (0.0, 1.0)  # the part of its flow's progress that issues it
        self._waiting: list[tuple[float, object]] = []
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self.drain.on_end.append(self._drained)

    def attach(self, flow: Flow, offset: int) -> None:
        """Follow ``flow`` (the stream's visible part, maybe pipelined with others)."""
        self.visible, self.offset = flow, offset
        flow.then.append(self.drain)
        flow.on_end.append(self._accepted)
        flow.writes.append(self)

    def position(self) -> float:
        """How far the stream has drained, on the scale of ``key``."""
        if self.drain.end >= 0:
            return 2.0
        if self.drain.start >= 0:
            return 1.0 + self.drain.done
        return self._own(self.visible.done) if self.visible is not None else 0.0

    def pending_lines(self) -> tuple[np.ndarray, np.ndarray]:
        """The lines whose writes have not all drained, sorted, each with its last
        write's drain key. A line is pending exactly while that key is ahead of the
        drain: while most of the stream is pending (a read beside the whole stream) the
        stream's lines are sorted once and filtered; a drain's tail is sorted alone."""
        position = self.position() + 1e-12
        if self._last is None:
            pending = self.key > position
            if 2 * int(pending.sum()) < self.key.size:
                return last_write_keys(self.lines[pending], self.key[pending])
            self._last = last_write_keys(self.lines, self.key)
        waiting, keys = self._last
        live = keys > position
        return waiting[live], keys[live]

    def drained(self, key: float):
        """Event that fires once every line up to drain position ``key`` has drained."""
        if key <= 1.0:
            return self.visible.network.milestone(self.visible, self._on_flow(key))
        event = self.device.event_source()
        if self.drain.start >= 0:
            chained = self.drain.network.milestone(self.drain, key - 1.0)
            chained.callbacks.append(lambda _e: event.succeed())
        else:
            self._waiting.append((key - 1.0, event))
        return event

    @property
    def backlogged(self) -> np.ndarray:
        """Per controller: writes wait for drained slots, so the visible flow keeps the
        WPQ full while it runs."""
        return self.held < self.writes

    def idle_correction(self, progress: float) -> dict[str, float]:
        """For a stream stopped at ``progress`` of its visible flow: what the writes it
        got accepted would need on an idle device (an empty WPQ takes the first
        ``write_queue`` of them at once), less the share ``progress`` of its whole idle
        need that the flow's own alone time counts."""
        queue = self.device.write_queue
        progress = self._own(progress)
        moved = self.held + progress * (self.writes - self.held)
        reached = self.per_write * np.maximum(moved - queue, 0)
        whole = self.per_write * np.maximum(self.writes - queue, 0)
        return self.device.by_resource(reached - progress * whole)

    def _accepted(self, flow: Flow) -> None:
        """Persist ticks from the visible flow's progress, for whoever listens; hand
        over to the drain. A flow stopped early (its window closed) wrote only the
        requests it reached; one that ran to its end wrote them all."""
        listeners = self.device.write_listeners
        self.persisted = int(self.addresses.size)
        if listeners or flow.done < 1.0:
            accept = self._on_flow(self.accept())
            reached = accept <= flow.done + 1e-9
            self.persisted = int(reached.sum())
            if listeners:
                persisted = self._persist_ticks(flow, accept, reached)
                for listener in listeners:
                    listener(persisted)
        network = flow.network
        if flow.done < 1.0:  # stopped: what reached the WPQ still drains
            done = self._own(flow.done)
            scaled = {k: v * done for k, v in self.drain.needs.items()}
            self.drain.needs = {k: v for k, v in scaled.items() if v > 0}
            self.drain.owner = flow.owner
            network.start(self.drain)
        pending, self._waiting = self._waiting, []
        for fraction, event in pending:
            chained = network.milestone(self.drain, fraction)
            chained.callbacks.append(lambda _e, event=event: event.succeed())

    def _persist_ticks(self, flow: Flow, accept: np.ndarray, reached: np.ndarray):
        """The requests ``reached`` and the tick each entered the persistence domain."""
        # issued not before the streams ahead of it in its flow
        begin = flow.start if self.share[0] == 0 else float(flow.tick_at(self.share[0]))
        idle_issue = begin + np.arange(accept.size) * self.issue_step
        accepted_all = np.maximum(flow.tick_at(np.minimum(accept, flow.done)), idle_issue)
        accepted = accepted_all[reached]
        if self.device.effective_domain() == "adr":  # durable once the WPQ has accepted it
            ticks = accepted + self.offset + self.device.write_latency
        else:  # eADR / GPF: durable once issued (caches and buffers are in the domain)
            issued = self._issued(flow, idle_issue, accepted_all)[reached]
            ticks = np.minimum(issued, accepted) + self.offset
        return PersistedWrites(
            flow.owner,
            self.addresses[reached],
            self.size,
            np.ceil(ticks).astype(np.int64),
            flow.start + self.offset,
        )

    def _issued(self, flow: Flow, idle: np.ndarray, accepted: np.ndarray) -> np.ndarray:
        """When each request really left the issuer, from the served progress: a
        requester with ``window`` requests in flight issues request k once request
        k - window has been accepted (not before its idle schedule, nor before request
        k - 1: requests leave in order), so load that
        slows acceptance delays the issue; one without a window issues as the stream is
        served (request k at the progress of the k requests before it)."""
        count = idle.size
        if not math.isfinite(self.window):
            return flow.tick_at(self._on_flow(np.arange(count) / max(count, 1)))
        lag = int(self.window)
        issued = idle.copy()
        if lag < count:
            issued[lag:] = np.maximum(idle[lag:], accepted[: count - lag])
        return np.maximum.accumulate(issued)  # requests leave in order

    def _on_flow(self, own: np.ndarray | float) -> np.ndarray | float:
        """The flow's progress at the stream's own progress ``own``."""
        lo, hi = self.share
        return lo + own * (hi - lo)

    def _own(self, done: float) -> float:
        """The stream's own progress at the flow's ``done``."""
        lo, hi = self.share
        return min(max((done - lo) / (hi - lo), 0.0), 1.0)

    def _drained(self, _flow: Flow) -> None:
        """No read waits on a drained stream: its per-request arrays go now, not when
        the cycle collector next reaches the flow graph (they held 40 MB a batch of
        RM2 on cxl until a full collection)."""
        self.device.active_writes.remove(self)
        self.addresses = self.lines = self.key = _NOTHING
        self.accept = _no_accept
        self._last = None
