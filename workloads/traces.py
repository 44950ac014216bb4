"""Real traces as a run's inputs, read batch by batch (docs/workloads.md, "Traces").

Two layouts. facebookresearch/dlrm_datasets' FBGEMM embedding-bag requests: ``(indices,
offsets, lengths)``, one batch of B samples for T tables, in the published ``.pt`` (or
``.pt.gz``) or as the same arrays in an ``.npz``. And Criteo's Kaggle / Terabyte TSV
files, one sample per line. A reader offers InputGenerator's ``batch(index)`` and
``batches(count, start)``, so every run path takes it in the generator's place: batch k
is the trace's samples [k*bs, (k+1)*bs), and a run that needs more batches than the file
holds cycles through it. Memory stays flat in the trace's length: FBGEMM arrays are
memory-mapped where the file allows (trace_files.py) and TSV lines are read one batch at
a time, in one pass when batches are asked for in order.
"""

from __future__ import annotations

import functools
import re
from typing import BinaryIO

import numpy as np

from workloads.inputs import Batch, BatchSource, InputGenerator
from workloads.models import ModelSpec
from workloads.trace_files import (
    FBGEMM_ARRAYS,
    UNREADABLE,
    TraceError,
    bag_arrays,
    file_stamp,
    open_binary,
)

__all__ = ["BagTrace", "CriteoTrace", "TraceError", "open_trace", "trace_kind", "trace_pooling"]

CRITEO_DENSE = 13
CRITEO_TABLES = 26
CRITEO_FIELDS = 1 + CRITEO_DENSE + CRITEO_TABLES
"""A Criteo line: label, I1-I13 (integers), C1-C26 (categorical, 8 hex digits), tab
separated: the Kaggle Display Advertising Challenge's readme, read so by dlrm's
data_utils.getCriteoAdData (the Terabyte day files share the layout)."""
_BAG_SUFFIXES = (".pt", ".pt.gz", ".npz")
_TSV = re.compile(r"(\.tsv|\.txt|(^|[\\/])day_\d+)(\.gz)?$")
"""Criteo files as published: Kaggle's train.txt, Terabyte's day_0 .. day_23 (also
gzipped), or any .tsv."""
MAX_LINE_BYTES = 1 << 16
"""A Criteo line is ~200-400 bytes (40 fields); 64 KiB bounds what one line may hold."""
_DIGIT_OR_SIGN = np.zeros(256, dtype=bool)
_DIGIT_OR_SIGN[list(b"0123456789-")] = True
_HEX = np.full(256, 255, dtype=np.uint8)
_HEX[0] = 16  # numpy's padding of a shorter bytes string: not a digit
for _digit, _char in enumerate(b"0123456789abcdef"):
    _HEX[_char] = _digit
    _HEX[ord(chr(_char).upper())] = _digit


def trace_kind(path: str) -> str:
    """'bags' (FBGEMM arrays) or 'criteo' (TSV), by the file's name."""
    if path.endswith(_BAG_SUFFIXES):
        return "bags"
    if _TSV.search(path):
        return "criteo"
    raise TraceError(
        f"--trace {path}: unknown trace format; expected .pt, .pt.gz or .npz (FBGEMM "
        "indices, offsets, lengths) or .tsv, .txt or day_N, optionally .gz (Criteo TSV)"
    )


@functools.lru_cache(maxsize=2)
def _cached_bags(path: str, stamp: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One load per file per process: a run validates, sizes and reads the same trace."""
    return bag_arrays(path)


def _bags(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _cached_bags(path, file_stamp(path))


def trace_pooling(path: str, spec: ModelSpec, batch_size: int) -> int:
    """Lookups per table per sample that bound every batch the trace yields (rounded
    up): the run sizes its per-batch buffers and logs (the image's update regions) by
    the model's lookups per table, so a trace's spec carries this instead."""
    if trace_kind(path) == "criteo":
        open_binary(path).close()
        _check_tables(path, CRITEO_TABLES, spec)
        return 1
    indices, offsets, lengths = _bags(path)
    tables, samples = _check_bags(path, indices, offsets, lengths, spec, batch_size)
    span = samples // batch_size * batch_size
    per_batch = np.zeros(samples // batch_size, dtype=np.int64)
    for table in range(tables):  # per table: a strided slice of the offsets, not all of them
        base = table * samples
        per_batch += np.diff(np.asarray(offsets[base : base + span + 1 : batch_size], np.int64))
    return max(1, -(-int(per_batch.max()) // (tables * batch_size)))


def open_trace(
    path: str, spec: ModelSpec, batch_size: int, synthetic: InputGenerator | None = None
) -> BagTrace | CriteoTrace:
    """The reader for ``path``, checked against the model. FBGEMM traces carry no dense
    features or labels: those of ``synthetic``'s batch of the same index are used."""
    if trace_kind(path) == "criteo":
        return CriteoTrace(path, spec, batch_size)
    if synthetic is None:
        synthetic = InputGenerator(spec, batch_size)
    return BagTrace(path, *_bags(path), spec, batch_size, synthetic)


def _check_bags(
    path: str,
    indices: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    spec: ModelSpec,
    batch_size: int,
) -> tuple[int, int]:
    """The arrays' shapes as dlrm_datasets stores them, against the model's tables;
    returns (tables, samples)."""
    for name, array, ndim in (("indices", indices, 1), ("offsets", offsets, 1)):
        if array.ndim != ndim:
            raise TraceError(f"--trace {path}: {name} has {array.ndim} dimensions, expected 1")
    if lengths.ndim != 2:
        raise TraceError(
            f"--trace {path}: lengths has shape {lengths.shape}, expected (tables, batch)"
        )
    for name, array in zip(FBGEMM_ARRAYS, (indices, offsets, lengths), strict=True):
        if array.dtype.kind not in "iu":
            raise TraceError(f"--trace {path}: {name} holds {array.dtype}, expected integers")
    tables, samples = (int(n) for n in lengths.shape)
    _check_tables(path, tables, spec)
    if lengths.size and int(lengths.min()) < 0:
        table, sample = (int(i) for i in np.unravel_index(int(np.argmin(lengths)), lengths.shape))
        raise TraceError(
            f"--trace {path}: table {table}, sample {sample} has length "
            f"{int(lengths[table, sample])}; a bag's length is at least 0"
        )
    if offsets.shape[0] != tables * samples + 1:
        raise TraceError(
            f"--trace {path}: {offsets.shape[0]} offsets for {tables} tables x {samples} "
            f"samples (expected tables x samples + 1 = {tables * samples + 1})"
        )
    if int(offsets[-1]) > indices.shape[0]:
        raise TraceError(
            f"--trace {path}: offsets end at {int(offsets[-1])}, past the "
            f"{indices.shape[0]} indices"
        )
    if samples < batch_size:
        raise TraceError(
            f"--trace {path}: {samples} samples, fewer than the batch size {batch_size}"
        )
    return tables, samples


def _check_tables(path: str, tables: int, spec: ModelSpec) -> None:
    if tables != spec.num_tables:
        raise TraceError(
            f"--trace {path}: {tables} tables, model {spec.name} has {spec.num_tables}"
        )


def _check_rows(path: str, spec: ModelSpec, table: int, rows: np.ndarray, index: int) -> None:
    """Every row id inside its table (the trace gives the model's rows, never hashed)."""
    if rows.shape[0] == 0:
        return
    low, high, size = int(rows.min()), int(rows.max()), spec.rows_per_table[table]
    if low >= 0 and high < size:
        return
    bad = low if low < 0 else high
    capped = spec.init_rows[table] > size
    hint = f" (capped from {spec.init_rows[table]}: raise --rows)" if capped else ""
    raise TraceError(
        f"--trace {path}: batch {index} looks up row {bad} of table {table}, model "
        f"{spec.name} has {size} rows in it{hint}"
    )


class BagTrace(BatchSource):
    """An FBGEMM trace: table t's bags are ``offsets[t*B : (t+1)*B + 1]`` (global
    positions in ``indices``; FBGEMM's TBE layout, as fbgemm_gpu's bench utilities slice
    it), ``lengths`` (T, B) their sizes. Batch k holds samples [k*bs, (k+1)*bs) of every
    table (k modulo the file's B // bs batches); each batch is checked as it is read:
    lengths against offsets, every row inside its table."""

    def __init__(
        self,
        path: str,
        indices: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        spec: ModelSpec,
        batch_size: int,
        synthetic: InputGenerator,
    ) -> None:
        tables, samples = _check_bags(path, indices, offsets, lengths, spec, batch_size)
        if synthetic.batch_size != batch_size:
            raise ValueError("the synthetic inputs must have the trace's batch size")
        self.path, self.spec, self.batch_size = path, spec, batch_size
        self.count = samples // batch_size
        """Batches in the file (its trailing samples short of a batch are not used)."""
        self._indices, self._offsets, self._lengths = indices, offsets, lengths
        self._synthetic = synthetic
        self._tables, self._samples = tables, samples

    def batch(self, index: int) -> Batch:
        """Batch ``index``: the trace's indices, the synthetic batch's dense and labels."""
        bs, first = self.batch_size, (index % self.count) * self.batch_size
        indices, offsets = [], []
        for table in range(self._tables):  # contiguous slices of one table at a time
            base = table * self._samples + first
            bounds = np.asarray(self._offsets[base : base + bs + 1], dtype=np.int64)
            start, end = int(bounds[0]), int(bounds[-1])
            if not 0 <= start <= end <= self._indices.shape[0]:
                raise TraceError(
                    f"--trace {self.path}: batch {index}: table {table}'s offsets point "
                    f"outside the {self._indices.shape[0]} indices"
                )
            steps = np.diff(bounds)
            if (steps < 0).any():
                raise TraceError(
                    f"--trace {self.path}: batch {index}: table {table}'s offsets go backwards"
                )
            if not np.array_equal(steps, self._lengths[table, first : first + bs]):
                raise TraceError(
                    f"--trace {self.path}: batch {index}: table {table}'s offsets and "
                    "lengths disagree"
                )
            rows = np.asarray(self._indices[start:end], dtype=np.int64)
            _check_rows(self.path, self.spec, table, rows, index)
            indices.append(rows)
            offsets.append(bounds - start)
        synthetic = self._synthetic.batch(index)
        return Batch(synthetic.dense, indices, offsets, synthetic.labels)


class CriteoTrace(BatchSource):
    """A Criteo TSV file, one sample per line, streamed: batch k is lines
    [k*bs, (k+1)*bs) (k modulo the file's full batches, known once its end is read).
    The open file and its position are kept, so batches asked for in increasing order
    are one pass over the file; an earlier batch re-reads from the start.

    As dlrm's data_utils with --max-ind-range: an empty field is 0, categorical value
    v (hexadecimal) goes to row int(v, 16) % rows of its table; dense x becomes
    log(max(x, 0) + 1) in float32 (X_int[X_int < 0] = 0, then the collate's
    torch.log(x + 1)). One lookup per table per sample."""

    def __init__(self, path: str, spec: ModelSpec, batch_size: int) -> None:
        self._handle: BinaryIO | None = None  # first: __del__ closes it even if we raise
        open_binary(path).close()
        _check_tables(path, CRITEO_TABLES, spec)
        if spec.dense_features != CRITEO_DENSE:
            raise TraceError(
                f"--trace {path}: {CRITEO_DENSE} dense features (Criteo), model "
                f"{spec.name} has {spec.dense_features}"
            )
        self.path, self.spec, self.batch_size = path, spec, batch_size
        self.count: int | None = None
        """Full batches in the file, once its end has been read (None before)."""
        self._rows = np.asarray(spec.rows_per_table, dtype=np.uint64)
        self._line = 0  # lines of the file read (or skipped) through _handle

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __del__(self) -> None:
        self.close()

    def batch(self, index: int) -> Batch:
        bs = self.batch_size
        while True:
            first = (index if self.count is None else index % self.count) * bs
            lines = self._lines(first, bs)
            if lines is not None:
                return self._parse(lines, first)
            self.count = self._line // bs  # the file ended first: now its length is known
            if self.count == 0:
                raise TraceError(
                    f"--trace {self.path}: {self._line} samples, fewer than the batch size {bs}"
                )

    def _lines(self, first: int, count: int) -> list[bytes] | None:
        """Lines [first, first + count), or None when the file ends before them (then
        ``_line`` is the number of lines in the file)."""
        try:
            if self._handle is None or self._line > first:
                self.close()
                self._handle, self._line = open_binary(self.path), 0
            while self._line < first and self._read_line() is not None:
                self._line += 1
            lines = []
            while self._line == first and len(lines) < count:
                line = self._read_line()
                if line is None:
                    break
                lines.append(line)
        except UNREADABLE as exc:  # e.g. a truncated or corrupt .gz
            raise TraceError(f"--trace {self.path}: cannot read it ({exc})") from None
        self._line += len(lines)
        return lines if len(lines) == count else None

    def _read_line(self) -> bytes | None:
        """The next line, None at the end; one longer than MAX_LINE_BYTES is refused
        before more of it is read (a file that is not a TSV may have no newline)."""
        line = self._handle.readline(MAX_LINE_BYTES + 1)
        if len(line) > MAX_LINE_BYTES:
            raise TraceError(
                f"--trace {self.path}: line {self._line + 1} is longer than "
                f"{MAX_LINE_BYTES:,} bytes: not a Criteo TSV line"
            )
        return line or None

    def _parse(self, lines: list[bytes], first: int) -> Batch:
        """One batch from its lines: split per line (inherently), converted per column."""
        text = b"".join(lines)
        if b"\x00" in text:  # numpy's bytes cells would drop it silently; UTF-16 has many
            line = first + text.count(b"\n", 0, text.index(b"\x00")) + 1
            raise TraceError(
                f"--trace {self.path}: line {line}: a NUL byte, not Criteo TSV text "
                "(UTF-16? save it as UTF-8)"
            )
        fields = [line.rstrip(b"\r\n").split(b"\t") for line in lines]
        widths = np.fromiter(map(len, fields), dtype=np.int64, count=len(fields))
        wrong = np.flatnonzero(widths != CRITEO_FIELDS)
        if wrong.size:
            width = int(widths[wrong[0]])
            hint = " (Kaggle's test.txt has no labels)" if width == CRITEO_FIELDS - 1 else ""
            raise TraceError(
                f"--trace {self.path}: line {first + int(wrong[0]) + 1} has {width} "
                f"tab-separated fields, a Criteo line has {CRITEO_FIELDS} (label, "
                f"{CRITEO_DENSE} integer, {CRITEO_TABLES} categorical){hint}"
            )
        table = np.array(fields, dtype=bytes)
        labels = self._integers(table[:, :1], first, 0)[:, 0]
        if not np.isin(labels, (0, 1)).all():
            line = first + int(np.flatnonzero(~np.isin(labels, (0, 1)))[0]) + 1
            raise TraceError(f"--trace {self.path}: line {line}: a label is 0 or 1")
        counts = self._integers(table[:, 1 : 1 + CRITEO_DENSE], first, 1)
        dense = np.log(np.maximum(counts, 0).astype(np.float32) + np.float32(1.0))
        hashed = self._hashed(table[:, 1 + CRITEO_DENSE :], first)
        bs = len(lines)
        indices = [np.ascontiguousarray(hashed[:, t]) for t in range(CRITEO_TABLES)]
        offsets = [np.arange(bs + 1, dtype=np.int64) for _ in range(CRITEO_TABLES)]
        return Batch(dense.astype(np.float32), indices, offsets, labels.astype(np.float32))

    def _integers(self, cells: np.ndarray, first: int, column: int) -> np.ndarray:
        """Integer cells, an empty one 0; a bad one is named by its line and field."""
        cells = np.where(cells == b"", b"0", cells)
        codes = cells.view(np.uint8).reshape(*cells.shape, cells.dtype.itemsize)
        plain = (_DIGIT_OR_SIGN[codes] | (codes == 0)).all(axis=-1)  # 0: numpy's padding
        if plain.all():
            try:
                return cells.astype(np.int64)
            except (ValueError, OverflowError):
                pass
        for (row, col), cell in np.ndenumerate(cells):
            try:
                if not plain[row, col]:  # int() takes spaces, '_' and other scripts' digits
                    raise ValueError(cell)
                np.int64(int(cell))
            except (ValueError, OverflowError):
                name = "the label" if column + col == 0 else f"I{column + col}"
                raise TraceError(
                    f"--trace {self.path}: line {first + row + 1}: {name} is "
                    f"{cell.decode(errors='replace')!r}, "
                    "not an integer"
                ) from None
        raise AssertionError("unreachable: numpy refused a cell int() accepts")

    def _hashed(self, cells: np.ndarray, first: int) -> np.ndarray:
        """(bs, 26) rows: each hexadecimal value modulo its table's rows, empty -> 0."""
        width = cells.dtype.itemsize
        if width > 16:  # past 64 bits: Python's integers (no Criteo value is this long)
            return self._hashed_long(cells, first)
        codes = _HEX[cells.view(np.uint8).reshape(*cells.shape, width)]
        bad = (codes == 255).any(axis=-1)
        if bad.any():
            row, col = (int(x) for x in np.argwhere(bad)[0])
            raise TraceError(
                f"--trace {self.path}: line {first + row + 1}: C{col + 1} is "
                f"{cells[row, col].decode(errors='replace')!r}, not hexadecimal"
            )
        values = np.zeros(cells.shape, dtype=np.uint64)
        for position in range(width):
            digit = codes[..., position]
            shifted = values * np.uint64(16) + digit.astype(np.uint64)
            values = np.where(digit < 16, shifted, values)
        return (values % self._rows).astype(np.int64)

    def _hashed_long(self, cells: np.ndarray, first: int) -> np.ndarray:
        out = np.zeros(cells.shape, dtype=np.int64)
        for (row, col), cell in np.ndenumerate(cells):
            try:
                out[row, col] = int(cell or b"0", 16) % int(self._rows[col])
            except ValueError:
                raise TraceError(
                    f"--trace {self.path}: line {first + row + 1}: C{col + 1} is "
                    f"{cell.decode(errors='replace')!r}, not hexadecimal"
                ) from None
        return out
