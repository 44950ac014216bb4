"""Batches kept on disk for the other runs that draw the same inputs.

A sweep runs every system on the same (model, seed) batches, and each run generated
every batch again and sorted its rows to find the distinct ones: ~4 ms of an RM1 CXL
batch's ~15 ms of CPU, ~17 ms of RM2's ~60. SharedBatches stores each batch the first
run generates, with its distinct rows and their counts, in a folder the sweep's runs
share (one machine), and the other runs load it instead (~0.7 ms for RM1): the same
arrays, bit for bit, so stats do not change.

A folder per generator identity: a hash of everything that decides a batch (the
generator's parameters, the model, numpy's version and the source of the modules that
draw it), so a changed generator never reads another's batches. Writes are atomic
(a temp file renamed), so a run killed mid-write leaves no partial batch (its temp file
keeps the others from storing that batch); a batch that does not load (corrupt,
truncated) is generated again. Runs store the first batches up to MAX_FOLDER_BYTES
and stop storing when the disk would keep less than MIN_FREE_BYTES free: the cache
saves CPU, never results.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import zlib
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

import numpy as np

from workloads import inputs, rowgen
from workloads.inputs import Batch, BatchSource, DistinctRows, InputGenerator

MIN_FREE_BYTES = 4 << 30
"""Free disk a run leaves when it stores batches: below it, it generates without storing."""
MAX_FOLDER_BYTES = 4 << 30
"""Batches of one generator stored at most: batch i is stored while (i + 1) times its
size fits (2,600 RM1 batches, 650 RM2), so a long sweep's folder stays bounded; the
batches beyond are drawn by every run."""
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
        self._offsets = tuple(int(o) for o in generator.spec.table_offsets)
        self.loaded = 0  # batches taken from the folder (the rest were generated)
        self._storing = True

    def batch(self, index: int) -> Batch:
        path = self.folder / f"{index}.batch"
        try:
            batch = read_batch(path, self.spec.num_tables, self.batch_size, self._offsets)
        except (OSError, ValueError):
            batch = self._generator.batch(index)  # absent, or unreadable: drawn again
            if self._storing:
                batch = self._store(path, batch, index)
        else:
            self.loaded += 1
        return batch

    def _store(self, path: Path, batch: Batch, index: int) -> Batch:
        """Store batch ``index`` with its distinct rows (found once here, for this run
        too), unless another run is storing it now (runs started together draw the same
        batches at once, and one of them writing each is enough) or the folder's bound
        is reached."""
        rows, counts = batch.distinct_rows(self.spec.table_offsets)
        batch = replace(batch, distinct=DistinctRows(self._offsets, rows, counts))
        parts = stored_parts(batch)
        if (index + 1) * (
            len(MAGIC) + CHECK_BYTES + sum(p.nbytes for p in parts)
        ) > MAX_FOLDER_BYTES:
            self._storing = False
            return batch
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if shutil.disk_usage(self.folder).free < MIN_FREE_BYTES:
                self._storing = False
                return batch
            with open(tmp, "xb") as out:  # exclusive: a run storing it already has it
                write_parts(out, parts)
            os.replace(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a full or read-only disk: go on generating
            self._storing = False
            with contextlib.suppress(OSError):  # ours, if the write failed
                tmp.unlink()
        return batch


# A stored batch: MAGIC, then int64 tables T, samples B, dense features D, distinct rows
# U, the width W (4 or 8 bytes) of row ids and counts, and T index counts; then dense
# (B x D float32), labels (B float32), offsets (T x (B + 1) int64), the indices (table
# after table), the distinct global rows and their lookup counts (U each), these three
# as W-byte integers: raw, one read, views into it (npz's zip members cost as much to
# load as the batch does to draw), row ids in 4 bytes where every one fits (writing
# takes ~3 ms per MB on the VMs measured); last, the CRC-32 of everything between MAGIC
# and it, as an int64: a damaged batch (one row id changed) is drawn again, never used.
MAGIC = b"TCXLBAT4"
CHECK_BYTES = 8
HEADER_WORDS = 5  # T, B, D, U, W, then T index counts


def write_batch(out: BinaryIO, batch: Batch) -> None:
    """``batch``, with its distinct rows, in the stored layout."""
    write_parts(out, stored_parts(batch))


def write_parts(out: BinaryIO, parts: list[np.ndarray]) -> None:
    out.write(MAGIC)
    check = 0
    for part in parts:
        data = memoryview(part).cast("B")
        check = zlib.crc32(data, check)
        out.write(data)
    out.write(np.array([check], dtype=np.int64).tobytes())


def stored_parts(batch: Batch) -> list[np.ndarray]:
    """The arrays of ``batch``'s stored layout after MAGIC, in order."""
    counts = [idx.size for idx in batch.indices]
    distinct = batch.distinct
    if distinct is None:
        raise ValueError("a batch is stored with its distinct rows")
    narrow = max(int(distinct.rows[-1]) if distinct.rows.size else 0, sum(counts)) < 2**31
    width = np.int32 if narrow else np.int64
    header = [len(counts), *batch.dense.shape, distinct.rows.size, 4 if narrow else 8, *counts]
    return [
        np.array(header, dtype=np.int64),
        np.ascontiguousarray(batch.dense, dtype=np.float32),
        np.ascontiguousarray(batch.labels, dtype=np.float32),
        np.stack(batch.offsets).astype(np.int64, copy=False),
        *(idx.astype(width) for idx in batch.indices),
        distinct.rows.astype(width),
        distinct.counts.astype(width),
    ]


def _read_regular(path: Path) -> np.ndarray:
    """The file's bytes; OSError unless it is a regular file (opened O_NONBLOCK and
    checked first, so a FIFO in the folder never blocks the batch-making thread)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        if info.st_size > MAX_FOLDER_BYTES:
            raise OSError(f"{path}: larger than a stored batch can be")
        raw = np.empty(info.st_size, dtype=np.uint8)  # writable, as the batch's arrays are
        if handle.readinto(memoryview(raw)) != info.st_size:
            raise OSError(f"{path}: shorter than its size")
        return raw


def read_batch(path: Path, tables: int, samples: int, table_offsets: tuple[int, ...]) -> Batch:
    """A stored batch of ``tables`` tables and ``samples`` samples, its distinct rows
    found with ``table_offsets``; ValueError if the file is not one (truncated, another
    shape, offsets that do not end at the counts, distinct rows that do not add up)."""
    raw = _read_regular(path)
    if raw.size < len(MAGIC) + CHECK_BYTES:
        raise ValueError(f"{path}: not a stored batch")
    body, check = raw[len(MAGIC) : -CHECK_BYTES], raw[-CHECK_BYTES:].view(np.int64)[0]
    if zlib.crc32(body) != int(check):
        raise ValueError(f"{path}: a damaged stored batch (its checksum differs)")
    raw = raw[:-CHECK_BYTES]
    head = 8 * (1 + HEADER_WORDS + tables)
    if raw.size < head or raw[:8].tobytes() != MAGIC:
        raise ValueError(f"{path}: not a stored batch")
    header = raw[8:head].view(np.int64)
    dense_features, distinct, width = int(header[2]), int(header[3]), int(header[4])
    counts = header[HEADER_WORDS:]
    shape_ok = int(header[0]) == tables and int(header[1]) == samples and width in (4, 8)
    if not shape_ok or (header[2:] < 0).any():
        raise ValueError(f"{path}: a stored batch of another shape")
    lookups = int(counts.sum())
    sizes = [4 * samples * dense_features, 4 * samples, 8 * tables * (samples + 1)]
    sizes += [width * lookups, width * distinct, width * distinct]
    if raw.size != head + sum(sizes):
        raise ValueError(f"{path}: a truncated stored batch")
    ends = np.cumsum([head, *sizes])
    part = [raw[ends[i] : ends[i + 1]] for i in range(len(sizes))]
    ids = np.int32 if width == 4 else np.int64
    dense = part[0].view(np.float32).reshape(samples, dense_features)
    offsets = part[2].view(np.int64).reshape(tables, samples + 1)
    indices = np.split(part[3].view(ids).astype(np.int64), np.cumsum(counts)[:-1])
    rows, looked_up = (p.view(ids).astype(np.int64) for p in part[4:])
    if (offsets[:, 0] != 0).any() or (offsets[:, -1] != counts).any():
        raise ValueError(f"{path}: a stored batch's offsets do not match its indices")
    if int(looked_up.sum()) != lookups or (looked_up < 1).any() or (rows[1:] <= rows[:-1]).any():
        raise ValueError(f"{path}: a stored batch's distinct rows do not match its indices")
    found = DistinctRows(table_offsets, rows, looked_up)
    return Batch(dense, indices, list(offsets), part[1].view(np.float32), found)
