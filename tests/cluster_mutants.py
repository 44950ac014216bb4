"""Broken cross-device protocols only a check across devices can catch: each removes
one thing the cluster's commit relies on (every device's acknowledgement before the
commit word, the rollback of devices that got ahead, the MLP commit)."""

from __future__ import annotations

from components.persistence.cluster import (
    ClusterRelaxed,
    ClusterRelaxedDevice,
    ClusterUndo,
)
from components.persistence.protocols import UndoProtocol

LOGS = ("emb_log", "mlp_log", "ckpt_log")


class CommitOnFirstDevice(ClusterUndo):
    """The coordinator writes the commit word once ITS OWN flags are durable (with its
    flag), not after every device acknowledged: the commit may be durable while another
    device's log of the batch is not."""

    def epochs(self, op):
        epochs = super().epochs(op)
        if op.name in LOGS and self.device_of(op) == 0 and op.facts is not None and epochs:
            epochs[-1] = [*epochs[-1], self.commit_write("commit", op.batch)]
        return epochs


def last_logs(protocol, ops) -> set[int]:
    """Per batch, the uid of the device log op that ends last: the one a coordinator
    that counts bytes instead of acknowledgements commits beside."""
    last: dict[int, object] = {}
    for op in ops:
        if op.name in LOGS and op.facts is not None and protocol.device_of(op) is not None:
            if op.batch not in last or op.end > last[op.batch].end:
                last[op.batch] = op
    return {op.uid for op in last.values()}


class CommitBeforeLastAck(ClusterUndo):
    """The commit word is written before the last device's acknowledgement: it races
    that device's log records (declared in their epoch, before its flag's fence)."""

    def prepare(self, ops):
        super().prepare(ops)
        self._last = last_logs(self, ops)

    def epochs(self, op):
        epochs = super().epochs(op)
        if op.uid in self._last and epochs:
            epochs[0] = [*epochs[0], self.commit_write("commit", op.batch)]
        return epochs


class _RollsBackCommittedOnly(UndoProtocol):
    def plan_from(self, image, rec, emb, mlp, resume):
        return super().plan_from(image, rec, {n: r for n, r in emb.items() if n <= resume},
                                 mlp, resume)  # fmt: skip


class NoRollbackAhead(ClusterUndo):
    """Each device rolls back only up to the committed batch: a device that got ahead
    (logged and updated the next batch while another had not) keeps its newer rows."""

    device_protocol = _RollsBackCommittedOnly


class _OwnNewestCopy(ClusterRelaxedDevice):
    def mlp_for(self, image, rec, mlp, resume):
        usable = [n for n in mlp if n <= resume]
        if not usable:
            batch, params, acc = self.base(image, rec)
            return batch, params, acc, []
        region = mlp[max(usable)]
        self.read_mlp(rec, region)
        batch, params, acc = image.mlp_record(region)
        return batch, params, acc, self.rebase(image, region)


class TrustsDeviceMlpCopies(ClusterRelaxed):
    """Relaxed MLPs from each device's own newest flagged copy (the single-device rule),
    not from the copy the cluster committed: a stripe is trusted while another device's
    stripe of that copy (and the MLP commit) is not durable; the stripes are labelled
    with the newest."""

    device_protocol = _OwnNewestCopy

    def merge(self, image, recs, batch, extra=()):
        newest = max(r.mlp_batch for r in recs)
        for r in recs:
            r.mlp_batch = newest
        return super().merge(image, recs, batch, extra)


CLUSTER_MUTANTS = [
    ("cxl-b", CommitOnFirstDevice),
    ("cxl-b", CommitBeforeLastAck),
    ("cxl-b", NoRollbackAhead),
    ("cxl", TrustsDeviceMlpCopies),
]
