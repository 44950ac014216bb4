"""Broken cross-device protocols that only a slower device exposes: written (issue 48)
before the crash checker learnt to make devices late, each a bug an engineer could
write. Three kinds:
- a coordinator that waits for the wrong things (a board whose ``commit`` or
  ``mlp_commit`` op, or one device's log or copy, has the wrong dependencies: on
  identical devices the one it forgot always finishes first anyway);
- a commit word issued with, not after, the last persist of what it commits, or
  decoded without its self-check;
- bugs that need a third MLP copy (a log slot reused) or a copy spanning several
  slices.
``ADVERSARIES``: (system, mutant, run) with the run that can show the bug (``RUNS``):
the suite's 2x2 run (on cxl, three copies), or the matrix's runs with copies over several
slices or fewer GPUs than CXL-MEMs, for the bugs only those configurations have.
``ESCAPED_BEFORE``: those the checker of the round before (the recorded schedule's pairs
and delayed commits, one random bit per metadata word) missed at its default settings,
each on its own run."""

from __future__ import annotations

import zlib

from cluster_mutants import last_logs

from components.boards import BOARDS
from components.boards.disaggregated import DisaggregatedBoard
from components.persistence.cluster import (
    ClusterRedo,
    ClusterRelaxed,
    ClusterUndo,
    device_of_resource,
)
from components.persistence.image import FLAG_BATCHES, FLAG_SEED, WORD, CorruptImage
from components.persistence.protocols import RelaxedUndoProtocol
from simulate.run.options import RunOptions, resolve_topology


def suite_run(system: str, batches: int | None = None, **kw) -> RunOptions:
    """tests/test_cluster_failures.py's 2x2 run (rmc1, 64 rows, batch 8; cxl 8 batches,
    long enough for three MLP copies, the third reusing the first's slot)."""
    batches = batches or (8 if system == "cxl" else 4)
    options = dict(model="rmc1", rows=64, batch_size=8, gpus=2, cxl_mems=2) | kw
    return RunOptions(system=system, batches=batches, progress=False, **options)


RUNS = {
    "2x2": suite_run,
    "two_copies": lambda s: suite_run(s, 6),  # rmc1 2x2 copies at batches 0, 3 only
    "multi_slice": lambda s: multi_slice_run(s, 2),  # copies over 3 slices
    "1x2": lambda s: suite_run(s, gpus=1),  # fewer GPUs than CXL-MEMs
    "rmc2": lambda s: rmc2_run(s, 1),  # copies over 2 slices, a head before the bursts
    "rmc2_2x2": lambda s: rmc2_run(s, 2),
}


def _device(op) -> int | None:
    return device_of_resource(op.record.resource)


class _Coordinator(DisaggregatedBoard):
    """A cluster board whose commit ops wait for ``waits`` instead of every device."""

    def commit(self, own, name, n, word, deps):
        return super().commit(own, name, n, word, self.waits(own, name, n, list(deps)))

    def waits(self, own, name: str, n: int, deps: list) -> list:
        return deps


def _board_for(board_class):
    def board_for(options: RunOptions) -> DisaggregatedBoard:
        topology = resolve_topology(
            options.topology, options.gpus, options.cxl_mems, options.pool_jobs
        )
        board = board_class(BOARDS[options.system], topology, jobs=options.pool_jobs)
        board.sharding = options.sharding
        return board

    return staticmethod(board_for)


# ----- a coordinator that counts the wrong acknowledgements -----------------------------
class _WrongBatchAckBoard(_Coordinator):
    def waits(self, own, name, n, deps):
        seen = self.__dict__.setdefault("_logged", {})
        for op in deps:
            seen[(_device(op), op.record.name, n)] = op
        if name != "commit" or n == 0:
            return deps
        earlier = [seen.get((_device(op), op.record.name, n - 1), op) for op in deps]
        return [op if _device(op) == 0 else older for op, older in zip(deps, earlier, strict=True)]


class WrongBatchAck(ClusterUndo):
    """The coordinator matches the other devices' acknowledgements by slot, not batch:
    commit N counts their acknowledgement of N - 1."""

    board_for = _board_for(_WrongBatchAckBoard)


class RedoWrongBatchAck(ClusterRedo):
    """WrongBatchAck on redo: commit N (and every update in place after it) counts the
    other devices' redo logs of N - 1."""

    board_for = _board_for(_WrongBatchAckBoard)


class _OwnFlagsBoard(_Coordinator):
    def waits(self, own, name, n, deps):
        return [op for op in deps if _device(op) != 0] if name == "commit" else deps


class OwnFlagsNotAwaited(ClusterUndo):
    """The coordinator counts every other device's acknowledgement but never waits for
    its own logs' flags (it 'knows' its own device is done)."""

    board_for = _board_for(_OwnFlagsBoard)


class _PerGpuBoard(_Coordinator):
    def waits(self, own, name, n, deps):
        return [op for op in deps if _device(op) < len(own.gpus)]


class AcksPerGpu(ClusterUndo):
    """The coordinator counts one acknowledgement per GPU (devices 0 .. G-1), not per
    CXL-MEM: invisible whenever GPUs = CXL-MEMs."""

    board_for = _board_for(_PerGpuBoard)


class RedoAcksPerGpu(ClusterRedo):
    """AcksPerGpu on redo."""

    board_for = _board_for(_PerGpuBoard)


class _OwnSlicesBoard(_Coordinator):
    def waits(self, own, name, n, deps):
        return [op for op in deps if _device(op) == 0] if name == "mlp_commit" else deps


class MlpCommitOwnSlices(ClusterRelaxed):
    """The MLP commit waits for the coordinator's own stripe of the copy only."""

    board_for = _board_for(_OwnSlicesBoard)


# ----- a gate left off one device --------------------------------------------------------
def _ungated(shard, attr: str) -> None:
    """Shard ``shard`` ignores the gate the cluster sets on it (``attr``)."""
    kind = type(shard)
    ignored = property(lambda self: (), lambda self, value: None)
    shard.__class__ = type(f"No{attr}{kind.__name__}", (kind,), {attr: ignored})


class _SlotGateBoard(DisaggregatedBoard):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        _ungated(self.shards[-1], "log_gate")


class SlotGateOffOneLog(ClusterUndo):
    """The last device's logs do not wait for the previous batch's commit before
    overwriting the log slot of two batches ago."""

    board_for = _board_for(_SlotGateBoard)


class _RedoEarlyUpdateBoard(DisaggregatedBoard):
    def update_commit_deps(self, ops, commit):
        last = len(self.shards) - 1
        return [] if device_of_resource(ops.lookup.record.resource) == last else [commit]


class RedoUpdateBeforeCommit(ClusterRedo):
    """The last device applies batch N in place once its own redo log is durable, not
    after the cluster's commit of N."""

    board_for = _board_for(_RedoEarlyUpdateBoard)


# ----- a commit word persisted with, not after, what it commits -------------------------
class CommitWithLastFlag(ClusterUndo):
    """The coordinator counts the bytes each device's log moved and issues the commit
    word with the last device's flag (one epoch: no fence between them)."""

    def prepare(self, ops):
        super().prepare(ops)
        self._last = last_logs(self, ops)

    def epochs(self, op):
        if op.name == "commit":
            return []
        epochs = super().epochs(op)
        if op.uid in self._last and epochs:
            epochs[-1] = [*epochs[-1], self.commit_write("commit", op.batch)]
        return epochs


class MlpCommitWithLastHeader(ClusterRelaxed):
    """The MLP commit word is issued once the last stripe's bytes are counted: with the
    completing slice's record header, before that slice's flag."""

    def prepare(self, ops):
        super().prepare(ops)
        commits = {}
        for op in ops:
            if op.uid in self._mlp_commits:
                commits[op.batch] = self._mlp_commits[op.uid]
        self._with = {}
        for op in ops:
            if op.name != "mlp_log_slice" or self.device_of(op) is None:
                continue
            m = self.device_of(op)
            slot, snapshot, _, completes = self.protocols[m]._slices.get(op.uid, (0, None, 0, 0))
            if completes and snapshot is not None:
                prior = self._with.get((slot, snapshot))
                if prior is None or op.end > prior[1]:
                    self._with[(slot, snapshot)] = (op.uid, op.end)
        self._with = {uid: key for key, (uid, _) in self._with.items()}

    def epochs(self, op):
        if op.name == "mlp_commit":
            return []
        epochs = super().epochs(op)
        if op.uid in self._with and epochs:
            slot, snapshot = self._with[op.uid]
            epochs[0] = [*epochs[0], self.commit_write(f"mlpc{slot}", snapshot)]
        return epochs


# ----- a commit word decoded without its self-check -------------------------------------
def unchecked(image, name: str) -> int:
    """A commit word's batch from its low half alone (batch + 1), the CRC not looked at."""
    image._read("d0.flags")  # the read, as the checked decoder's
    at = image.layout.commit_offset(name)
    word = int(image.buf[at : at + WORD].view("<u8")[0])
    return (word & (FLAG_BATCHES - 1)) - 1 if word else -1


class CommitWordUnchecked(ClusterUndo):
    """Reads the commit word's batch without checking the word's CRC half."""

    def committed(self, image):
        batch = unchecked(image, "commit")
        return None if batch < 0 else batch


class RedoCommitUnchecked(ClusterRedo):
    """CommitWordUnchecked on redo."""

    committed = CommitWordUnchecked.committed


def tolerant(image, name: str) -> int:
    """A commit word's batch, accepted when its CRC matches the value or the value with
    its lowest bit flipped (meant to ride over a torn last increment)."""
    image._read("d0.flags")
    at = image.layout.commit_offset(name)
    word = int(image.buf[at : at + WORD].view("<u8")[0])
    value = word & (FLAG_BATCHES - 1)
    for guess in (value, value ^ 1):
        if word and guess and word >> 32 == zlib.crc32(guess.to_bytes(4, "little"), FLAG_SEED):
            return value - 1
    return -1 if not word else -2


class CommitCheckMissesLowBit(ClusterUndo):
    """Checks the commit word with a CRC that also accepts the value's lowest bit
    flipped: one bit of the 64 a decoder reads lets a batch off by one through."""

    def committed(self, image):
        batch = tolerant(image, "commit")
        if batch == -2:
            raise CorruptImage(f"corrupt PMEM image {image.path}: commit word fails its check")
        return None if batch < 0 else batch


class MlpCommitUnchecked(ClusterRelaxed):
    """Reads the MLP commit words without checking their CRC half."""

    def plan(self, image):
        image.commit_word = lambda name: unchecked(image, name)
        try:
            return super().plan(image)
        finally:
            del image.commit_word


# ----- bugs a third MLP copy or a copy over several slices shows ------------------------
class PrefersSecondSlot(ClusterRelaxed):
    """Recovery takes the copy in slot 1 whenever it is committed and usable (copies go
    to slot 0, then 1: right until the third copy reuses slot 0)."""

    def plan(self, image):
        resume = self.committed(image) or 0
        second = image.commit_word("mlpc1")
        if 0 <= second <= resume:
            original = image.commit_word
            image.commit_word = lambda name: -1 if name == "mlpc0" else original(name)
            try:
                return super().plan(image)
            finally:
                del image.commit_word
        return super().plan(image)


class StaleSlotLabel(ClusterRelaxed):
    """The MLP commit labels a slot with the first copy ever committed there (a
    per-slot label set once): wrong from the third copy, which reuses slot 0."""

    def prepare(self, ops):
        super().prepare(ops)
        first: dict[int, int] = {}
        for uid in sorted(self._mlp_commits):
            slot, batch = self._mlp_commits[uid]
            first.setdefault(slot, batch)
            self._mlp_commits[uid] = (slot, first[slot])


class CompletionBatchLabel(ClusterRelaxed):
    """The MLP commit labels a copy with the batch whose slice completed it, not the
    snapshot it holds: the same batch while every copy fits one slice."""

    def prepare(self, ops):
        super().prepare(ops)
        batch = {op.uid: op.batch for op in ops if op.name == "mlp_commit"}
        self._mlp_commits = {
            uid: (slot, batch[uid]) for uid, (slot, _) in self._mlp_commits.items()
        }


class CompletionOrderLabels(RelaxedUndoProtocol):
    """Single device (held out of round 2): a copy's header and flag carry the batch of
    the slice that completes it (labels follow completion order), its payload the
    snapshot's MLPs."""

    def prepare(self, ops):
        super().prepare(ops)
        batch = {op.uid: op.batch for op in ops}
        self._labels = {
            uid: batch[uid] for uid, (_, snap, _, completes) in self._slices.items()
            if completes and snap is not None
        }  # fmt: skip

    def mlp_record(self, region, batch, params, acc, clip=False, header=True):
        out = super().mlp_record(region, batch, params, acc, clip, header)
        label = getattr(self, "_label", None)
        if not header or label is None or label == batch:
            return out
        relabelled = super().mlp_record(region, label, params, acc, clip, header)
        return [*out[:-1], relabelled[-1]]

    def flag(self, name, batch):
        label = getattr(self, "_label", None)
        return super().flag(name, batch if label is None or not name.startswith("mlp") else label)

    def epochs(self, op):
        self._label = self._labels.get(op.uid)
        try:
            return super().epochs(op)
        finally:
            self._label = None


ADVERSARIES = [
    ("cxl-b", WrongBatchAck, "2x2"),
    ("cxl-d", RedoWrongBatchAck, "2x2"),
    ("cxl-b", OwnFlagsNotAwaited, "2x2"),
    ("cxl-b", AcksPerGpu, "1x2"),
    ("cxl-d", RedoAcksPerGpu, "1x2"),
    ("cxl", MlpCommitOwnSlices, "2x2"),
    ("cxl-b", SlotGateOffOneLog, "2x2"),
    ("cxl-d", RedoUpdateBeforeCommit, "2x2"),
    ("cxl-b", CommitWithLastFlag, "2x2"),
    ("cxl", MlpCommitWithLastHeader, "2x2"),
    ("cxl-b", CommitWordUnchecked, "2x2"),
    ("cxl-d", RedoCommitUnchecked, "2x2"),
    ("cxl-b", CommitCheckMissesLowBit, "2x2"),
    ("cxl", MlpCommitUnchecked, "2x2"),
    ("cxl", PrefersSecondSlot, "2x2"),
    ("cxl", StaleSlotLabel, "2x2"),
    ("cxl", CompletionBatchLabel, "multi_slice"),
]
ESCAPED_BEFORE = (
    "WrongBatchAck",
    "RedoWrongBatchAck",
    "OwnFlagsNotAwaited",
    "AcksPerGpu",
    "RedoAcksPerGpu",
    "MlpCommitOwnSlices",
    "SlotGateOffOneLog",
    "RedoCommitUnchecked",
)
HELD_OUT = ("cxl", CompletionOrderLabels)
"""The single-device relaxed mutant round 2 did not catch (its run: ``single_run``)."""


def multi_slice_run(system: str, devices: int = 2) -> RunOptions:
    """A run whose MLP copies each span several slices (dlrm_kaggle, 50 rows, batch 64,
    8 batches: its MLPs take 3 to 4 interaction + top-MLP windows to log), on
    ``devices`` GPUs x CXL-MEMs."""
    return RunOptions(system=system, model="dlrm_kaggle", rows=50, batch_size=64, batches=8,
                      gpus=devices, cxl_mems=devices, progress=False)  # fmt: skip


def single_run(system: str) -> RunOptions:
    """multi_slice_run on one device."""
    return multi_slice_run(system, 1)


def rmc2_run(system: str, devices: int) -> RunOptions:
    """suite_run on rmc2, on ``devices`` GPUs x CXL-MEMs: its MLP copies span 2 slices,
    each copy's first with a head up to the first 4 KiB boundary (the record's payload
    starts 256 B into it). A device's half of the MLPs fits one slice, so on several
    devices the PMEM writes at half its rate (1.92 GB/s a controller by default)."""
    rate = "board.shard{}.cxl_mem.pmem.ctrl_write_bandwidth"
    slow = [(rate.format(m), "0.96GB/s") for m in range(devices)] if devices > 1 else []
    return suite_run(system, model="rmc2", gpus=devices, cxl_mems=devices, sets=slow)
