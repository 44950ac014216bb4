"""Batches kept on disk for the other runs that draw the same inputs.

A sweep runs every system on the same (model, seed) batches, and each run generated
every batch again: ~2 ms of an RM1 CXL batch's ~15 ms of CPU. SharedBatches stores each
batch the first run generates in a folder the sweep's runs share (one machine), and
the other runs load it instead: the same arrays, bit for bit, so stats do not change.

A folder per generator identity: a hash of everything that decides a batch (the
generator's parameters, the model, numpy's version and the source of the modules that
draw it), so a changed generator never reads another's batches. Writes are atomic
(a temp file renamed), so a run killed mid-write leaves no partial batch; a batch that
does not load (corrupt, truncated) is generated again. A run stops storing batches when
the disk would keep less than MIN_FREE_BYTES free: the cache saves CPU, never results.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np

from workloads import inputs, rowgen
from workloads.inputs import Batch, BatchSource, InputGenerator

MIN_FREE_BYTES = 4 << 30
"""Free disk a run leaves when it stores batches: below it, it generates without storing."""
_DRAWING_MODULES = (inputs, rowgen)


def generator_identity(generator: InputGenerator) -> str:
    """A hash of everything that decides the generator's batches."""
    digest = hashlib.sha256()
    for module in _DRAWING_MODULES:
        digest.update(Path(module.__file__).read_bytes())
    described = (
        np.__version__,
        repr(generator.spec),
        generator.batch_size,
        generator.zipf_exponent,
        generator.reuse,
        generator.fixed_pooling,
        generator.teacher_scale,
        generator.teacher_bias,
        generator.seed,
    )
    digest.update(repr(described).encode())
    return digest.hexdigest()[:16]


class SharedBatches(BatchSource):
    """``generator``'s batches, loaded from ``folder`` where another run stored them."""

    def __init__(self, generator: InputGenerator, folder: str | Path) -> None:
        self._generator = generator
        self.batch_size = generator.batch_size
        self.spec = generator.spec
        self.folder = Path(folder) / generator_identity(generator)
        self.loaded = 0  # batches taken from the folder (the rest were generated)
        self._storing = True

    def batch(self, index: int) -> Batch:
        path = self.folder / f"{index}.batch"
        try:
            batch = read_batch(path, self.spec.num_tables, self.batch_size)
        except (OSError, ValueError):
            batch = self._generator.batch(index)  # absent, or unreadable: drawn again
            self._store(path, batch)
        else:
            self.loaded += 1
        return batch

    def _store(self, path: Path, batch: Batch) -> None:
        if not self._storing:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if shutil.disk_usage(self.folder).free < MIN_FREE_BYTES:
                self._storing = False
                return
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            write_batch(tmp, batch)
            os.replace(tmp, path)
        except OSError:  # a full or read-only disk: go on generating
            self._storing = False


# A stored batch: MAGIC, then int64 tables T, samples B, dense features D and T index
# counts, then dense (B x D float32), labels (B float32), offsets (T x (B + 1) int64) and
# the indices (int64, table after table): raw, one read, views into it (npz's zip
# members cost as much to load as the batch does to draw).
MAGIC = b"TCXLBAT1"


def write_batch(path: Path, batch: Batch) -> None:
    """``batch`` in the stored layout."""
    counts = [idx.size for idx in batch.indices]
    header = np.array([len(counts), *batch.dense.shape, *counts], dtype=np.int64)
    parts = (
        header,
        np.ascontiguousarray(batch.dense, dtype=np.float32),
        np.ascontiguousarray(batch.labels, dtype=np.float32),
        np.stack(batch.offsets).astype(np.int64, copy=False),
        *(np.ascontiguousarray(idx, dtype=np.int64) for idx in batch.indices),
    )
    with open(path, "wb") as out:
        out.write(MAGIC)
        for part in parts:
            out.write(memoryview(part).cast("B"))


def read_batch(path: Path, tables: int, samples: int) -> Batch:
    """A stored batch of ``tables`` tables and ``samples`` samples; ValueError if the
    file is not one (truncated, another shape, offsets that do not end at the counts)."""
    raw = np.fromfile(path, dtype=np.uint8)
    head = 8 * (4 + tables)
    if raw.size < head or raw[:8].tobytes() != MAGIC:
        raise ValueError(f"{path}: not a stored batch")
    header = raw[8:head].view(np.int64)
    dense_features, counts = int(header[2]), header[3:]
    if int(header[0]) != tables or int(header[1]) != samples or (counts < 0).any():
        raise ValueError(f"{path}: a stored batch of another shape")
    sizes = [4 * samples * dense_features, 4 * samples, 8 * tables * (samples + 1)]
    if raw.size != head + sum(sizes) + 8 * int(counts.sum()):
        raise ValueError(f"{path}: a truncated stored batch")
    at = head
    dense = raw[at : at + sizes[0]].view(np.float32).reshape(samples, dense_features)
    at += sizes[0]
    labels = raw[at : at + sizes[1]].view(np.float32)
    at += sizes[1]
    offsets = raw[at : at + sizes[2]].view(np.int64).reshape(tables, samples + 1)
    at += sizes[2]
    indices = np.split(raw[at:].view(np.int64), np.cumsum(counts)[:-1])
    if (offsets[:, 0] != 0).any() or (offsets[:, -1] != counts).any():
        raise ValueError(f"{path}: a stored batch's offsets do not match its indices")
    return Batch(dense, indices, list(offsets), labels)
