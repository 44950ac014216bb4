"""Checkpoint protocols per system: what each op writes to PMEM, and how to recover.

A protocol turns a batch's functional facts (rows it updates with their old and new
values, MLP parameters before and after, Adagrad accumulators) into the *epochs* of
writes of the ops the board schedules: the writes of one epoch may become durable in
any order, an epoch's fence completes before the next epoch's writes are issued
(docs/failures.md states the model). A recovery reads a crash image back into a model
state at a batch boundary and declares its own writes in epochs too (a failure during
recovery tears them).

Declared fences (ops as the boards name them; ``|`` is a fence):
- Redo (ssd, pmem, pcie, cxl-d): ``ckpt_log``/``ckpt_persist`` of batch N =
  [rows' new values, MLPs after N: records of slot N % 2] | [flag emb{N%2} = N];
  ``update`` = [rows in place]. Recovery replays the newest flagged slot (idempotent:
  absolute values) = [rows] and resumes at N + 1.
- Undo (cxl-b): ``emb_log`` = [old values of N's rows: record of emb{N%2}] | [flag];
  ``mlp_log`` = [MLPs N starts from: record of mlp{N%2}] | [flag]; ``update`` = [rows].
  Slot N % 2 is reused by N + 2 only after N + 1's checkpoint is complete (board
  dependency). Recovery: R = newest batch with both flags; roll back every flagged
  embedding log >= R (older log wins per row) = [rows] | [clear flags > R].
- Relaxed undo (cxl): embedding log as cxl-b; each MLP copy is spread over the board's
  ``mlp_log_slice`` ops (what each slice's requests covered) = [payload part] ... |
  [payload part, record header] | [flag mlp{slot} = snapshot batch]. Recovery: R =
  newest flagged embedding log, rolled back; MLPs = the newest of the committed copies
  with snapshot <= R and the base record; a chosen copy becomes the base record, so a
  resumed run may reuse both slots = [rows, base record] | [clear emb flags > R, every
  MLP flag].
- None (dram): nothing persists; recovery restarts from the initial weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.persistence.image import (
    FLAG_NAMES,
    RECORD_HEADER,
    WORD,
    CorruptImage,
    ImageLayout,
    PmemImage,
    flag_word,
    log_slot,
    record_header,
)
from components.persistence.journal import Requests
from components.persistence.writes import Writes, all_words, words_after


def pad_params(values: np.ndarray) -> np.ndarray:
    """float32 parameters padded with zeros to whole 8 B words (a record's payload)."""
    out = np.zeros(-(-values.size // 2) * 2, dtype=np.float32)
    out[: values.size] = values
    return out


def acc_words(acc: np.ndarray) -> np.ndarray:
    """Per-row float32 accumulators, one 8 B word each (value, then 4 zero bytes)."""
    out = np.zeros((acc.size, 2), dtype=np.float32)
    out[:, 0] = acc
    return out


@dataclass
class BatchFacts:
    """What batch N changes: its sorted unique rows with old and new values (and
    Adagrad accumulators), and the MLP state it starts from and ends with (parameters
    padded to whole words by ``pad_params``)."""

    rows: np.ndarray
    old: np.ndarray
    new: np.ndarray
    mlp_before: np.ndarray
    mlp_after: np.ndarray
    old_acc: np.ndarray | None = None
    new_acc: np.ndarray | None = None
    mlp_acc_before: np.ndarray | None = None
    mlp_acc_after: np.ndarray | None = None


@dataclass(frozen=True)
class OpView:
    """One op of a recorded run as a protocol sees it."""

    uid: int
    name: str
    batch: int
    start: int
    end: int
    facts: BatchFacts | None
    requests: Requests
    resource: str = ""


@dataclass
class Recovery:
    """A recovery's outcome: resume at ``batch`` with these weights, after its writes
    (fence-separated ``epochs``). ``reads``: (offsets, size) of what it read (timing)."""

    batch: int
    mlp: np.ndarray
    mlp_batch: int
    epochs: list[list[Writes]] = field(default_factory=list)
    reads: list[tuple[np.ndarray, int]] = field(default_factory=list)
    mlp_acc: np.ndarray | None = None
    table: np.ndarray | None = None
    row_acc: np.ndarray | None = None

    @property
    def writes(self) -> list[Writes]:
        return [group for epoch in self.epochs for group in epoch]

    @property
    def bytes_written(self) -> int:
        return int(sum(group.nbytes for group in self.writes))

    @property
    def bytes_read(self) -> int:
        return int(sum(offsets.size * size for offsets, size in self.reads))


def emb_entries(layout: ImageLayout, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(count, entry_bytes) uint8: each row id followed by its values."""
    entries = np.empty((rows.size, layout.entry_bytes), dtype=np.uint8)
    entries[:, :8] = rows.astype("<i8").reshape(-1, 1).view(np.uint8)
    entries[:, 8:] = np.ascontiguousarray(values, dtype=np.float32).view(np.uint8)
    return entries


def raise_corrupt(image: PmemImage, why: str) -> None:
    raise CorruptImage(f"corrupt PMEM image {image.path}: {why}")


class Protocol:
    """Base: op -> epochs of writes; recovery planning over an image."""

    system_kind = "none"

    def __init__(self, layout: ImageLayout) -> None:
        self.layout = layout

    def prepare(self, ops: list[OpView]) -> None:
        """See the whole recorded run before epochs are asked (relaxed copies)."""

    def epochs(self, op: OpView) -> list[list[Writes]]:
        return []

    def plan(self, image: PmemImage) -> Recovery:
        raise NotImplementedError

    # ----- what the crash checker reads of the image -----------------------------------
    def image_over(self, buf: np.ndarray) -> PmemImage:
        return PmemImage(self.layout, buf)

    def always_read(self) -> list[str]:
        """Regions every recovery reads (their generations key its verdict)."""
        return ["flags", "base", "data", *(["rowacc"] if self.layout.adagrad else [])]

    def commit_regions(self) -> list[str]:
        """Regions whose words decide what a recovery resumes at."""
        return ["flags"]

    def record_regions(self) -> list[str]:
        """Records a recovery may read (media faults flip bits in them)."""
        return ["emb0", "emb1", "mlp0", "mlp1", "base"]

    def layout_of(self, region: str) -> ImageLayout:
        return self.layout

    def metadata_words(self) -> list[int]:
        """Offsets of the flag words recovery decides by (metadata faults flip them)."""
        return [self.layout.flag_offset(name) for name in FLAG_NAMES]

    def base_regions(self) -> list[str]:
        return ["base"]

    def cross_device(self, words: np.ndarray) -> tuple[str, ...]:
        """What a crash state holds that only several devices can (none on one)."""
        return ()

    def table_after(self, words: np.ndarray, rec: Recovery):
        """The table (and row accumulators) after the recovery's writes, without
        touching the image ``words``."""
        lay = self.layout
        out = []
        for name in ("data", "rowacc") if lay.adagrad else ("data",):
            start, size = lay.offset(name), lay.regions()[name][1]
            groups = [g for g in rec.writes if g.count and start <= g.offsets[0] < start + size]
            out.append(
                words_after(words, start // WORD, (start + size) // WORD, *all_words(groups))
            )
        table = out[0].view(np.float32).reshape(lay.total_rows, lay.dim)
        acc = out[1].view(np.float32)[::2] if lay.adagrad else None
        return table, acc

    # ----- the records, flags and in-place rows every protocol writes ------------------
    def emb_record(self, slot: int, batch: int, rows, values, acc) -> list[Writes]:
        """Embedding-log record of slot ``slot``: entries (and their accumulators) and the
        header whose CRC covers them."""
        lay = self.layout
        entries = emb_entries(lay, rows, values)
        out = [Writes(lay.entry_offsets(slot, rows.size), entries)]
        payloads = [entries]
        if lay.adagrad:
            words = acc_words(acc)
            base = lay.offset(f"embacc{slot}")
            out.append(Writes(base + WORD * np.arange(rows.size), words))
            payloads.append(words)
        out.append(Writes.one(lay.offset(f"emb{slot}"), record_header(batch, rows.size, *payloads)))
        return out

    def mlp_payloads(self, params: np.ndarray, acc: np.ndarray | None) -> list[np.ndarray]:
        payloads = [params]
        if self.layout.adagrad:
            payloads.append(acc)
        return payloads

    def mlp_record(
        self,
        region: str,
        batch: int,
        params: np.ndarray,
        acc: np.ndarray | None,
        clip: bool = False,
        header: bool = True,
    ) -> list[Writes]:
        """MLP record in ``region`` (mlp0, mlp1 or base): parameters, accumulators and the
        header. ``clip``: the parameters only where the op's requests wrote them."""
        lay = self.layout
        start = lay.offset(region)
        out = [Writes.one(start + RECORD_HEADER, params, clip)]
        if header:
            if lay.adagrad:
                extra = "baseacc" if region == "base" else region.replace("mlp", "mlpacc")
                out.append(Writes.one(lay.offset(extra), acc))
            payloads = self.mlp_payloads(params, acc)
            out.append(Writes.one(start, record_header(batch, lay.mlp_count, *payloads)))
        return out

    def flag(self, name: str, batch: int) -> Writes:
        word = np.array([flag_word(batch)], dtype="<u8")
        return Writes.one(self.layout.flag_offset(name), word)

    def rows_in_place(self, rows: np.ndarray, values, acc) -> list[Writes]:
        lay = self.layout
        out = [Writes(lay.row_offset(rows), np.ascontiguousarray(values, dtype=np.float32))]
        if lay.adagrad:
            out.append(Writes(lay.acc_offsets(rows), acc_words(acc)))
        return out

    # ----- recovery helpers ----------------------------------------------------------
    def flagged(self, image: PmemImage, kind: str) -> dict[int, str]:
        """batch -> slot region for every set flag of one kind (emb or mlp), each
        checked: a word failing its check, or an embedding flag in the slot of the
        other parity (slot N % 2 logs batch N), is a corrupt image."""
        values = image.flag_values()
        out = {}
        for slot in (0, 1):
            batch = int(values[FLAG_NAMES.index(f"{kind}{slot}")])
            if batch < 0:
                continue
            if kind == "emb" and log_slot(batch) != slot:
                raise_corrupt(image, f"flag {kind}{slot} marks batch {batch}, of the other slot")
            if batch in out:
                raise_corrupt(image, f"flags {kind}0 and {kind}1 both mark batch {batch}")
            out[batch] = f"{kind}{slot}"
        return out

    def read_flags(self, rec: Recovery) -> None:
        rec.reads.append((np.array([self.layout.offset("flags")]), 8 * len(FLAG_NAMES)))

    def read_emb(self, rec: Recovery, region: str, count: int) -> None:
        lay = self.layout
        rec.reads.append((np.array([lay.offset(region)]), RECORD_HEADER))
        rec.reads.append((lay.entry_offsets(int(region[-1]), count), lay.entry_bytes))
        if lay.adagrad:
            rec.reads.append((np.array([lay.offset(region.replace("emb", "embacc"))]), count * 8))

    def read_mlp(self, rec: Recovery, region: str) -> None:
        lay = self.layout
        rec.reads.append((np.array([lay.offset(region)]), RECORD_HEADER + lay.mlp_bytes))
        if lay.adagrad:
            extra = "baseacc" if region == "base" else region.replace("mlp", "mlpacc")
            rec.reads.append((np.array([lay.offset(extra)]), lay.mlp_bytes))

    def base(self, image: PmemImage, rec_reads: Recovery | None = None):
        """The base record (verified: its CRC covers its batch), its batch checked to be
        a batch training can have reached."""
        if rec_reads is not None:
            self.read_mlp(rec_reads, "base")
        batch, params, acc = image.mlp_record("base")
        if batch < 0:
            raise_corrupt(image, f"the base record holds batch {batch}")
        return batch, params, acc

    def clear(self, names) -> list[Writes]:
        return [Writes.word(self.layout.flag_offset(name), 0) for name in names]

    def rollback(self, image: PmemImage, rec: Recovery, logs: list[tuple[int, str]]):
        """Writes restoring each row to its value in the OLDEST of ``logs`` ((batch,
        region) newest first) that holds it: one write per row, so their order within
        the epoch does not matter."""
        parts = []
        for n, region in logs:
            batch, rows, values, accs = image.emb_record(region)
            if batch != n:
                raise_corrupt(image, f"{region} holds batch {batch}, its flag says {n}")
            self.read_emb(rec, region, rows.size)
            parts.append((rows, values, accs))
        if not parts:
            return []
        rows = np.concatenate([p[0] for p in parts])
        if rows.size and (rows.min() < 0 or rows.max() >= self.layout.total_rows):
            raise_corrupt(image, "an embedding log names a row outside the table")
        values = np.concatenate([p[1] for p in parts])
        accs = np.concatenate([p[2] for p in parts]) if self.layout.adagrad else None
        if len(parts) == 1:  # one log: its rows are already distinct
            return self.rows_in_place(rows, values, accs)
        last = rows.size - 1 - np.unique(rows[::-1], return_index=True)[1]
        return self.rows_in_place(rows[last], values[last], None if accs is None else accs[last])

    def finish(self, image: PmemImage, rec: Recovery) -> Recovery:
        """Apply the planned writes and read the recovered state back (copies)."""
        dst, values = all_words(rec.writes)
        image.words[dst] = values
        rec.table = image.table().copy()
        acc = image.row_acc()
        rec.row_acc = None if acc is None else acc.copy()
        rec.mlp = np.array(rec.mlp, copy=True)
        rec.mlp_acc = None if rec.mlp_acc is None else np.array(rec.mlp_acc, copy=True)
        return rec

    def recover(self, image: PmemImage) -> Recovery:
        return self.finish(image, self.plan(image))


class NoPersistence(Protocol):
    """DRAM: nothing survives; training restarts from the seeded initial weights."""

    def plan(self, image: PmemImage) -> Recovery:
        rec = Recovery(0, np.zeros(0, np.float32), 0)
        _, rec.mlp, rec.mlp_acc = self.base(image, rec)
        return rec


class RedoProtocol(Protocol):
    """End-of-batch redo checkpoint, logged before the in-place update."""

    system_kind = "redo"
    log_ops = ("ckpt_log", "ckpt_persist")

    def epochs(self, op: OpView) -> list[list[Writes]]:
        f, n = op.facts, op.batch
        if f is None:
            return []
        slot = log_slot(n)
        if op.name in self.log_ops:
            records = self.emb_record(slot, n, f.rows, f.new, f.new_acc)
            records += self.mlp_record(f"mlp{slot}", n, f.mlp_after, f.mlp_acc_after)
            return [records, [self.flag(f"emb{slot}", n)]]
        if op.name == "update":
            return [self.rows_in_place(f.rows, f.new, f.new_acc)]
        return []

    def plan(self, image: PmemImage) -> Recovery:
        rec = Recovery(0, np.zeros(0, np.float32), 0)
        self.read_flags(rec)
        flagged = self.flagged(image, "emb")
        return self.plan_from(image, rec, flagged, max(flagged) if flagged else None)

    def plan_from(
        self, image: PmemImage, rec: Recovery, flagged: dict[int, str], last: int | None
    ) -> Recovery:
        """Replay the log of batch ``last`` (None: nothing committed, the base MLPs)."""
        if last is None:
            _, rec.mlp, rec.mlp_acc = self.base(image, rec)
            return rec
        if last not in flagged:
            raise_corrupt(image, f"no flagged redo log of committed batch {last}")
        region = flagged[last]
        mlp_region = "mlp" + region[-1]
        mlp_batch, rec.mlp, rec.mlp_acc = image.mlp_record(mlp_region)
        self.read_mlp(rec, mlp_region)
        if mlp_batch != last:
            raise_corrupt(image, f"{mlp_region} holds batch {mlp_batch}, flag {region} says {last}")
        rec.epochs = [self.replay(image, rec, last, region)]
        rec.batch = rec.mlp_batch = last + 1
        return rec

    def replay(self, image: PmemImage, rec: Recovery, batch: int, region: str) -> list[Writes]:
        return self.rollback(image, rec, [(batch, region)])


class UndoProtocol(Protocol):
    """CXL-B's batch-aware undo log with complete (embedding + MLP) checkpoints."""

    system_kind = "undo"

    def epochs(self, op: OpView) -> list[list[Writes]]:
        f, n = op.facts, op.batch
        if f is None:
            return []
        slot = log_slot(n)
        if op.name == "emb_log":
            records = self.emb_record(slot, n, f.rows, f.old, f.old_acc)
            return [records, [self.flag(f"emb{slot}", n)]]
        if op.name == "mlp_log":
            record = self.mlp_record(f"mlp{slot}", n, f.mlp_before, f.mlp_acc_before)
            return [record, [self.flag(f"mlp{slot}", n)]]
        if op.name == "update":
            return [self.rows_in_place(f.rows, f.new, f.new_acc)]
        return []

    def resume_batch(self, emb: dict[int, str], mlp: dict[int, str]) -> int:
        complete = set(emb) & set(mlp)
        return max(complete) if complete else 0

    def plan(self, image: PmemImage) -> Recovery:
        rec = Recovery(0, np.zeros(0, np.float32), 0)
        self.read_flags(rec)
        emb, mlp = self.flagged(image, "emb"), self.flagged(image, "mlp")
        return self.plan_from(image, rec, emb, mlp, self.resume_batch(emb, mlp))

    def plan_from(
        self, image: PmemImage, rec: Recovery, emb: dict[int, str], mlp: dict[int, str],
        resume: int,
    ) -> Recovery:  # fmt: skip
        """Roll back every flagged embedding log from ``resume`` on, resume there."""
        logs = [(n, emb[n]) for n in sorted((n for n in emb if n >= resume), reverse=True)]
        rows = self.rollback(image, rec, logs)
        rec.mlp_batch, rec.mlp, rec.mlp_acc, extra = self.mlp_for(image, rec, mlp, resume)
        if rec.mlp_batch > resume:
            raise_corrupt(image, f"MLP log of batch {rec.mlp_batch} is newer than resume {resume}")
        clears = self.clear(self.beyond(emb, mlp, resume))
        rec.epochs = [rows + extra, clears]
        rec.batch = resume
        return rec

    def beyond(self, emb: dict[int, str], mlp: dict[int, str], resume: int) -> list[str]:
        """Flags recovery clears: those of the abandoned future (beyond ``resume``)."""
        return [r for n, r in emb.items() if n > resume] + [r for n, r in mlp.items() if n > resume]

    def mlp_for(self, image: PmemImage, rec: Recovery, mlp: dict[int, str], resume: int):
        """(batch, params, accumulators, extra writes) of the MLPs to resume with."""
        if resume in mlp:
            self.read_mlp(rec, mlp[resume])
            batch, params, acc = image.mlp_record(mlp[resume])
            if batch != resume:
                raise_corrupt(image, f"{mlp[resume]} holds batch {batch}, its flag says {resume}")
            return batch, params, acc, []
        batch, params, acc = self.base(image, rec)
        return batch, params, acc, []


class RelaxedUndoProtocol(UndoProtocol):
    """CXL's relaxed checkpoint: per-batch embedding log, MLP copies over slices.

    Which bytes of a copy a slice wrote, and whether it wrote the copy's header and
    flag, is what the board's requests say. A copy (from the slice that writes its
    first bytes to the one that writes its header) holds the MLPs of the newest
    ``mlp_snapshot`` the GPU had finished when its first payload request was issued
    (the GPU answers the pulls from its snapshot buffer, kept until the copy is done)."""

    system_kind = "relaxed"

    def prepare(self, ops: list[OpView]) -> None:
        """Attribute every slice to its copy: (slot, snapshot batch) per slice uid."""
        lay = self.layout
        snapshots = sorted((op.end, op.batch) for op in ops if op.name == "mlp_snapshot")
        current: dict[int, int] = {}
        self._slices: dict[int, tuple[int, int | None, bool, bool]] = {}
        self._facts = {op.batch: op.facts for op in ops if op.facts is not None}
        for op in sorted(ops, key=lambda o: (o.start, o.uid)):
            if op.name != "mlp_log_slice":
                continue
            addr = op.requests.addr
            for slot in (0, 1):
                start, size = lay.offset(f"mlp{slot}"), lay.regions()[f"mlp{slot}"][1]
                inside = (addr >= start + RECORD_HEADER) & (addr < start + size)
                payload = bool(inside.any())
                header = bool(((addr >= start) & (addr < start + RECORD_HEADER)).any())
                flag = bool((addr == lay.flag_offset(f"mlp{slot}")).any())
                if not (payload or header or flag):
                    continue
                if payload and int(addr[inside].min()) == start + RECORD_HEADER:  # a new copy
                    first = int(op.requests.issued[inside].min())
                    taken = [batch for end, batch in snapshots if end <= first]
                    current[slot] = taken[-1] if taken else None
                self._slices[op.uid] = (slot, current.get(slot), payload, header or flag)

    def epochs(self, op: OpView) -> list[list[Writes]]:
        if op.name == "mlp_log":
            return []
        if op.name != "mlp_log_slice":
            return super().epochs(op)
        slot, snapshot, payload, completes = self._slices.get(op.uid, (0, None, False, False))
        if snapshot is None:
            return []
        f = self._facts[snapshot]
        region = f"mlp{slot}"
        record = self.mlp_record(
            region, snapshot, f.mlp_before, f.mlp_acc_before, clip=True, header=completes
        )
        if not payload:
            record = record[1:]
        if not completes:
            return [record]
        return [record, [self.flag(region, snapshot)]]

    def resume_batch(self, emb: dict[int, str], mlp: dict[int, str]) -> int:
        return max(emb) if emb else 0

    def mlp_for(self, image: PmemImage, rec: Recovery, mlp: dict[int, str], resume: int):
        """The newest MLP checkpoint not newer than ``resume``: a committed copy, or the
        base record (an earlier recovery may have made a copy the base)."""
        usable = [n for n in mlp if n <= resume]
        try:
            base_batch, params, acc = self.base(image, rec)
        except CorruptImage:
            if not usable:
                raise
            base_batch = None  # torn by an interrupted rebase: a flagged copy is as new
        if base_batch is not None and base_batch > resume:
            raise_corrupt(image, f"the base record holds batch {base_batch}, beyond {resume}")
        if base_batch is not None and (not usable or max(usable) < base_batch):
            return base_batch, params, acc, []  # a tie: the copy (it reads the same MLPs)
        chosen = max(usable)
        self.read_mlp(rec, mlp[chosen])
        batch, params, acc = image.mlp_record(mlp[chosen])
        if batch != chosen:
            raise_corrupt(image, f"{mlp[chosen]} holds batch {batch}, its flag says {chosen}")
        return batch, params, acc, self.rebase(image, mlp[chosen])

    def rebase(self, image: PmemImage, region: str) -> list[Writes]:
        """The chosen copy, verified, becomes the base record (header and payload as they
        are: the same batch, count and CRC)."""
        lay = self.layout
        start = lay.offset(region)
        record = image.buf[start : start + RECORD_HEADER + lay.mlp_bytes]
        out = [Writes.one(lay.offset("base"), record)]
        if lay.adagrad:
            acc = image.region(region.replace("mlp", "mlpacc"))[: lay.mlp_bytes]
            out.append(Writes.one(lay.offset("baseacc"), acc))
        return out

    def beyond(self, emb: dict[int, str], mlp: dict[int, str], resume: int) -> list[str]:
        return [r for n, r in emb.items() if n > resume] + list(mlp.values())


PROTOCOLS: dict[str, type[Protocol]] = {
    "ssd": RedoProtocol,
    "pmem": RedoProtocol,
    "pcie": RedoProtocol,
    "cxl-d": RedoProtocol,
    "cxl-b": UndoProtocol,
    "cxl": RelaxedUndoProtocol,
    "dram": NoPersistence,
}
