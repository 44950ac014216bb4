"""Checkpoint protocols per system: what each op writes to PMEM, and how to recover.

A protocol turns a batch's functional facts (rows it updates with their old and new
values, MLP parameters before and after) into phases of writes for the ops the board
schedules, and reads a crash image back into a model state at a batch boundary.

- Redo (ssd, pmem, pcie, cxl-d): log batch N's new rows and MLPs into slot N % 2,
  set that slot's flag to N, then update in place. Recovery replays the newest
  flagged slot (idempotent) and resumes at N + 1.
- Undo (cxl-b): before batch N updates, its rows' old values go to the embedding log
  of slot N % 2 and its flag is set; the MLPs N starts from go to the MLP log of the
  same slot before the GPU overwrites them. Slot N % 2 is reused by N + 2 only after
  N + 1's checkpoint is complete. Recovery resumes from the newest batch R with both
  flags, rolling back every flagged embedding log >= R, newest first.
- Relaxed undo (cxl): embedding log as cxl-b; the MLP log is a snapshot spread over
  the slices the board schedules, alternating between two slots. Recovery resumes
  from the newest flagged embedding log R with the newest complete MLP copy <= R.
- None (dram): nothing persists; recovery restarts from the initial weights.
Every recovery ends by clearing flags beyond the resume batch, so a resumed run never
sees a log from the abandoned future; re-running it after a crash repeats the same
writes (idempotent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.persistence.image import RECORD_HEADER, CorruptImage, PmemImage, record_header
from components.persistence.journal import Phase


@dataclass
class BatchFacts:
    """What batch N changes: its sorted unique rows with old and new values, and the
    MLP parameters it starts from and ends with."""

    rows: np.ndarray
    old: np.ndarray
    new: np.ndarray
    mlp_before: np.ndarray
    mlp_after: np.ndarray


@dataclass
class Recovery:
    """A recovery's outcome and cost: resume at ``batch`` with these weights."""

    batch: int
    table: np.ndarray
    mlp: np.ndarray
    mlp_batch: int
    writes: list[tuple[int, np.ndarray]] = field(default_factory=list)
    bytes_read: int = 0

    @property
    def bytes_written(self) -> int:
        return int(sum(d.size for _, d in self.writes))


def _u64(value: int) -> np.ndarray:
    return np.array([value], dtype="<i8").view(np.uint8)


def emb_entries(layout, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(count, entry_bytes) uint8: each row id followed by its values."""
    entries = np.empty((rows.size, layout.entry_bytes), dtype=np.uint8)
    entries[:, :8] = rows.astype("<i8").reshape(-1, 1).view(np.uint8)
    entries[:, 8:] = np.ascontiguousarray(values, dtype=np.float32).view(np.uint8)
    return entries


class Protocol:
    """Base: op name -> phases of writes; recovery planning over an image."""

    system_kind = "none"

    def __init__(self, image: PmemImage) -> None:
        self.layout = image.layout

    def phases(self, op: str, batch: int, facts: BatchFacts, writes: int) -> list[Phase]:
        """Phases op ``op`` of ``batch`` writes (``writes``: device writes it made)."""
        return []

    def prepare(self, ops: list[tuple[str, int, int]], facts: dict[int, BatchFacts]) -> None:
        """See the whole run's ops (name, batch, device writes) before phases are asked."""

    def plan(self, image: PmemImage) -> Recovery:
        raise NotImplementedError

    # ----- shared pieces -------------------------------------------------------------
    def emb_log_phase(self, slot: int, batch: int, rows: np.ndarray, values: np.ndarray) -> Phase:
        lay, region = self.layout, f"emb{slot}"
        entries = emb_entries(lay, rows, values)
        phase, base = Phase(), lay.offset(region)
        for i in range(rows.size):
            phase.add(base + RECORD_HEADER + i * lay.entry_bytes, entries[i])
        phase.add(base, record_header(batch, rows.size, entries.reshape(-1)))
        return phase

    def mlp_log_writes(self, slot: int, batch: int, mlp: np.ndarray, parts: int = 1) -> list[Phase]:
        """The MLP record in ``parts`` consecutive phases, its header in the last."""
        lay, region = self.layout, f"mlp{slot}"
        payload = mlp.astype(np.float32).view(np.uint8)
        base = lay.offset(region) + RECORD_HEADER
        cuts = np.linspace(0, payload.size // 8, parts + 1).astype(np.int64) * 8
        cuts[-1] = payload.size
        phases = []
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            phase = Phase()
            phase.add(base + int(lo), payload[lo:hi])
            phases.append(phase)
        phases[-1].add(lay.offset(region), record_header(batch, mlp.size, payload))
        return phases

    def flag_phase(self, name: str, batch: int) -> Phase:
        phase = Phase()
        phase.add(self.layout.flag_offset(name), _u64(batch + 1))
        return phase

    def update_phase(self, rows: np.ndarray, values: np.ndarray) -> Phase:
        phase = Phase()
        offsets = self.layout.row_offset(rows)
        data = np.ascontiguousarray(values, dtype=np.float32)
        for i in range(rows.size):
            phase.add(int(offsets[i]), data[i])
        return phase

    def flagged(self, image: PmemImage, kind: str) -> dict[int, str]:
        """batch -> slot region for every set flag of one kind (emb or mlp)."""
        out = {}
        for slot in (0, 1):
            batch = image.flag(f"{kind}{slot}")
            if batch >= 0:
                out[batch] = f"{kind}{slot}"
        return out

    def clear_beyond(self, image: PmemImage, kind: str, batch: int) -> list:
        return [
            (self.layout.flag_offset(region), _u64(0))
            for n, region in self.flagged(image, kind).items()
            if n > batch
        ]

    def base_mlp(self, image: PmemImage) -> np.ndarray:
        return image.mlp_record("base")[1]

    def finish(self, image: PmemImage, rec: Recovery) -> Recovery:
        """Apply the planned writes and read the recovered table back from the image."""
        for offset, data in rec.writes:
            image.write(offset, data)
        rec.table = image.table().copy()
        return rec

    def recover(self, image: PmemImage) -> Recovery:
        return self.finish(image, self.plan(image))


class NoPersistence(Protocol):
    """DRAM: nothing survives; training restarts from the seeded initial weights."""

    def plan(self, image: PmemImage) -> Recovery:
        return Recovery(0, image.table(), self.base_mlp(image), 0)


class RedoProtocol(Protocol):
    """End-of-batch redo checkpoint, logged before the in-place update."""

    system_kind = "redo"
    log_ops = ("ckpt_log", "ckpt_persist")

    def phases(self, op: str, batch: int, facts: BatchFacts, writes: int) -> list[Phase]:
        slot = batch % 2
        if op in self.log_ops:
            rows = self.emb_log_phase(slot, batch, facts.rows, facts.new)
            return [
                rows,
                *self.mlp_log_writes(slot, batch, facts.mlp_after),
                self.flag_phase(f"emb{slot}", batch),
            ]
        if op == "update":
            return [self.update_phase(facts.rows, facts.new)]
        return []

    def plan(self, image: PmemImage) -> Recovery:
        flagged = self.flagged(image, "emb")
        if not flagged:
            return Recovery(0, image.table(), self.base_mlp(image), 0, bytes_read=64)
        last = max(flagged)
        region = flagged[last]
        batch, rows, values = image.emb_record(region)
        mlp_batch, mlp = image.mlp_record("mlp" + region[-1])
        if batch != last or mlp_batch != last:
            raise_corrupt(image, f"{region} holds batch {batch}/{mlp_batch}, flag says {last}")
        writes = [
            (int(off), v.view(np.uint8))
            for off, v in zip(self.layout.row_offset(rows), values, strict=True)
        ]
        read = rows.size * self.layout.entry_bytes + mlp.nbytes + 64
        return Recovery(last + 1, image.table(), mlp, last + 1, writes, read)


class UndoProtocol(Protocol):
    """CXL-B's batch-aware undo log with complete (embedding + MLP) checkpoints."""

    system_kind = "undo"

    def phases(self, op: str, batch: int, facts: BatchFacts, writes: int) -> list[Phase]:
        slot = batch % 2
        if op == "emb_log":
            return [
                self.emb_log_phase(slot, batch, facts.rows, facts.old),
                self.flag_phase(f"emb{slot}", batch),
            ]
        if op == "update":
            return [self.update_phase(facts.rows, facts.new)]
        if op == "mlp_log":
            return [
                *self.mlp_log_writes(slot, batch, facts.mlp_before),
                self.flag_phase(f"mlp{slot}", batch),
            ]
        return []

    def resume_batch(self, emb: dict[int, str], mlp: dict[int, str]) -> int:
        complete = set(emb) & set(mlp)
        return max(complete) if complete else 0

    def mlp_for(self, image: PmemImage, mlp: dict[int, str], resume: int) -> tuple[int, np.ndarray]:
        if resume in mlp:
            return image.mlp_record(mlp[resume])
        return 0, self.base_mlp(image)

    def plan(self, image: PmemImage) -> Recovery:
        emb, mlp = self.flagged(image, "emb"), self.flagged(image, "mlp")
        resume = self.resume_batch(emb, mlp)
        writes, read = [], 64
        for n in sorted((n for n in emb if n >= resume), reverse=True):
            batch, rows, values = self.rollback_record(image, emb[n])
            if batch != n:
                raise_corrupt(image, f"{emb[n]} holds batch {batch}, its flag says {n}")
            offsets = self.layout.row_offset(rows)
            writes += [(int(o), v.view(np.uint8)) for o, v in zip(offsets, values, strict=True)]
            read += rows.size * self.layout.entry_bytes
        mlp_batch, params = self.mlp_for(image, mlp, resume)
        if mlp_batch > resume:
            raise_corrupt(image, f"MLP log of batch {mlp_batch} is newer than resume {resume}")
        writes += self.clear_beyond(image, "emb", resume) + self.clear_beyond(image, "mlp", resume)
        return Recovery(resume, image.table(), params, mlp_batch, writes, read + params.nbytes)

    def rollback_record(self, image: PmemImage, region: str):
        return image.emb_record(region)


class RelaxedUndoProtocol(UndoProtocol):
    """CXL's relaxed checkpoint: per-batch embedding log, MLP snapshots over slices.

    A copy snapshots the MLPs at the start of the batch of its first slice (the GPU
    answers the pulls from that snapshot) and alternates between the two MLP slots, so
    the newest complete copy survives while the next one is written."""

    system_kind = "relaxed"

    def __init__(self, image: PmemImage) -> None:
        super().__init__(image)
        newest = self.flagged(image, "mlp")
        self._next_slot = 1 if newest and newest[max(newest)] == "mlp0" else 0
        self._groups: list[tuple[int, int, bool]] = []
        self._pending: list[list[Phase]] = []
        self.copies: list[int] = []  # the batch each complete copy snapshots
        self.completed_at: list[int] = []  # the batch in which each copy completed

    def prepare(self, ops: list[tuple[str, int, int]], facts: dict[int, BatchFacts]) -> None:
        """Group the board's slices into copies: a copy ends at the slice that also
        wrote the flag (two device writes)."""
        self._facts, group = facts, []
        for name, batch, writes in ops:
            if name != "mlp_log_slice":
                continue
            group.append(batch)
            if writes >= 2:
                self._groups.append((group[0], len(group), True))
                self.copies.append(group[0])
                self.completed_at.append(batch)
                group = []
        if group:
            self._groups.append((group[0], len(group), False))

    def phases(self, op: str, batch: int, facts: BatchFacts, writes: int) -> list[Phase]:
        if op == "mlp_log":
            return []
        if op != "mlp_log_slice":
            return super().phases(op, batch, facts, writes)
        if not self._pending:
            first, slices, complete = self._groups.pop(0)
            slot, self._next_slot = self._next_slot, self._next_slot ^ 1
            parts = self.mlp_log_writes(slot, first, self._facts[first].mlp_before, slices)
            self._pending = [[part] for part in parts]
            if complete:
                self._pending[-1].append(self.flag_phase(f"mlp{slot}", first))
        return self._pending.pop(0)

    def resume_batch(self, emb: dict[int, str], mlp: dict[int, str]) -> int:
        return max(emb) if emb else 0

    def mlp_for(self, image: PmemImage, mlp: dict[int, str], resume: int) -> tuple[int, np.ndarray]:
        usable = [n for n in mlp if n <= resume]
        if usable:
            return image.mlp_record(mlp[max(usable)])
        return 0, self.base_mlp(image)


def raise_corrupt(image: PmemImage, why: str) -> None:
    raise CorruptImage(f"corrupt PMEM image {image.path}: {why}")


PROTOCOLS: dict[str, type[Protocol]] = {
    "ssd": RedoProtocol,
    "pmem": RedoProtocol,
    "pcie": RedoProtocol,
    "cxl-d": RedoProtocol,
    "cxl-b": UndoProtocol,
    "cxl": RelaxedUndoProtocol,
    "dram": NoPersistence,
}
