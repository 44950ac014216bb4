"""Packet traces for gem5's TraceGen (components/gem5/trace.py), decoded here by an
independent protobuf reader written from the wire format (varints, length-delimited
messages; src/proto/packet.proto, src/proto/protoio.cc)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from components.gem5 import trace as tr


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(message: bytes) -> dict[int, object]:
    out, pos = {}, 0
    while pos < len(message):
        key, pos = _varint(message, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out[number], pos = _varint(message, pos)
        elif wire == 2:
            length, pos = _varint(message, pos)
            out[number], pos = message[pos : pos + length], pos + length
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _decode(data: bytes) -> tuple[dict, list[dict]]:
    assert struct.unpack("<I", data[:4])[0] == 0x356D6567  # "gem5"
    pos, messages = 4, []
    while pos < len(data):
        length, pos = _varint(data, pos)
        messages.append(_fields(data[pos : pos + length]))
        pos += length
    return messages[0], messages[1:]


def test_header_names_the_tick_frequency():
    header, packets = _decode(tr.header())
    assert header[3] == 10**12 and header[1] == b"trainingcxl"
    assert packets == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, (1 << 49) - 1),
            st.integers(1, 4096),
            st.integers(0, (1 << 50) - 1),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_packets_decode_to_what_was_encoded(rows):
    write, addr, size, ticks = (np.array(column) for column in zip(*rows, strict=True))
    _, packets = _decode(tr.header() + tr.encode(write, addr, size, ticks))
    assert [(p[1], p[2], p[3], p[4]) for p in packets] == [
        (int(t), 4 if w else 1, int(a), int(s)) for w, a, s, t in rows
    ]


def test_encode_refuses_what_the_fixed_widths_cannot_hold():
    with pytest.raises(ValueError, match="does not fit"):
        tr.encode(np.array([True]), np.array([1 << 57]), np.array([64]), np.array([0]))
    with pytest.raises(ValueError, match="packet sizes"):
        tr.encode(np.array([True]), np.array([0]), np.array([1 << 14]), np.array([0]))


@settings(max_examples=60, deadline=None)
@given(
    addresses=st.lists(st.integers(0, 1 << 30), min_size=1, max_size=40),
    size=st.integers(1, 5000),
    line=st.sampled_from([64, 256]),
)
def test_split_lines_keeps_every_byte_in_order_inside_lines(addresses, size, line):
    packets = tr.split_lines(np.array(addresses), size, line)
    assert (packets.addr // line == (packets.addr + packets.size - 1) // line).all()
    assert packets.size.sum() == size * len(addresses)
    assert (np.diff(packets.request) >= 0).all()
    for request, start in enumerate(addresses):
        mine = packets.request == request
        assert packets.addr[mine][0] == start
        ends = packets.addr[mine] + packets.size[mine]
        assert (packets.addr[mine][1:] == ends[:-1]).all()  # contiguous
        assert ends[-1] == start + size


def test_a_136_byte_log_entry_straddling_a_line_is_two_packets():
    packets = tr.split_lines(np.array([200]), 136, 256)
    assert packets.addr.tolist() == [200, 256] and packets.size.tolist() == [56, 80]
