"""The PMEM contents as bytes: a header, a data region and the log regions.

Layout (every region page aligned, little endian); the timing model writes the same
addresses (boards use this layout), so one layout is the truth for both:
  header   magic, version, header JSON (layout + identity of the run) and its CRC32
  data     the embedding table, (total_rows, dim) float32, row r at r * dim * 4
  flags    persistent flags, one 8 B word each: batch + 1 in the low 32 bits and the
           (seeded) CRC32 of those 4 bytes in the high 32 (0 = unset; self-checking)
  emb0/1   embedding log slots: record header + (row id int64, values) entries
  mlp0/1   MLP log slots: record header + float32 parameters
  base     the MLP checkpoint recovery falls back on (the initial MLPs, batch 0)
  delta    the last update's row deltas (CXL's relaxed lookup adds them; not recovered)
  seal     clean-shutdown marker with the data region's CRC32
Adagrad runs add, after ``seal`` (so every region above keeps its address whatever the
optimizer): ``rowacc`` (each row's float32 accumulator in its own 8 B word, updated in
place with its row), ``embacc0/1`` (the accumulator of each embedding-log entry, one
word each, in entry order), ``mlpacc0/1`` and ``baseacc`` (the MLP accumulators of each
MLP record). A record's CRC covers its accumulators too.

A record header is (batch int64, count int64, crc32 uint32) in the first line (256 B) of its
region; the CRC covers the batch and count fields as well as the payloads, so no field a
recovery acts on is outside a checksum. A flag is set only after its record is durable,
so a flagged record whose CRC does not match means the image is corrupt, never that it
is merely old.

The header also carries the identity of the configuration that wrote the image
(system, model, rows, batch size, seed, optimizer and a hash of every parameter), so
that an image is only ever recovered by the configuration it belongs to.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"TCXLPMEM"
VERSION = 5
HEADER_BYTES = 4096
PAGE = 4096
RECORD_HEADER = 256
"""A record's header takes one 256 B media line (an Optane XPLine), so the payload after
it starts on a line: log bursts then never straddle lines nor read-modify-write them."""
WORD = 8
FLAG_NAMES = ("emb0", "emb1", "mlp0", "mlp1")
COMMIT_NAMES = ("commit", "mlpc0", "mlpc1")
"""A cluster's cross-device commit words (docs/failures.md), after the flags on the
coordinator CXL-MEM: the newest batch every device holds, and the newest MLP copy
(per slot) every device's stripe holds; flag words, in the flags region's page."""
OPTIMIZERS = ("sgd", "adagrad")
FLAG_BATCHES = 1 << 32  # a flag's batch + 1 fills its low 32 bits
FLAG_SEED = zlib.crc32(b"TCXLFLAG")  # a flag's check: CRC32 of its value from this seed
LAYOUT_LIMIT = 1 << 40  # no layout field (rows, width, counts) is beyond this


def log_slot(batch: int) -> int:
    """The log slot batch ``batch``'s records go to: the other one holds the previous
    batch's, which recovery may still need until this one's flag is set."""
    return batch % 2


class CorruptImage(ValueError):
    """The image cannot be trusted; recovery refuses it instead of guessing."""


def _align(n: int) -> int:
    """Regions start on page boundaries, as an allocator would place them (a request
    never straddles two interleaved controllers at a region's edge)."""
    return -(-n // PAGE) * PAGE


def padded(nbytes: int) -> int:
    """Bytes rounded up to whole 8 B words (records are written word by word)."""
    return -(-nbytes // WORD) * WORD


@dataclass(frozen=True)
class ImageLayout:
    """Sizes of one model's image; offsets follow from them."""

    total_rows: int
    dim: int
    mlp_count: int
    max_rows: int
    optimizer: str = "sgd"
    base: int = 0
    """Where the image starts in its device: a pooled CXL-MEM's partition (0: alone)."""
    commit: bool = False
    """The coordinator of a multi-device cluster: the commit words follow the flags."""

    def __post_init__(self) -> None:
        for name in ("total_rows", "dim", "mlp_count", "max_rows"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= LAYOUT_LIMIT:
                raise ValueError(f"{name} must be an integer in [1, 2^40], got {value!r}")
        if self.max_rows > self.total_rows:
            raise ValueError(f"max_rows {self.max_rows} exceeds total_rows {self.total_rows}")
        if not isinstance(self.commit, bool):
            raise ValueError(f"commit must be true or false, got {self.commit!r}")
        if not isinstance(self.optimizer, str) or self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")

    @property
    def adagrad(self) -> bool:
        return self.optimizer == "adagrad"

    @property
    def entry_bytes(self) -> int:
        """One embedding-log entry: the row id, then the row's values."""
        return 8 + self.dim * 4

    @property
    def mlp_bytes(self) -> int:
        """An MLP record's parameters, padded to whole words."""
        return padded(self.mlp_count * 4)

    def regions(self) -> dict[str, tuple[int, int]]:
        cached = self.__dict__.get("_regions")
        if cached is not None:
            return cached
        sizes = {
            "data": self.total_rows * self.dim * 4,
            "flags": 8 * (len(FLAG_NAMES) + (len(COMMIT_NAMES) if self.commit else 0)),
            "emb0": RECORD_HEADER + self.max_rows * self.entry_bytes,
            "emb1": RECORD_HEADER + self.max_rows * self.entry_bytes,
            "mlp0": RECORD_HEADER + self.mlp_bytes,
            "mlp1": RECORD_HEADER + self.mlp_bytes,
            "base": RECORD_HEADER + self.mlp_bytes,
            "delta": self.max_rows * self.dim * 4,
            "seal": 64,
        }
        if self.adagrad:
            sizes |= {
                "rowacc": self.total_rows * WORD,
                "embacc0": self.max_rows * WORD,
                "embacc1": self.max_rows * WORD,
                "mlpacc0": self.mlp_bytes,
                "mlpacc1": self.mlp_bytes,
                "baseacc": self.mlp_bytes,
            }
        out, offset = {}, HEADER_BYTES
        for name, size in sizes.items():
            out[name] = (offset, size)
            offset += _align(size)
        object.__setattr__(self, "_regions", out)
        return out

    @property
    def size(self) -> int:
        offset, size = list(self.regions().values())[-1]
        return offset + _align(size)

    def offset(self, region: str) -> int:
        return self.base + self.regions()[region][0]

    def flag_offset(self, name: str) -> int:
        return self.offset("flags") + 8 * FLAG_NAMES.index(name)

    def flags_word(self) -> int:
        """The index of the first flag word in the image's 8 B words."""
        return self.offset("flags") // WORD

    def commit_offset(self, name: str) -> int:
        """A cross-device commit word (COMMIT_NAMES) on the coordinator."""
        return self.offset("flags") + 8 * (len(FLAG_NAMES) + COMMIT_NAMES.index(name))

    def row_offset(self, rows: np.ndarray) -> np.ndarray:
        out = np.multiply(rows, self.dim * 4, dtype=np.int64)  # one new array, two passes
        out += self.offset("data")
        return out

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    def entry_offsets(self, slot: int, count: int) -> np.ndarray:
        """Addresses of the first ``count`` entries of embedding-log slot ``slot``."""
        base = self.offset(f"emb{slot}") + RECORD_HEADER
        return np.arange(base, base + count * self.entry_bytes, self.entry_bytes, dtype=np.int64)

    def mlp_offset(self, slot: int) -> int:
        """Address of the parameters in MLP-log slot ``slot`` (after its header)."""
        return self.offset(f"mlp{slot}") + RECORD_HEADER

    def acc_offsets(self, rows: np.ndarray) -> np.ndarray:
        """Addresses of rows' in-place Adagrad accumulators (one word each)."""
        return self.offset("rowacc") + rows.astype(np.int64) * WORD

    def delta_offsets(self, count: int) -> np.ndarray:
        return self.offset("delta") + np.arange(count, dtype=np.int64) * self.row_bytes

    def region_of(self, offset: int) -> str:
        """Name of the region holding a byte offset (for reports)."""
        for name, (start, size) in self.regions().items():
            if start <= offset < start + _align(size):
                return name
        return "header"

    def region_starts(self) -> tuple[list[str], np.ndarray]:
        """Region names and their start offsets, in address order (header first)."""
        names = ["header", *self.regions()]
        starts = [0, *(start for start, _ in self.regions().values())]
        return names, np.array(starts, dtype=np.int64)

    def fields(self) -> dict:
        keys = ("total_rows", "dim", "mlp_count", "max_rows", "optimizer")
        return {k: getattr(self, k) for k in keys} | ({"commit": True} if self.commit else {})


def record_header(batch: int, count: int, *payloads: np.ndarray) -> np.ndarray:
    """The header that makes a record self-checking (CRC32 of its batch and count
    fields, then its payloads)."""
    head = np.zeros(RECORD_HEADER, dtype=np.uint8)
    head[:16] = np.array([batch, count], dtype="<i8").view(np.uint8)
    crc = zlib.crc32(head[:16])
    for payload in payloads:
        crc = zlib.crc32(np.ascontiguousarray(payload).view(np.uint8), crc)
    head[16:20] = np.array([crc], dtype="<u4").view(np.uint8)
    return head


def flag_word(batch: int) -> int:
    """The 8 B word that sets a flag to ``batch``: batch + 1, then its CRC32 (seeded, so
    that a word of all ones, whose plain CRC32 matches, fails)."""
    value = batch + 1
    if not 1 <= value < FLAG_BATCHES:
        raise ValueError(f"flag batch {batch} outside [0, 2^32 - 1)")
    return value | zlib.crc32(value.to_bytes(4, "little"), FLAG_SEED) << 32


def flag_batches(words: np.ndarray) -> np.ndarray:
    """The batch each flag word marks: -1 unset, -2 a word that fails its check."""
    out = np.full(len(words), -1, dtype=np.int64)
    for i, word in enumerate(np.asarray(words, dtype=np.uint64).tolist()):
        if word:
            value = word & (FLAG_BATCHES - 1)
            good = value and word >> 32 == zlib.crc32(value.to_bytes(4, "little"), FLAG_SEED)
            out[i] = value - 1 if good else -2
    return out


def check_header(header) -> ImageLayout:
    """The layout an image header states, its fields' types and ranges checked."""
    if not isinstance(header, dict) or not isinstance(header.get("layout"), dict):
        raise ValueError("the header is not an object with a layout object")
    if not isinstance(header.get("identity", {}), dict):
        raise ValueError("the header's identity is not an object")
    return ImageLayout(**header["layout"])


class ImageBuffer:
    """What crash exploration needs of an image, one device's or a cluster's: its bytes
    and words, where they came from, and the hooks that watch its reads.

    ``reads``, when a set, collects the names of the regions read through this object
    (crash exploration reuses a recovery's verdict while none of them changed)."""

    def __init__(
        self, layout, buf: np.ndarray, path: str | None = None, identity: dict | None = None
    ) -> None:
        self.layout = layout
        self.buf = buf
        self.words = buf.view(np.uint64)
        self.path = path or "<memory>"
        self.identity = identity or {}
        self.reads: set[str] | None = None
        self.generation = None  # region name -> content generation (CRC checks memoized)
        self.on_read = None  # called with a region's name before it is read


class PmemImage(ImageBuffer):
    """A byte image with typed views of its regions (in memory or a memmap'ed file)."""

    def __init__(
        self,
        layout: ImageLayout,
        buf: np.ndarray,
        path: str | None = None,
        identity: dict | None = None,
    ) -> None:
        super().__init__(layout, buf, path, identity)
        self._crcs: dict[tuple, int] = {}

    # ----- creation and opening ---------------------------------------------------
    @classmethod
    def create(
        cls,
        layout: ImageLayout,
        table: np.ndarray,
        mlp: np.ndarray,
        path: str | None = None,
        identity: dict | None = None,
    ) -> PmemImage:
        """A formatted image holding the initial weights (the checkpoint of batch 0; the
        Adagrad accumulators start at zero)."""
        if path is None:
            buf = np.zeros(layout.size, dtype=np.uint8)
        else:
            buf = np.memmap(path, dtype=np.uint8, mode="w+", shape=(layout.size,))
        image = cls(layout, buf, path, identity)
        body = json.dumps(
            {"layout": layout.fields(), "identity": identity or {}}, sort_keys=True
        ).encode()
        if len(body) > HEADER_BYTES - 64:
            raise ValueError(f"image header JSON of {len(body)} B does not fit its page")
        head = np.zeros(HEADER_BYTES, dtype=np.uint8)
        head[:8] = np.frombuffer(MAGIC, dtype=np.uint8)
        meta = np.array([VERSION, len(body), zlib.crc32(body)], dtype="<u4")
        head[8:20] = meta.view(np.uint8)
        head[64 : 64 + len(body)] = np.frombuffer(body, dtype=np.uint8)
        buf[:HEADER_BYTES] = head
        image.write(layout.offset("data"), table.astype(np.float32).reshape(-1).view(np.uint8))
        payload = np.zeros(layout.mlp_bytes, dtype=np.uint8)
        payload[: mlp.size * 4] = mlp.astype(np.float32).view(np.uint8)
        base = layout.offset("base")
        image.write(base + RECORD_HEADER, payload)
        zeros = np.zeros(layout.mlp_bytes if layout.adagrad else 0, dtype=np.uint8)
        image.write(base, record_header(0, mlp.size, payload, zeros))
        return image

    @classmethod
    def open(cls, path: str, writable: bool = True) -> PmemImage:
        """Map an image file, checking magic, version, header CRC, size and seal."""
        file = Path(path)
        size = file.stat().st_size
        if size < HEADER_BYTES:
            raise CorruptImage(f"corrupt PMEM image {path}: {size} B is shorter than its header")
        size -= size % WORD
        buf = np.memmap(path, dtype=np.uint8, mode="r+" if writable else "r", shape=(size,))
        if bytes(buf[:8]) != MAGIC:
            raise CorruptImage(f"corrupt PMEM image {path}: bad magic {bytes(buf[:8])!r}")
        version, length, crc = (int(x) for x in buf[8:20].view("<u4"))
        if version != VERSION:
            raise CorruptImage(f"corrupt PMEM image {path}: version {version}, expected {VERSION}")
        body = bytes(buf[64 : 64 + min(length, HEADER_BYTES - 64)])
        if zlib.crc32(body) != crc:
            raise CorruptImage(f"corrupt PMEM image {path}: header fails its CRC")
        try:
            header = json.loads(body)
            layout = check_header(header)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise CorruptImage(f"corrupt PMEM image {path}: unreadable header ({exc})") from None
        if size < layout.size:
            raise CorruptImage(
                f"corrupt PMEM image {path}: truncated to {size} B, layout needs {layout.size} B"
            )
        image = cls(layout, buf, path, header.get("identity", {}))
        image.check_seal()
        return image

    # ----- access -------------------------------------------------------------------
    def write(self, offset: int, data: np.ndarray) -> None:
        self.buf[offset : offset + data.size] = data

    def _read(self, name: str) -> None:
        if self.on_read is not None:
            self.on_read(name)
        if self.reads is not None:
            self.reads.add(name)

    def region(self, name: str) -> np.ndarray:
        """A region's bytes (a view). Recovery reads the image only through here."""
        self._read(name)
        size = self.layout.regions()[name][1]
        offset = self.layout.offset(name)  # a device's image may sit inside a cluster's
        return self.buf[offset : offset + size]

    def table(self) -> np.ndarray:
        """The data region as the (total_rows, dim) float32 table (a view)."""
        lay = self.layout
        return self.region("data").view(np.float32).reshape(lay.total_rows, lay.dim)

    def row_acc(self) -> np.ndarray | None:
        """The in-place row accumulators (a view), or None for SGD."""
        if not self.layout.adagrad:
            return None
        return self.region("rowacc")[: self.layout.total_rows * WORD].view(np.float32)[::2]

    def flag_values(self) -> np.ndarray:
        """The batch every flag marks (-1 unset), in FLAG_NAMES order; a flag word that
        fails its check is a corrupt image."""
        batches = flag_batches(self.region("flags")[: 8 * len(FLAG_NAMES)].view("<u8"))
        bad = [name for name, b in zip(FLAG_NAMES, batches.tolist(), strict=True) if b == -2]
        if bad:
            raise CorruptImage(f"corrupt PMEM image {self.path}: flag {bad[0]} fails its check")
        return batches

    def flag(self, name: str) -> int:
        """The batch a flag marks, or -1 when it is unset."""
        return int(self.flag_values()[FLAG_NAMES.index(name)])

    def record(self, region: str, payload_bytes: int | None = None, extra: str | None = None):
        """(batch, count, payload[, extra payload]) of a record, checked against its CRC.
        ``extra``: a region holding more of the record (Adagrad accumulators)."""
        raw = self.region(region)
        batch, count = (int(x) for x in raw[:16].view("<i8"))
        crc = int(raw[16:20].view("<u4")[0])
        size = payload_bytes if payload_bytes is not None else count * self.layout.entry_bytes
        if not 0 <= size <= raw.size - RECORD_HEADER or count < 0:
            raise CorruptImage(f"corrupt PMEM image {self.path}: {region} record size {size}")
        payload = raw[RECORD_HEADER : RECORD_HEADER + size]
        more = None
        if extra is not None:
            width = payload_bytes if payload_bytes is not None else count * WORD
            more = self.region(extra)[:width]
            if more.size != width:
                raise CorruptImage(f"corrupt PMEM image {self.path}: {region} record count {count}")
        check = self._crc(region, extra, payload, more, raw[:16])
        if check != crc:
            raise CorruptImage(
                f"corrupt PMEM image {self.path}: {region} record of batch {batch} fails its CRC"
            )
        return batch, count, payload, more

    def _crc(self, region: str, extra: str | None, payload: np.ndarray, more, head) -> int:
        """CRC32 of a record's header fields and payloads, reused while neither region
        changed."""
        key = None
        if self.generation is not None:
            key = (region, payload.size, self.generation(region))
            key += (extra, self.generation(extra)) if extra is not None else ()
            if key in self._crcs:
                return self._crcs[key]
        check = zlib.crc32(payload, zlib.crc32(head))
        if more is not None:
            check = zlib.crc32(more, check)
        if key is not None:
            self._crcs[key] = check
        return check

    def mlp_record(self, region: str) -> tuple[int, np.ndarray, np.ndarray | None]:
        """(batch, parameters, accumulators) of an MLP record: views, never copies."""
        lay = self.layout
        extra = region.replace("mlp", "mlpacc") if region != "base" else "baseacc"
        batch, _, payload, acc = self.record(region, lay.mlp_bytes, extra if lay.adagrad else None)
        params = payload.view(np.float32)[: lay.mlp_count]
        return batch, params, None if acc is None else acc.view(np.float32)[: lay.mlp_count]

    def emb_record(self, region: str):
        """(batch, rows, values, accumulators) of an embedding-log record (views)."""
        lay = self.layout
        extra = region.replace("emb", "embacc") if lay.adagrad else None
        batch, count, payload, acc = self.record(region, None, extra)
        entries = payload.reshape(-1, lay.entry_bytes)
        rows = entries[:, :8].copy().view("<i8").reshape(-1)
        values = entries[:, 8:].copy().view(np.float32).reshape(-1, lay.dim)
        accs = None if acc is None else acc.view(np.float32)[::2].copy()
        return batch, rows, values, accs

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
        return PmemImage(self.layout, np.array(self.buf, copy=True), self.path, self.identity)


def identity_mismatch(found: dict, expected: dict) -> list[str]:
    """The identity fields in which an image differs from a configuration, worded for an
    error line (empty when the image belongs to it)."""
    keys = sorted(set(found) | set(expected))
    return [
        f"{key} {found.get(key)!r} (these options: {expected.get(key)!r})"
        for key in keys
        if found.get(key) != expected.get(key)
    ]
