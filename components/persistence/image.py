"""The PMEM contents as bytes: a header, a data region and the log regions.

Layout (every region page aligned, little endian); the timing model writes the same
addresses (boards use this layout), so one layout is the truth for both:
  header   magic, version, layout JSON and its CRC32
  data     the embedding table, (total_rows, dim) float32, row r at r * dim * 4
  flags    persistent flags, one 8 B word each (value = batch + 1, 0 = unset)
  emb0/1   embedding log slots: record header + (row id int64, values) entries
  mlp0/1   MLP log slots: record header + float32 parameters
  base     the initial MLP parameters (the checkpoint before batch 0)
  delta    the last update's row deltas (CXL's relaxed lookup adds them; not recovered)
  seal     clean-shutdown marker with the data region's CRC32
A record header is (batch int64, count int64, crc32 uint32) in the first 64 B of its
region; a flag is set only after its record is durable, so a flagged record whose CRC
does not match means the image is corrupt, never that it is merely old.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"TCXLPMEM"
VERSION = 2
HEADER_BYTES = 4096
PAGE = 4096
RECORD_HEADER = 64
FLAG_NAMES = ("emb0", "emb1", "mlp0", "mlp1")


class CorruptImage(ValueError):
    """The image cannot be trusted; recovery refuses it instead of guessing."""


def _align(n: int) -> int:
    """Regions start on page boundaries, as an allocator would place them (a request
    never straddles two interleaved controllers at a region's edge)."""
    return -(-n // PAGE) * PAGE


@dataclass(frozen=True)
class ImageLayout:
    """Sizes of one model's image; offsets follow from them."""

    total_rows: int
    dim: int
    mlp_count: int
    max_rows: int

    @property
    def entry_bytes(self) -> int:
        """One embedding-log entry: the row id, then the row's values."""
        return 8 + self.dim * 4

    def regions(self) -> dict[str, tuple[int, int]]:
        sizes = {
            "data": self.total_rows * self.dim * 4,
            "flags": 8 * len(FLAG_NAMES),
            "emb0": RECORD_HEADER + self.max_rows * self.entry_bytes,
            "emb1": RECORD_HEADER + self.max_rows * self.entry_bytes,
            "mlp0": RECORD_HEADER + self.mlp_count * 4,
            "mlp1": RECORD_HEADER + self.mlp_count * 4,
            "base": RECORD_HEADER + self.mlp_count * 4,
            "delta": self.max_rows * self.dim * 4,
            "seal": 64,
        }
        out, offset = {}, HEADER_BYTES
        for name, size in sizes.items():
            out[name] = (offset, size)
            offset += _align(size)
        return out

    @property
    def size(self) -> int:
        offset, size = list(self.regions().values())[-1]
        return offset + _align(size)

    def offset(self, region: str) -> int:
        return self.regions()[region][0]

    def flag_offset(self, name: str) -> int:
        return self.offset("flags") + 8 * FLAG_NAMES.index(name)

    def row_offset(self, rows: np.ndarray) -> np.ndarray:
        return self.offset("data") + rows.astype(np.int64) * (self.dim * 4)

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    def entry_offsets(self, slot: int, count: int) -> np.ndarray:
        """Addresses of the first ``count`` entries of embedding-log slot ``slot``."""
        base = self.offset(f"emb{slot}") + RECORD_HEADER
        return base + np.arange(count, dtype=np.int64) * self.entry_bytes

    def mlp_offset(self, slot: int) -> int:
        """Address of the parameters in MLP-log slot ``slot`` (after its header)."""
        return self.offset(f"mlp{slot}") + RECORD_HEADER

    def delta_offsets(self, count: int) -> np.ndarray:
        return self.offset("delta") + np.arange(count, dtype=np.int64) * self.row_bytes

    def region_of(self, offset: int) -> str:
        """Name of the region holding a byte offset (for reports)."""
        for name, (start, size) in self.regions().items():
            if start <= offset < start + _align(size):
                return name
        return "header"

    def to_json(self) -> bytes:
        fields = ("total_rows", "dim", "mlp_count", "max_rows")
        return json.dumps({k: getattr(self, k) for k in fields}, sort_keys=True).encode()


def record_header(batch: int, count: int, payload: np.ndarray) -> np.ndarray:
    """The 64 B header that makes a record self-checking (CRC32 of its payload)."""
    head = np.zeros(RECORD_HEADER, dtype=np.uint8)
    head[:16] = np.array([batch, count], dtype="<i8").view(np.uint8)
    head[16:20] = np.array([zlib.crc32(payload)], dtype="<u4").view(np.uint8)
    return head


class PmemImage:
    """A byte image with typed views of its regions (in memory or a memmap'ed file)."""

    def __init__(self, layout: ImageLayout, buf: np.ndarray, path: str | None = None) -> None:
        self.layout = layout
        self.buf = buf
        self.path = path or "<memory>"

    # ----- creation and opening ---------------------------------------------------
    @classmethod
    def create(
        cls, layout: ImageLayout, table: np.ndarray, mlp: np.ndarray, path: str | None = None
    ) -> PmemImage:
        """A formatted image holding the initial weights (the checkpoint of batch 0)."""
        if path is None:
            buf = np.zeros(layout.size, dtype=np.uint8)
        else:
            buf = np.memmap(path, dtype=np.uint8, mode="w+", shape=(layout.size,))
        image = cls(layout, buf, path)
        body = layout.to_json()
        head = np.zeros(HEADER_BYTES, dtype=np.uint8)
        head[:8] = np.frombuffer(MAGIC, dtype=np.uint8)
        meta = np.array([VERSION, len(body), zlib.crc32(body)], dtype="<u4")
        head[8:20] = meta.view(np.uint8)
        head[64 : 64 + len(body)] = np.frombuffer(body, dtype=np.uint8)
        buf[:HEADER_BYTES] = head
        image.write(layout.offset("data"), table.astype(np.float32).reshape(-1).view(np.uint8))
        payload = mlp.astype(np.float32).view(np.uint8)
        base = layout.offset("base")
        image.write(base + RECORD_HEADER, payload)
        image.write(base, record_header(0, mlp.size, payload))
        return image

    @classmethod
    def open(cls, path: str) -> PmemImage:
        """Map an image file, checking magic, version, layout CRC, size and seal."""
        file = Path(path)
        size = file.stat().st_size
        if size < HEADER_BYTES:
            raise CorruptImage(f"corrupt PMEM image {path}: {size} B is shorter than its header")
        buf = np.memmap(path, dtype=np.uint8, mode="r+", shape=(size,))
        if bytes(buf[:8]) != MAGIC:
            raise CorruptImage(f"corrupt PMEM image {path}: bad magic {bytes(buf[:8])!r}")
        version, length, crc = (int(x) for x in buf[8:20].view("<u4"))
        if version != VERSION:
            raise CorruptImage(f"corrupt PMEM image {path}: version {version}, expected {VERSION}")
        body = bytes(buf[64 : 64 + min(length, HEADER_BYTES - 64)])
        if zlib.crc32(body) != crc:
            raise CorruptImage(f"corrupt PMEM image {path}: layout header fails its CRC")
        layout = ImageLayout(**json.loads(body))
        if size < layout.size:
            raise CorruptImage(
                f"corrupt PMEM image {path}: truncated to {size} B, layout needs {layout.size} B"
            )
        image = cls(layout, buf, path)
        image.check_seal()
        return image

    # ----- access -------------------------------------------------------------------
    def write(self, offset: int, data: np.ndarray) -> None:
        self.buf[offset : offset + data.size] = data

    def region(self, name: str) -> np.ndarray:
        offset, size = self.layout.regions()[name]
        return self.buf[offset : offset + size]

    def table(self) -> np.ndarray:
        """The data region as the (total_rows, dim) float32 table (a view)."""
        lay = self.layout
        return self.region("data").view(np.float32).reshape(lay.total_rows, lay.dim)

    def flag(self, name: str) -> int:
        """The batch a flag marks, or -1 when it is unset."""
        off = self.layout.flag_offset(name)
        return int(self.buf[off : off + 8].view("<i8")[0]) - 1

    def record(self, region: str, payload_bytes: int | None = None) -> tuple[int, np.ndarray]:
        """(batch, payload) of a record, checked against its CRC."""
        raw = self.region(region)
        batch, count = (int(x) for x in raw[:16].view("<i8"))
        crc = int(raw[16:20].view("<u4")[0])
        size = payload_bytes if payload_bytes is not None else count * self.layout.entry_bytes
        if not 0 <= size <= raw.size - RECORD_HEADER:
            raise CorruptImage(f"corrupt PMEM image {self.path}: {region} record size {size}")
        payload = raw[RECORD_HEADER : RECORD_HEADER + size]
        if zlib.crc32(payload) != crc:
            raise CorruptImage(
                f"corrupt PMEM image {self.path}: {region} record of batch {batch} fails its CRC"
            )
        return batch, payload

    def mlp_record(self, region: str) -> tuple[int, np.ndarray]:
        batch, payload = self.record(region, self.layout.mlp_count * 4)
        return batch, payload.view(np.float32).copy()

    def emb_record(self, region: str) -> tuple[int, np.ndarray, np.ndarray]:
        """(batch, rows, values) of an embedding-log record."""
        batch, payload = self.record(region)
        entries = payload.reshape(-1, self.layout.entry_bytes)
        rows = entries[:, :8].copy().view("<i8").reshape(-1)
        values = entries[:, 8:].copy().view(np.float32).reshape(-1, self.layout.dim)
        return batch, rows, values

    # ----- clean shutdown -------------------------------------------------------------
    def seal(self) -> None:
        """Mark a clean shutdown with the data region's CRC, so bit rot is caught on open."""
        mark = np.array([1, zlib.crc32(self.region("data"))], dtype="<i8").view(np.uint8)
        self.write(self.layout.offset("seal"), mark)
        if isinstance(self.buf, np.memmap):
            self.buf.flush()

    def check_seal(self) -> None:
        sealed, crc = (int(x) for x in self.region("seal")[:16].view("<i8"))
        if sealed and zlib.crc32(self.region("data")) != crc:
            raise CorruptImage(f"corrupt PMEM image {self.path}: data region fails its CRC")

    def copy(self) -> PmemImage:
        return PmemImage(self.layout, np.array(self.buf, copy=True), self.path)
