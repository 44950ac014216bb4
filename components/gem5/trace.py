"""Request streams as gem5 packet traces (the files gem5's TraceGen replays); pure numpy.

gem5's TraceGen reads a ``ProtoInputStream``: the magic number ``gem5`` (little-endian
0x356d6567), then length-prefixed protobuf messages, a ``PacketHeader`` (object id,
tick frequency) and one ``Packet`` (tick, cmd, addr, size) per request
(src/proto/packet.proto, src/proto/protoio.cc). Every packet here has the same
encoded length: each varint field is written at a fixed width (protobuf parsers accept
continuation bytes that carry zeros), so a whole stream is one reshaped numpy array.

Requests are split at 64 B line boundaries first, as the requesters do on CXL and on
the memory bus (a 136 B log entry becomes up to three packets); no packet crosses a
line, so none straddles two interleaved controllers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = 0x356D6567
TICK_FREQUENCY = 10**12  # gem5's ticks per second; TraceGen refuses a trace with another
LINE = 64
READ_CMD, WRITE_CMD = 1, 4  # gem5 MemCmd::ReadReq, MemCmd::WriteReq (src/mem/packet.hh)
TICK_BYTES, ADDR_BYTES = 8, 8  # fixed varint widths: 56-bit ticks and addresses
_FIELDS = (  # (protobuf key byte, varint width): tick, cmd, addr, size
    (0x08, TICK_BYTES),
    (0x10, 1),
    (0x18, ADDR_BYTES),
    (0x20, 2),
)
PACKET_BYTES = sum(1 + width for _, width in _FIELDS)  # the message, without its length


@dataclass(frozen=True)
class Packets:
    """A request stream split at line boundaries: per packet its address, size and the
    index of the request it belongs to."""

    addr: np.ndarray
    size: np.ndarray
    request: np.ndarray

    def __len__(self) -> int:
        return int(self.addr.size)


def split_lines(addresses: np.ndarray, size: int, line: int = LINE) -> Packets:
    """Requests of ``size`` bytes at ``addresses`` as packets that stay inside a line."""
    addr = np.asarray(addresses, dtype=np.int64).ravel()
    if size <= 0:
        raise ValueError(f"request size must be positive, got {size}")
    first = addr // line
    count = (addr + size - 1) // line - first + 1
    request = np.repeat(np.arange(addr.size, dtype=np.int64), count)
    offset = np.arange(request.size, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    line_start = (first[request] + offset) * line
    lo = np.maximum(addr[request], line_start)
    hi = np.minimum(addr[request] + size, line_start + line)
    return Packets(lo, hi - lo, request)


def _varints(values: np.ndarray, width: int) -> np.ndarray:
    """Each value as a protobuf varint padded to ``width`` bytes: (n, width) uint8."""
    values = np.asarray(values, dtype=np.uint64)
    if values.size and int(values.max()) >> (7 * width):
        raise ValueError(f"value {int(values.max())} does not fit a {width}-byte varint")
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = (values[:, None] >> shifts[None, :]) & np.uint64(0x7F)
    groups[:, :-1] |= np.uint64(0x80)
    return groups.astype(np.uint8)


def _message(fields: list[tuple[int, bytes]]) -> bytes:
    body = b"".join(bytes([key]) + value for key, value in fields)
    return _varint_bytes(len(body)) + body


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def header() -> bytes:
    """Magic number and the PacketHeader message (object id, tick frequency)."""
    name = b"trainingcxl"
    fields = [(0x0A, _varint_bytes(len(name)) + name), (0x18, _varint_bytes(TICK_FREQUENCY))]
    message = _message(fields)
    return MAGIC.to_bytes(4, "little") + message


def encode(write: np.ndarray, addr: np.ndarray, size: np.ndarray, ticks: np.ndarray) -> bytes:
    """The Packet messages of a stream (``write``: per packet, a write or a read)."""
    n = int(np.asarray(addr).size)
    if n == 0:
        return b""
    if int(np.max(size)) >= 1 << 14 or int(np.min(size)) < 1:
        raise ValueError("packet sizes must be 1 B..16 KiB (two-byte varint)")
    cmd = np.where(np.asarray(write, dtype=bool), WRITE_CMD, READ_CMD)
    columns = [np.full((n, 1), PACKET_BYTES, dtype=np.uint8)]
    for (key, width), values in zip(_FIELDS, (ticks, cmd, addr, size), strict=True):
        columns.append(np.full((n, 1), key, dtype=np.uint8))
        columns.append(_varints(values, width))
    return np.concatenate(columns, axis=1).tobytes()


def write_trace(
    path: Path, write: np.ndarray, addr: np.ndarray, size: np.ndarray, ticks: np.ndarray
) -> None:
    """One trace file for TraceGen (``ticks``: earliest issue, relative to its start)."""
    Path(path).write_bytes(header() + encode(write, addr, size, ticks))
