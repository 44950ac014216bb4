"""Broken protocols the crash checker must catch: each removes one mechanism a real
protocol relies on (a fence, an order, idempotence, a check)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from components.boards.software_ft import CheckNRunCheckpoint, CprCheckpoint
from components.persistence.checkpoints import NEVER, ChainRecovery, Payload
from components.persistence.image import RECORD_HEADER, WORD, PmemImage, record_header
from components.persistence.protocols import (
    RedoProtocol,
    RelaxedUndoProtocol,
    UndoProtocol,
)
from components.persistence.quantize import dequantize
from components.persistence.writes import Writes
from simulate.failures.sharded import ShardRecovery


def merged(epochs):
    """All of an op's epochs as one: the fences between them dropped."""
    return [[group for epoch in epochs for group in epoch]] if epochs else []


class RedoMissingFence(RedoProtocol):
    """Redo log records and their flag in one epoch: the flag may persist first."""

    def epochs(self, op):
        epochs = super().epochs(op)
        return merged(epochs) if op.name in self.log_ops else epochs


class UndoMissingFence(UndoProtocol):
    """Undo embedding log and its flag in one epoch."""

    def epochs(self, op):
        epochs = super().epochs(op)
        return merged(epochs) if op.name == "emb_log" else epochs


class RelaxedMissingFence(RelaxedUndoProtocol):
    """The MLP copy's last part, header and flag in one epoch."""

    def epochs(self, op):
        epochs = super().epochs(op)
        return merged(epochs) if op.name == "mlp_log_slice" else epochs


class FlagBeforeLog(UndoProtocol):
    """The embedding log's flag is written (and fenced) before the log itself."""

    def epochs(self, op):
        epochs = super().epochs(op)
        return epochs[::-1] if op.name == "emb_log" else epochs


class ApplyBeforeLog(RedoProtocol):
    """Redo that updates the rows in place before writing the log that would replay
    them (in the log op's first epoch; the update op writes nothing)."""

    def epochs(self, op):
        if op.name == "update":
            return []
        epochs = super().epochs(op)
        if op.name in self.log_ops:
            f = op.facts
            return [self.rows_in_place(f.rows, f.new, f.new_acc), *epochs]
        return epochs


class IgnoresMlpLog(RelaxedUndoProtocol):
    """Relaxed recovery that restores the base MLPs, ignoring every MLP copy."""

    def mlp_for(self, image, rec, mlp, resume):
        batch, params, acc = self.base(image, rec)
        return batch, params, acc, []


class ClearsFlagsFirst(RelaxedUndoProtocol):
    """Relaxed recovery that clears the MLP flags before the chosen copy is durable as
    the base record (and the embedding flags before the rollback)."""

    def plan(self, image):
        rec = super().plan(image)
        rec.epochs = rec.epochs[::-1]
        return rec


class NonIdempotentRedo(RedoProtocol):
    """A logical redo log: it keeps each row's change (new - old) and recovery ADDS it
    to the table, so replaying after the update (or twice) applies the batch twice."""

    def epochs(self, op):
        f = op.facts
        if f is None or op.name not in self.log_ops:
            return super().epochs(op)
        slot, n = op.batch % 2, op.batch
        records = self.emb_record(slot, n, f.rows, f.new - f.old, f.new_acc)
        records += self.mlp_record(f"mlp{slot}", n, f.mlp_after, f.mlp_acc_after)
        return [records, [self.flag(f"emb{slot}", n)]]

    def replay(self, image, rec, batch, region):
        _, rows, deltas, accs = image.emb_record(region)
        self.read_emb(rec, region, rows.size)
        return self.rows_in_place(rows, image.table()[rows] + deltas, accs)


class TrustsTornFlag(UndoProtocol):
    """A two-word embedding-log flag (batch + 1, entry count), the count saving a header
    read; recovery trusts the count without checking it against the record, so a torn
    flag (new batch, the slot's previous count) rolls back the wrong entries."""

    def count_offset(self, slot: int) -> int:
        return self.layout.offset("flags") + 32 + WORD * slot

    def epochs(self, op):
        epochs = super().epochs(op)
        if op.name == "emb_log" and op.facts is not None:
            slot = op.batch % 2
            epochs[1].append(Writes.word(self.count_offset(slot), op.facts.rows.size))
        return epochs

    def rollback(self, image, rec, logs):
        groups = []
        for _, region in logs:
            image.emb_record(region)  # the record itself is checked, as the real one is
            slot = int(region[-1])
            at = self.count_offset(slot)
            count = min(max(int(image.buf[at : at + 8].view("<i8")[0]), 0), self.layout.max_rows)
            start = self.layout.offset(region) + RECORD_HEADER
            raw = image.buf[start : start + count * self.layout.entry_bytes]
            entries = raw.reshape(count, self.layout.entry_bytes)
            rows = entries[:, :8].copy().view("<i8").reshape(-1)
            values = entries[:, 8:].copy().view(np.float32).reshape(-1, self.layout.dim)
            groups.append((rows, values))
        if not groups:
            return []
        rows = np.concatenate([g[0] for g in groups])
        values = np.concatenate([g[1] for g in groups])
        last = rows.size - 1 - np.unique(rows[::-1], return_index=True)[1]
        return self.rows_in_place(rows[last], values[last], None)


class _NoCrc(PmemImage):
    """An image whose records are trusted without their CRC."""

    def _crc(self, region, extra, payload, more, *head):
        return int(self.region(region)[16:20].view("<u4")[0])


class SkipsChecksum(UndoProtocol):
    """Undo recovery that never verifies a record's CRC: a damaged record is used."""

    def plan(self, image):
        trusting = _NoCrc(image.layout, image.buf, image.path, image.identity)
        trusting.reads = image.reads
        return super().plan(trusting)


class RollbackNewestWins(UndoProtocol):
    """Undo recovery that rolls back the flagged logs oldest first, so the NEWER log's
    old value wins for a row both hold: right only while the embedding log of a batch
    never commits before its MLP log (then at most one log is rolled back)."""

    def rollback(self, image, rec, logs):
        return super().rollback(image, rec, logs[::-1])


class NeverCommitsMlpCopy(RelaxedUndoProtocol):
    """Relaxed copies written in full but never flagged: recovery always falls back on
    the base record (the initial MLPs), however old they are."""

    def epochs(self, op):
        epochs = super().epochs(op)
        return epochs[:1] if op.name == "mlp_log_slice" else epochs


class MislabelledMlpCopy(RelaxedUndoProtocol):
    """Relaxed copies labelled (header and flag) with the batch after the snapshot they
    were pulled from, and filled with that batch's MLPs: MLPs the GPU's snapshot buffer
    never held, consistent with their label."""

    def prepare(self, ops):
        super().prepare(ops)
        self._slices = {
            uid: (slot, snap + 1 if snap is not None and snap + 1 in self._facts else snap,
                  payload, completes)
            for uid, (slot, snap, payload, completes) in self._slices.items()
        }  # fmt: skip


class KeepsMlpFlags(RelaxedUndoProtocol):
    """Relaxed recovery that clears only the flags beyond the resume batch (as strict
    undo does), leaving the MLP flags of copies it moved to the base record: harmless
    until the resumed run rewrites those slots and a second failure lands."""

    def beyond(self, emb, mlp, resume):
        return UndoProtocol.beyond(self, emb, mlp, resume)


def batch_outside_crc(batch: int, count: int, *payloads) -> np.ndarray:
    """A record header whose CRC is computed with the batch field zeroed: the batch is
    outside the checksum (the formatter's base record, of batch 0, reads the same)."""
    head = record_header(0, count, *payloads)
    head[:8] = np.array([batch], dtype="<i8").view(np.uint8)
    return head


class _BatchOutsideCrcImage(PmemImage):
    """Records checked with their batch field zeroed."""

    def _crc(self, region, extra, payload, more, *head):
        if head:
            head = (np.concatenate([np.zeros(8, np.uint8), head[0][8:16]]),)
        return super()._crc(region, extra, payload, more, *head)


class HeaderOutsideCrc(RelaxedUndoProtocol):
    """Relaxed protocol whose record CRC leaves the header's batch field outside: a bit
    flipped in the base record's batch is believed (MLPs of batch 0 reported as those of
    a later batch)."""

    def emb_record(self, slot, batch, rows, values, acc):
        out = super().emb_record(slot, batch, rows, values, acc)
        header = batch_outside_crc(batch, rows.size, *[g.data for g in out[:-1]])
        return [*out[:-1], Writes.one(self.layout.offset(f"emb{slot}"), header)]

    def mlp_record(self, region, batch, params, acc, clip=False, header=True):
        out = super().mlp_record(region, batch, params, acc, clip, header)
        if not header:
            return out
        head = batch_outside_crc(batch, self.layout.mlp_count, *self.mlp_payloads(params, acc))
        return [*out[:-1], Writes.one(self.layout.offset(region), head)]

    def plan(self, image):
        trusting = _BatchOutsideCrcImage(image.layout, image.buf, image.path, image.identity)
        trusting.reads, trusting.on_read = image.reads, image.on_read
        return super().plan(trusting)


MUTANTS = [
    ("pmem", RedoMissingFence),
    ("cxl-b", UndoMissingFence),
    ("cxl", RelaxedMissingFence),
    ("cxl-b", FlagBeforeLog),
    ("cxl-d", ApplyBeforeLog),
    ("cxl", IgnoresMlpLog),
    ("cxl", ClearsFlagsFirst),
    ("cxl-d", NonIdempotentRedo),
    ("cxl-b", TrustsTornFlag),
    ("cxl-b", SkipsChecksum),
    ("cxl-b", RollbackNewestWins),
    ("cxl", NeverCommitsMlpCopy),
    ("cxl", MislabelledMlpCopy),
    ("cxl", KeepsMlpFlags),
    ("cxl", HeaderOutsideCrc),
]
"""(system, mutant) pairs; the last five are issue 26's classes: a schedule-dependent
rollback order, never-committed and mislabelled MLP copies, stale flags after a
recovery, header fields outside the CRC."""


# ----- software checkpoint policies (simulate/failures/software.py) -----------
class TrustsTornCheckpoint(ChainRecovery):
    """Reads the checkpoint in flight at the failure too: its rows written so far over
    the chain, labelled with its batch (no look at the commit record)."""

    def recover(self, store, tick, initial, volatile=None):
        got = super().recover(store, tick, initial, volatile)
        last = got.chain[-1] if got.chain else -1
        torn = [c for c in store.checkpoints if c.end == NEVER and c.seq > last and c.durable]
        if torn:
            c = torn[-1]
            got.table[c.rows[: c.durable]] = self.decode(c.payload.head(c.durable))
            got.batch = c.batch
        return got


class MissesOwnBatchRows(CheckNRunCheckpoint):
    """Takes the differential before tracking the batch's own rows: they land in the
    next one, so each differential misses rows modified since the previous checkpoint."""

    def checkpoint_ops(self, board, ops, prev):
        now = board.engine.now
        if self._last is not None and now - self._last < self.interval_ticks(board.layout):
            self._track(board, ops.demand)
            return []
        object.__setattr__(self, "_last", now)
        out = self.take(board, ops, prev)
        self._track(board, ops.demand)
        return out


class WrongScaleDequantize(ChainRecovery):
    """Dequantizes with a step over 2^bits codes instead of 2^bits - 1: the top codes
    land a whole step short."""

    def decode(self, payload):
        if payload.bits == 32:
            return payload.values
        scale = np.float32((2**payload.bits - 1) / 2**payload.bits)
        return dequantize(payload.codes, payload.low, payload.step * scale)


class TruncatingQuantizer(ChainRecovery):
    """Quantizes by truncation, not rounding: errors up to a whole step (no step / 2
    bound)."""

    def encode(self, values, bits):
        payload = super().encode(values, bits)
        if bits == 32:
            return payload
        rows = np.asarray(values, dtype=np.float32)
        safe = np.where(payload.step > 0, payload.step, np.float32(1))
        codes = np.floor((rows - payload.low[:, None]) / safe[:, None])
        codes = np.clip(codes, 0, 2**bits - 1).astype(np.uint8)
        return Payload(codes=codes, low=payload.low, step=payload.step, bits=bits)


class CprKeepsLostUpdates(ChainRecovery):
    """CPR 'recovery' that keeps the tables host memory held at the failure, with the
    updates since the checkpoint it claims to drop (the MLPs from the checkpoint)."""

    def recover(self, store, tick, initial, volatile=None):
        got = super().recover(store, tick, initial, volatile)
        if volatile is not None:
            got.table = volatile.copy()
        return got


class DropsChainForNewFull(ChainRecovery):
    """Deletes the old chain once a new full checkpoint begins: when that full is torn,
    nothing is left to fall back to (the initial weights)."""

    def chain(self, store, tick):
        fulls = [c for c in store.checkpoints if c.full]
        if fulls and not fulls[-1].complete(tick):
            return []
        return super().chain(store, tick)


class SsuReportsUnsavedRows(CprCheckpoint):
    """CPR-SSU (a quarter of the used rows) whose log says each partial checkpoint saved
    every row used since the previous one, while its op reads and writes only the
    sample: the store holds what the log says, the oracle what the op read."""

    def __init__(self, **overrides) -> None:
        overrides.setdefault("ssu_share", 0.25)
        super().__init__(**overrides)

    def take(self, board, ops, prev):
        used = np.zeros(0, np.int64) if self._uses is None else np.flatnonzero(self._uses)
        taken = super().take(board, ops, prev)
        if self.taken[-1].rows is not None:
            self.taken[-1] = replace(self.taken[-1], rows=np.union1d(self.taken[-1].rows, used))
        return taken


FT_MUTANTS = [
    ("check-n-run", "none", TrustsTornCheckpoint),
    ("cpr", "none", TrustsTornCheckpoint),
    ("check-n-run", "none", MissesOwnBatchRows),
    ("check-n-run", "8", WrongScaleDequantize),
    ("check-n-run", "4", TruncatingQuantizer),
    ("cpr", "none", CprKeepsLostUpdates),
    ("check-n-run", "none", DropsChainForNewFull),
    ("cpr", "none", SsuReportsUnsavedRows),
]
"""(--checkpoint, --quantize, mutant): broken recoveries (ChainRecovery subclasses) and a
broken policy (a CheckNRunCheckpoint subclass), each breaking one guarantee."""


# ----- software policies on several CXL-MEMs (simulate/failures/sharded.py) --------------
class RestoresFromOtherDevice(ShardRecovery):
    """A failed device reloads its shard from the next device's store (that store
    holds none of its rows)."""

    def store_of(self, device, devices):
        return (device + 1) % devices


class CompletesBeforeStoreWrite(CprCheckpoint):
    """Logs each checkpoint as durable at a marker op that ends when its store write
    begins: the store counts it complete before its write ends."""

    def take(self, board, ops, prev):
        taken = super().take(board, ops, prev)
        mark = board.scheduler.op(
            "cpr_marked", "idle", ops.batch, None, lambda now: 0, [ops.update, ops.bottom_bwd]
        )
        self.taken[-1] = replace(self.taken[-1], write=mark)
        return taken


class FullToAnyDevice(ShardRecovery):
    """Full recovery rolls back to the newest checkpoint complete on *any* device, not
    on every one."""

    def common_batch(self, complete):
        return max(set.union(*complete), default=-1)


class PartialReloadsAll(ShardRecovery):
    """Partial recovery reloads every shard from its checkpoint, yet resumes at the
    interrupted batch (no rerun): the survivors' updates since are silently lost."""

    def reloaded(self, failed, devices):
        return list(range(devices))


SHARDED_FT_MUTANTS = [
    ("cpr", "partial", RestoresFromOtherDevice),
    ("cpr", "partial", CompletesBeforeStoreWrite),
    ("cpr", "full", FullToAnyDevice),
    ("check-n-run", "full", FullToAnyDevice),
    ("cpr", "partial", PartialReloadsAll),
    ("cpr", "partial", TrustsTornCheckpoint),
    ("cpr", "partial", SsuReportsUnsavedRows),
]
"""(policy, --recovery, mutant) on cxl-d with several CXL-MEMs: each must be caught."""
