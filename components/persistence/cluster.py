"""One checkpoint across several CXL-MEMs: the cluster's image, commit and recovery.

Each CXL-MEM keeps its own image (its shard of the tables, its undo or redo log slots
and flags, its stripe of the MLP parameters and of their log) and runs its system's
single-device protocol on it (components/persistence/protocols.py). What a single
device cannot give is agreement: a power failure can leave batch N's flags durable on
some devices and not on others. The coordinator (CXL-MEM 0) therefore keeps commit
words after its flags (``COMMIT_NAMES``), written by the board's ``commit`` op only
once every device has acknowledged its flags over CXL.io (components/boards/
disaggregated.py), and by ``mlp_commit`` once every device's stripe of a relaxed MLP
copy is flagged. The commit word, not any device's flags, says which batch the
cluster holds:
- redo (cxl-d): commit = N: every device logged N; updates in place wait for it.
  Recovery replays every device's log of N and resumes at N + 1.
- undo (cxl-b): commit = N: every device holds both undo logs of N. Recovery rolls
  every device back to N (a device ahead rolls back its newer logs too) and takes each
  device's MLP stripe of N.
- relaxed (cxl): commit = N as undo (embedding logs only); ``mlpc{k}`` = s: every
  device's MLP-log slot k holds its stripe of the copy of batch s. Recovery takes the
  newest committed copy not newer than N (else the base records, which every device
  rebases together) and clears every MLP flag and MLP commit word.

The devices' images lie side by side in one buffer (``ClusterLayout``: device m's
layout has ``base`` = its offset), so the journal, the crash explorer and the checker
work on the cluster as on one image, and a crash state may keep any subset of the
writes in flight on every device: nothing orders persists across devices but the
commit's acknowledgements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from components.persistence.image import (
    COMMIT_NAMES,
    FLAG_NAMES,
    WORD,
    CorruptImage,
    ImageBuffer,
    ImageLayout,
    PmemImage,
    _align,
    flag_batches,
    flag_word,
)
from components.persistence.protocols import (
    BatchFacts,
    OpView,
    Protocol,
    Recovery,
    RedoProtocol,
    RelaxedUndoProtocol,
    UndoProtocol,
    pad_params,
    raise_corrupt,
)
from components.persistence.writes import Writes, all_words, words_after

_DEVICE = re.compile(r"^cxl_mem(\d+)\.")
RECORDS = ("emb0", "emb1", "mlp0", "mlp1", "base")


@dataclass(frozen=True, eq=False)
class ClusterLayout:
    """M device layouts in one address space, and where every global row and MLP
    parameter lives: ``owner``/``local`` per global row, ``stripes`` per device."""

    devices: tuple[ImageLayout, ...]
    owner: np.ndarray
    local: np.ndarray
    stripes: tuple[int, ...]
    dim: int

    @classmethod
    def build(cls, layouts, owner: np.ndarray, local: np.ndarray, stripes) -> ClusterLayout:
        """Device layouts (as the boards' timing addresses them) placed side by side; the
        first is the coordinator, with the commit words."""
        placed, base = [], 0
        for m, layout in enumerate(layouts):
            placed.append(replace(layout, base=base, commit=m == 0))
            base += _align(layout.size)
        return cls(tuple(placed), owner, local, tuple(stripes), layouts[0].dim)

    @property
    def adagrad(self) -> bool:
        return False

    @property
    def total_rows(self) -> int:
        return int(self.owner.size)

    @property
    def mlp_count(self) -> int:
        return sum(self.stripes)

    @property
    def size(self) -> int:
        last = self.devices[-1]
        return last.base + _align(last.size)

    def regions(self) -> dict[str, tuple[int, int]]:
        cached = self.__dict__.get("_regions")
        if cached is None:
            cached = {
                f"d{m}.{name}": (lay.base + start, size)
                for m, lay in enumerate(self.devices)
                for name, (start, size) in lay.regions().items()
            }
            object.__setattr__(self, "_regions", cached)
        return cached

    def region_starts(self) -> tuple[list[str], np.ndarray]:
        names, starts = [], []
        for m, lay in enumerate(self.devices):
            local, at = lay.region_starts()
            names += [f"d{m}.{name}" for name in local]
            starts.append(at + lay.base)
        return names, np.concatenate(starts)

    def device_at(self, offsets) -> np.ndarray:
        """The device holding each byte offset of the cluster's address space."""
        bases = np.array([device.base for device in self.devices], dtype=np.int64)
        return np.searchsorted(bases, offsets, side="right") - 1

    def split(self, name: str) -> tuple[int, str]:
        """(device, local region name) of a cluster region name ``d{m}.{name}``."""
        device, local = name.split(".", 1)
        return int(device[1:]), local

    def offset(self, name: str) -> int:
        m, local = self.split(name)
        return self.devices[m].offset(local)

    def device_rows(self, m: int) -> np.ndarray:
        """Global ids of device m's rows, in its image's order."""
        cached = self.__dict__.setdefault("_rows", {})
        if m not in cached:
            mine = np.flatnonzero(self.owner == m)
            cached[m] = mine[np.argsort(self.local[mine], kind="stable")]
        return cached[m]

    def stripe_start(self, m: int) -> int:
        return sum(self.stripes[:m])

    def commit_offset(self, name: str) -> int:
        return self.devices[0].commit_offset(name)


class DeviceImage(PmemImage):
    """Device m's image inside a cluster's buffer: its reads are reported to the
    cluster under the cluster's region names (``d{m}.data``)."""

    def __init__(self, cluster: ClusterImage, m: int) -> None:
        self._cluster, self._m = cluster, m
        super().__init__(cluster.layout.devices[m], cluster.buf, cluster.path, cluster.identity)

    @property
    def generation(self):
        outer = self._cluster.generation
        if outer is None:
            return None
        return lambda name: outer(f"d{self._m}.{name}")

    @generation.setter
    def generation(self, value) -> None:
        """A device's generations are the cluster's (set there)."""

    def _read(self, name: str) -> None:
        self._cluster._read(f"d{self._m}.{name}")


def device_of_resource(resource: str | None) -> int | None:
    """The CXL-MEM whose unit an op ran on (``cxl_mem{m}.*``), None for the GPUs'."""
    match = _DEVICE.match(resource or "")
    return int(match.group(1)) if match else None


class ClusterImage(ImageBuffer):
    """The cluster's PMEM: every device's image in one buffer (``devices[m]`` views)."""

    def __init__(self, layout: ClusterLayout, buf: np.ndarray, path: str | None = None,
                 identity: dict | None = None) -> None:  # fmt: skip
        super().__init__(layout, buf, path, identity)
        self.devices = [DeviceImage(self, m) for m in range(len(layout.devices))]

    @classmethod
    def create(cls, layout: ClusterLayout, table: np.ndarray, mlp: np.ndarray,
               identity: dict | None = None) -> ClusterImage:  # fmt: skip
        """Every device formatted with its rows and MLP stripe of the initial weights."""
        buf = np.zeros(layout.size, dtype=np.uint8)
        mlp = np.asarray(mlp, dtype=np.float32).reshape(-1)
        for m, lay in enumerate(layout.devices):
            start = layout.stripe_start(m)
            stripe = mlp[start : start + layout.stripes[m]]
            alone = PmemImage.create(replace(lay, base=0), table[layout.device_rows(m)], stripe)
            buf[lay.base : lay.base + lay.size] = alone.buf
        return cls(layout, buf, None, identity)

    def _read(self, name: str) -> None:
        if self.on_read is not None:
            self.on_read(name)
        if self.reads is not None:
            self.reads.add(name)

    def commit_word(self, name: str) -> int:
        """The batch a commit word marks (-1 unset); a word failing its check is corrupt."""
        self._read("d0.flags")
        at = self.layout.commit_offset(name)
        batch = int(flag_batches(self.buf[at : at + WORD].view("<u8"))[0])
        if batch == -2:
            raise CorruptImage(
                f"corrupt PMEM image {self.path}: commit word {name} fails its check"
            )
        return batch

    def table(self) -> np.ndarray:
        """The global table, gathered from every device's rows."""
        lay = self.layout
        out = np.empty((lay.total_rows, lay.dim), dtype=np.float32)
        for m, device in enumerate(self.devices):
            out[lay.device_rows(m)] = device.table()
        return out

    def copy(self) -> ClusterImage:
        return ClusterImage(self.layout, np.array(self.buf, copy=True), self.path, self.identity)


def split_facts(layout: ClusterLayout, facts: BatchFacts, m: int) -> BatchFacts:
    """What batch N changes on device m: its rows (local ids, sorted as the global ones
    are) and its stripe of the MLPs (padded to whole words)."""
    mine = layout.owner[facts.rows] == m
    rows = layout.local[facts.rows[mine]]
    start, count = layout.stripe_start(m), layout.stripes[m]
    return BatchFacts(
        rows,
        facts.old[mine],
        facts.new[mine],
        pad_params(facts.mlp_before[start : start + count]),
        pad_params(facts.mlp_after[start : start + count]),
    )


class ClusterProtocol(Protocol):
    """Per-device protocols plus the coordinator's commit words (see module doc)."""

    system_kind = "cluster"
    device_protocol: type[Protocol] = Protocol

    def __init__(self, layout: ClusterLayout) -> None:
        super().__init__(layout)
        self.protocols = [self.device_protocol(lay) for lay in layout.devices]
        self._facts: dict[tuple[int, int], BatchFacts] = {}

    # ----- what the crash checker asks of a protocol ---------------------------------
    def image_over(self, buf: np.ndarray) -> ClusterImage:
        return ClusterImage(self.layout, buf)

    def devices(self) -> range:
        return range(len(self.layout.devices))

    def always_read(self) -> list[str]:
        return [f"d{m}.{n}" for m in self.devices() for n in ("flags", "base", "data")]

    def commit_regions(self) -> list[str]:
        return [f"d{m}.flags" for m in self.devices()]

    def record_regions(self) -> list[str]:
        return [f"d{m}.{n}" for m in self.devices() for n in RECORDS]

    def layout_of(self, region: str) -> ImageLayout:
        return self.layout.devices[self.layout.split(region)[0]]

    def metadata_words(self) -> list[int]:
        flags = [lay.flag_offset(name) for lay in self.layout.devices for name in FLAG_NAMES]
        return flags + [self.layout.commit_offset(name) for name in COMMIT_NAMES]

    def base_regions(self) -> list[str]:
        return [f"d{m}.base" for m in self.devices()]

    def cross_device(self, words: np.ndarray) -> tuple[str, ...]:
        """The crash state's cross-device kinds, from the raw flag and commit words:
        ``flags_disagree`` (the devices' newest embedding-log flags name different
        batches), ``ahead_of_commit`` (a device flagged a batch newer than the commit
        word), ``mlp_copies_disagree`` (relaxed: the newest flagged MLP copies differ)."""
        lay = self.layout
        at = np.array([dev.flags_word() for dev in lay.devices], dtype=np.int64)
        flags = flag_batches(words[at[:, None] + np.arange(len(FLAG_NAMES))].reshape(-1))
        flags = flags.reshape(len(lay.devices), len(FLAG_NAMES))
        emb, mlp = flags[:, :2].max(axis=1), flags[:, 2:].max(axis=1)
        at = lay.commit_offset("commit") // WORD
        commit = int(flag_batches(words[at : at + 1])[0])
        out = []
        if emb.min() != emb.max():
            out.append("flags_disagree")
        if emb.max() > commit:
            out.append("ahead_of_commit")
        if self.system_kind.endswith("relaxed") and mlp.min() != mlp.max():
            out.append("mlp_copies_disagree")
        return tuple(out)

    def table_after(self, words: np.ndarray, rec: Recovery):
        """The global table after the recovery's writes, the image left untouched."""
        lay = self.layout
        dst, values = all_words(rec.writes)
        table = np.empty((lay.total_rows, lay.dim), dtype=np.float32)
        for m, dev in enumerate(lay.devices):
            start = dev.offset("data") // WORD
            part = words_after(words, start, start + dev.regions()["data"][1] // WORD, dst, values)
            table[lay.device_rows(m)] = part.view(np.float32).reshape(-1, lay.dim)
        return table, None

    # ----- the run's writes ------------------------------------------------------------
    def device_of(self, op: OpView) -> int | None:
        return device_of_resource(op.resource)

    def device_view(self, op: OpView, m: int) -> OpView:
        facts = None
        if op.facts is not None:
            key = (op.batch, m)
            if key not in self._facts:
                self._facts[key] = split_facts(self.layout, op.facts, m)
            facts = self._facts[key]
        return replace(op, facts=facts)

    def prepare(self, ops: list[OpView]) -> None:
        for m, protocol in enumerate(self.protocols):
            mine = [self.device_view(op, m) for op in ops if self.device_of(op) in (m, None)]
            protocol.prepare(mine)

    def epochs(self, op: OpView) -> list[list[Writes]]:
        if op.name == "commit":
            return [[self.commit_write("commit", op.batch)]]
        m = self.device_of(op)
        if m is None:
            return []
        return self.protocols[m].epochs(self.device_view(op, m))

    def commit_write(self, name: str, batch: int) -> Writes:
        word = np.array([flag_word(batch)], dtype="<u8")
        return Writes.one(self.layout.commit_offset(name), word)

    # ----- recovery ----------------------------------------------------------------------
    def plan(self, image: ClusterImage) -> Recovery:
        raise NotImplementedError

    def merge(self, image: ClusterImage, recs: list[Recovery], batch: int,
              extra: list[Writes] = ()) -> Recovery:  # fmt: skip
        """The cluster's recovery from the devices': epoch k of every device together
        (nothing orders writes across devices within an epoch), ``extra`` in the last;
        the MLPs their stripes in order, all of one batch."""
        mlp_batches = {r.mlp_batch for r in recs}
        if len(mlp_batches) > 1:
            raise_corrupt(image, f"MLP stripes of batches {sorted(mlp_batches)} across devices")
        depth = max(len(r.epochs) for r in recs)
        epochs = [[g for r in recs if k < len(r.epochs) for g in r.epochs[k]] for k in range(depth)]
        if extra:
            epochs = (epochs or [[]])[:-1] + [(epochs or [[]])[-1] + list(extra)]
        counts = self.layout.stripes
        mlp = np.concatenate([r.mlp[:c] for r, c in zip(recs, counts, strict=True)])
        rec = Recovery(batch, mlp, mlp_batches.pop(), epochs)
        rec.reads = [read for r in recs for read in r.reads]
        return rec

    def finish(self, image: ClusterImage, rec: Recovery) -> Recovery:
        dst, values = all_words(rec.writes)
        image.words[dst] = values
        rec.table = image.table()
        rec.row_acc = None
        rec.mlp = np.array(rec.mlp, copy=True)
        return rec

    def committed(self, image: ClusterImage) -> int | None:
        """The batch the commit word names (None: no batch committed yet)."""
        batch = image.commit_word("commit")
        return None if batch < 0 else batch


class ClusterRedo(ClusterProtocol):
    """CXL-D across devices: commit N = every device's redo log of N is durable."""

    system_kind = "cluster-redo"
    device_protocol = RedoProtocol

    def plan(self, image: ClusterImage) -> Recovery:
        last = self.committed(image)
        recs, clears = [], []
        for protocol, device in zip(self.protocols, image.devices, strict=True):
            rec = Recovery(0, np.zeros(0, np.float32), 0)
            protocol.read_flags(rec)
            flagged = protocol.flagged(device, "emb")
            recs.append(protocol.plan_from(device, rec, flagged, last))
            clears += protocol.clear(r for n, r in flagged.items() if last is None or n > last)
        return self.merge(image, recs, 0 if last is None else last + 1, clears)


class ClusterUndo(ClusterProtocol):
    """CXL-B across devices: commit N = every device holds both undo logs of N."""

    system_kind = "cluster-undo"
    device_protocol = UndoProtocol

    def plan(self, image: ClusterImage) -> Recovery:
        resume = self.committed(image) or 0
        recs = []
        for protocol, device in zip(self.protocols, image.devices, strict=True):
            rec = Recovery(0, np.zeros(0, np.float32), 0)
            protocol.read_flags(rec)
            emb, mlp = protocol.flagged(device, "emb"), protocol.flagged(device, "mlp")
            recs.append(protocol.plan_from(device, rec, emb, mlp, resume))
        return self.merge(image, recs, resume, self.commit_clears())

    def commit_clears(self) -> list[Writes]:
        return []


class ClusterRelaxedDevice(RelaxedUndoProtocol):
    """One device of the relaxed cluster: its MLP stripe is the one the cluster's MLP
    commit names (``chosen``: the slot's region, or None for the base record)."""

    chosen: tuple[str, int] | None = None

    def mlp_for(self, image: PmemImage, rec: Recovery, mlp: dict[int, str], resume: int):
        if self.chosen is None:
            batch, params, acc = self.base(image, rec)
            return batch, params, acc, []
        region, batch = self.chosen
        self.read_mlp(rec, region)
        found, params, acc = image.mlp_record(region)
        if found != batch or mlp.get(batch) != region:
            raise_corrupt(image, f"{region} holds batch {found}, the MLP commit says {batch}")
        return found, params, acc, self.rebase(image, region)


class ClusterRelaxed(ClusterUndo):
    """CXL across devices: embedding logs committed per batch, MLP copies per copy."""

    system_kind = "cluster-relaxed"
    device_protocol = ClusterRelaxedDevice

    def prepare(self, ops: list[OpView]) -> None:
        super().prepare(ops)
        self._mlp_commits = {}
        flags = [self.layout.devices[0].flag_offset(f"mlp{k}") for k in (0, 1)]
        completes = sorted(
            (op.start, k, op.uid)
            for op in ops
            if op.name == "mlp_log_slice" and self.device_of(op) == 0
            for k in (0, 1)
            if (op.requests.addr == flags[k]).any()
        )
        slices = self.protocols[0]._slices
        for op in ops:
            if op.name != "mlp_commit":
                continue
            for k in (0, 1):
                if (op.requests.addr == self.layout.commit_offset(f"mlpc{k}")).any():
                    done = [
                        uid for start, slot, uid in completes if slot == k and start <= op.start
                    ]
                    if done:
                        self._mlp_commits[op.uid] = (k, slices[done[-1]][1])

    def epochs(self, op: OpView) -> list[list[Writes]]:
        if op.name == "mlp_commit":
            slot = self._mlp_commits.get(op.uid)
            return [] if slot is None else [[self.commit_write(f"mlpc{slot[0]}", slot[1])]]
        return super().epochs(op)

    def plan(self, image: ClusterImage) -> Recovery:
        resume = self.committed(image) or 0
        copies = {k: image.commit_word(f"mlpc{k}") for k in (0, 1)}
        usable = [(s, k) for k, s in copies.items() if 0 <= s <= resume]
        bases = {self.base_batch(device, protocol) for device, protocol in
                 zip(image.devices, self.protocols, strict=True)}  # fmt: skip
        base = bases.pop() if len(bases) == 1 else None
        if base is not None and base > resume:
            raise_corrupt(image, f"the base records hold batch {base}, beyond {resume}")
        if usable and (base is None or max(usable)[0] > base):
            batch, k = max(usable)
            chosen = (f"mlp{k}", batch)
        elif base is not None:
            chosen = None
        else:
            raise_corrupt(image, "the devices' base records disagree and no MLP copy is committed")
        for protocol in self.protocols:
            protocol.chosen = chosen
        return super().plan(image)

    @staticmethod
    def base_batch(device: PmemImage, protocol: Protocol) -> int | None:
        """A device's base record batch (None: torn by an interrupted rebase)."""
        try:
            return protocol.base(device)[0]
        except CorruptImage:
            return None

    def commit_clears(self) -> list[Writes]:
        return [Writes.word(self.layout.commit_offset(f"mlpc{k}"), 0) for k in (0, 1)]


CLUSTER_PROTOCOLS: dict[str, type[ClusterProtocol]] = {
    "cxl-d": ClusterRedo,
    "cxl-b": ClusterUndo,
    "cxl": ClusterRelaxed,
}
