"""What the built-in engine priced, stage by stage, for gem5 to replay (pure: no m5).

A ``RecordingScheduler`` is the engine's Scheduler that also keeps, for every op, what
it waited for (its dependencies, the op it starts with, the op whose creation it
waited for) and each stage it ran: when it started and ended, its latency, what its
flows needed of each resource and how long it would have taken alone (``alone_ticks``),
and the request
streams the memory devices announced while the stage was being built (their
``stream_listeners``: kind, addresses, size, window), tagged with the op being built
(``scheduler.current``). A stage stopped early by its window (the relaxed MLP-log
slice) keeps how far it got: the replay moves only what the built-in engine moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.memory.base import IssuedStream, MemoryDevice
from components.memory.stages import add_needs
from components.sim.schedule import OpRecord, Scheduler, Stage, alone_ticks


@dataclass
class StreamRecord:
    """One request stream as a device was asked to time it."""

    device: MemoryDevice
    kind: str  # "read" or "write"
    addresses: np.ndarray
    size: int
    outstanding: int | None
    reached: int = -1  # requests it got through (-1: all of them)

    @property
    def requests(self) -> int:
        return int(self.addresses.size) if self.reached < 0 else self.reached


@dataclass
class StageRecord:
    """One stage of an op as the built-in engine ran it."""

    start: int
    latency: int
    alone: int
    needs: dict[str, float]
    min_ticks: float  # the longest bound a flow put on itself (a window, a fence chain)
    streams: list[StreamRecord] = field(default_factory=list)
    end: int = -1
    progress: float = 1.0


@dataclass
class OpTrace:
    """An op's record (start, end, name, batch, unit), what it waited for and its stages.
    ``created_after``: the op whose end let the host create this op's batch."""

    record: OpRecord
    deps: tuple[int, ...] = ()
    start_with: int | None = None
    created_after: int | None = None
    stages: list[StageRecord] = field(default_factory=list)

    @property
    def builtin_ticks(self) -> int:
        return self.record.end - self.record.start

    @property
    def builtin_alone(self) -> int:
        return sum(stage.alone for stage in self.stages)


class RecordingScheduler(Scheduler):
    """The engine's scheduler, keeping each op's stages and announced streams."""

    def __init__(self, engine) -> None:
        super().__init__(engine)
        self.traces: dict[int, OpTrace] = {}
        self.created_after: int | None = None  # set by the host loop before each batch
        self._pending: dict[int, list[StreamRecord]] = {}

    def op(self, name, category, batch, resource, body, deps=(), background=False,
           start_with=None, until=None):  # fmt: skip
        deps = list(deps)
        handle = super().op(
            name, category, batch, resource, body, deps, background, start_with, until
        )
        self.traces[handle.record.uid] = OpTrace(
            handle.record,
            tuple(dep.record.uid for dep in deps),
            start_with.record.uid if start_with is not None else None,
            self.created_after,
        )
        return handle

    def listen(self, device: MemoryDevice) -> None:
        """Record every stream ``device`` is asked to time, with the op building it."""

        def heard(issued: IssuedStream) -> None:
            if self.current is None:
                raise RuntimeError(f"{device.path}: a stream was issued outside any op")
            record = StreamRecord(
                device, issued.kind, issued.addresses, issued.size, issued.outstanding
            )
            self._pending.setdefault(self.current, []).append(record)

        device.stream_listeners.append(heard)

    def _stage(self, record: OpRecord, stage: Stage, flows, until):
        trace = self.traces[record.uid]
        needs = add_needs([flow.needs for flow in stage.flows])
        captured = StageRecord(
            self.engine.now,
            stage.latency,
            alone_ticks(stage),
            needs,
            max((flow.min_ticks for flow in stage.flows), default=0.0),
            self._pending.pop(record.uid, []),
        )
        trace.stages.append(captured)
        yield from super()._stage(record, stage, flows, until)
        captured.end = self.engine.now
        captured.progress = stage.progress
        if stage.progress < 1.0:
            _truncate(captured, stage)


def _truncate(captured: StageRecord, stage: Stage) -> None:
    """A stage its window stopped: writes keep the requests the WPQ accepted, reads the
    share of the stream the flow got through; its alone time shrinks alike."""
    accepted = {
        id(writes.addresses): writes.persisted for flow in stage.flows for writes in flow.writes
    }
    for stream in captured.streams:
        if stream.kind == "write" and id(stream.addresses) in accepted:
            stream.reached = int(accepted[id(stream.addresses)])
        else:
            stream.reached = int(np.ceil(stream.addresses.size * stage.progress))
    moved = max((_moved_alone(flow, stage.progress) for flow in stage.flows), default=0)
    captured.alone = round(moved)  # a stopped stage skips its latency
    captured.latency = 0


def _moved_alone(flow, progress: float) -> float:
    """Ticks the part of ``flow`` done by ``progress`` would take on an idle system: its
    needs in proportion, except its writes, of which an empty WPQ takes the first
    queue-full at once."""
    scaled = {r: v * progress for r, v in (flow.alone_needs or flow.needs).items()}
    needs = add_needs([scaled, *(writes.idle_correction(progress) for writes in flow.writes)])
    return max([flow.min_ticks * progress, *needs.values()])


def record_devices(board, scheduler: RecordingScheduler) -> None:
    """Listen to every memory device on the board."""
    for obj in board.descendants():
        if isinstance(obj, MemoryDevice):
            scheduler.listen(obj)
