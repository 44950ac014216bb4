"""Opening trace files: the FBGEMM arrays without reading them whole, where the file allows.

A trace can be far larger than memory (facebookresearch/dlrm_datasets' 2021 files hold
468M lookups, 3.7 GB of int64 indices), so the arrays are memory-mapped: an ``.npz``
member stored uncompressed (``np.savez``) is mapped at its offset inside the zip, and a
``.pt`` saved by ``torch.save`` (its zip format, the default since torch 1.6) is loaded
with ``torch.load(mmap=True)``. What cannot be mapped is read whole, as torch and numpy
read it: a deflated ``.npz`` member (``np.savez_compressed``), a legacy-format ``.pt``
and a ``.pt.gz`` (decompressed in memory). torch is imported only to read a ``.pt``.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

FBGEMM_ARRAYS = ("indices", "offsets", "lengths")
"""The arrays of an FBGEMM trace, in the order dlrm_datasets' README loads them:
``indices, offsets, lengths = torch.load(...)``."""
ZIP_LOCAL_HEADER = 30
"""Bytes of a zip local file header before its name and extra field (PKWARE APPNOTE
4.3.7); the member's data follows them."""
READ_BUFFER = 2**20
"""Bytes read from a plain trace file at a time: 1 MiB, a few thousand Criteo lines, so
line reading costs few system calls and its memory is a fixed size (gzip reads its own
fixed-size chunks)."""


class TraceError(ValueError):
    """A trace file that cannot feed the run, as one line naming --trace and the problem."""


def open_binary(path: str) -> BinaryIO:
    """The file for reading bytes; a ``.gz`` decompressed as it is read. The messages
    name the path the way the user gave it."""
    where = Path(path)
    try:
        mode = os.stat(where).st_mode
    except FileNotFoundError:
        raise TraceError(f"--trace {path}: no such file") from None
    except OSError as exc:
        raise TraceError(f"--trace {path}: cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise TraceError(f"--trace {path}: is a directory")
    if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
        raise TraceError(f"--trace {path}: not a regular file")
    try:  # the caller closes it
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, even if swapped
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise TraceError(f"--trace {path}: not a regular file")
        os.set_blocking(fd, True)
        raw = open(fd, "rb", buffering=READ_BUFFER)
        return _OwningGzip(raw) if path.endswith(".gz") else raw
    except OSError as exc:
        raise TraceError(f"--trace {path}: cannot read it ({exc.strerror or exc})") from None


class _OwningGzip(gzip.GzipFile):
    """A GzipFile over an open file that closes that file too (GzipFile does not)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


UNREADABLE = (OSError, EOFError, zlib.error)
"""What reading a damaged file raises: a truncated or corrupt .gz among them."""


def bag_arrays(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices, offsets, lengths) of an ``.npz`` or ``.pt``/``.pt.gz`` FBGEMM trace."""
    open_binary(path).close()  # the missing/unreadable messages
    if path.endswith(".npz"):
        return _npz_arrays(path)
    return _torch_arrays(path)


def _npz_arrays(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise TraceError(f"--trace {path}: not a readable .npz file ({exc})") from None
    with archive:
        names = set(archive.namelist())
        for name in FBGEMM_ARRAYS:
            if f"{name}.npy" not in names:
                raise TraceError(
                    f"--trace {path}: no array named {name!r} (an .npz trace holds "
                    f"{', '.join(FBGEMM_ARRAYS)})"
                )
        try:
            return tuple(_npz_member(path, archive, name) for name in FBGEMM_ARRAYS)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise TraceError(f"--trace {path}: not a readable .npz file ({exc})") from None


def _npz_member(path: str, archive: zipfile.ZipFile, name: str) -> np.ndarray:
    """One array of an .npz, memory-mapped when it is stored uncompressed."""
    info = archive.getinfo(f"{name}.npy")
    if info.compress_type != zipfile.ZIP_STORED:
        with archive.open(info) as member:
            return np.lib.format.read_array(member, allow_pickle=False)
    with open(path, "rb") as raw:
        raw.seek(info.header_offset)
        header = raw.read(ZIP_LOCAL_HEADER)
        if len(header) < ZIP_LOCAL_HEADER or header[:4] != b"PK\x03\x04":
            raise ValueError(f"bad zip header for {name}.npy")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        raw.seek(info.header_offset + ZIP_LOCAL_HEADER + name_length + extra_length)
        version = np.lib.format.read_magic(raw)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(raw)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(raw)
        start = raw.tell()
    if dtype.hasobject:
        raise ValueError(f"{name}.npy holds Python objects")
    if int(np.prod(shape)) == 0:
        return np.empty(shape, dtype=dtype)
    order = "F" if fortran else "C"
    return np.memmap(path, dtype=dtype, mode="r", offset=start, shape=shape, order=order)


_LOAD = {"map_location": "cpu", "weights_only": True}
"""A trace is data, never code: torch's unpickler refuses anything but tensors."""


def _torch_arrays(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise TraceError(
            f"--trace {path}: reading a .pt trace needs torch, which is not installed "
            "(save the arrays as an .npz instead)"
        ) from None
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as packed:
                data = torch.load(io.BytesIO(packed.read()), **_LOAD)
        else:
            try:
                data = torch.load(path, mmap=True, **_LOAD)
            except RuntimeError:  # a legacy (pre-zip) file cannot be mapped
                data = torch.load(path, **_LOAD)
    except Exception as exc:  # torch.load documents no exception types: any means unreadable
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceError(f"--trace {path}: not a readable torch file ({reason})") from None
    if (
        not isinstance(data, tuple | list)
        or len(data) != len(FBGEMM_ARRAYS)
        or not all(isinstance(item, torch.Tensor) for item in data)
    ):
        raise TraceError(
            f"--trace {path}: expected a tuple of three tensors "
            f"({', '.join(FBGEMM_ARRAYS)}), got {type(data).__name__}"
        )
    return tuple(item.detach().cpu().numpy() for item in data)


def file_stamp(path: str) -> tuple[str, int, int]:
    """What identifies a file's content for a cache: its real path, size and mtime."""
    try:
        stat = os.stat(path)
    except OSError:
        return (path, -1, -1)
    return (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
