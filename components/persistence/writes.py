"""Functional PMEM writes as arrays: groups of equal-sized, word-aligned writes.

A protocol says what an op writes as ``Writes`` groups (n writes of the same size at n
offsets, payloads as one (n, size) byte array) and orders them in epochs; nothing here
loops over rows in Python. Every offset and size is a multiple of the 8 B atomic
write unit, so a write is a run of words and tearing is choosing words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from components.persistence.image import WORD


@dataclass(frozen=True, eq=False)
class Writes:
    """``offsets[i]`` receives ``data[i]``; ``clip``: only the parts the op's device
    requests covered were written (a DMA stopped early), the rest never was."""

    offsets: np.ndarray
    data: np.ndarray
    clip: bool = False

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets, dtype=np.int64).reshape(-1)
        data = np.asarray(self.data)
        if data.dtype != np.uint8:
            data = np.ascontiguousarray(data).view(np.uint8)
        data = data.reshape(offsets.size, -1) if offsets.size else data.reshape(0, 0)
        if offsets.size and (data.shape[1] % WORD or (offsets % WORD).any()):
            raise ValueError("writes must be whole 8 B words at 8 B-aligned offsets")
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "data", data)

    @classmethod
    def one(cls, offset: int, payload: np.ndarray, clip: bool = False) -> Writes:
        """One write of ``payload`` (padded with zeros to whole words)."""
        raw = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
        if raw.size % WORD:
            raw = np.concatenate([raw, np.zeros(WORD - raw.size % WORD, dtype=np.uint8)])
        return cls(np.array([offset], dtype=np.int64), raw.reshape(1, -1), clip)

    @classmethod
    def word(cls, offset: int, value: int) -> Writes:
        return cls.one(offset, np.array([value], dtype="<i8"))

    @property
    def count(self) -> int:
        return int(self.offsets.size)

    @property
    def size(self) -> int:
        return int(self.data.shape[1]) if self.count else 0

    @property
    def nbytes(self) -> int:
        return self.count * self.size

    def words(self) -> tuple[np.ndarray, np.ndarray]:
        """(destination word index, value) of every word written, in write order."""
        if not self.count:
            return np.zeros(0, np.int64), np.zeros(0, np.uint64)
        per = self.size // WORD
        dst = (self.offsets // WORD)[:, None] + np.arange(per, dtype=np.int64)
        values = np.ascontiguousarray(self.data).reshape(-1).view(np.uint64)
        return dst.reshape(-1), values


def all_words(groups: list[Writes]) -> tuple[np.ndarray, np.ndarray]:
    """Destination words and values of several groups, in order."""
    parts = [g.words() for g in groups if g.count]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64)
    return np.concatenate([d for d, _ in parts]), np.concatenate([v for _, v in parts])


def words_after(
    words: np.ndarray, lo: int, hi: int, dst: np.ndarray, values: np.ndarray
) -> np.ndarray:
    """A copy of ``words[lo:hi]`` with the writes (word ``dst``, ``values``) that land
    inside it applied: what a recovery leaves there, the image untouched."""
    part = words[lo:hi].copy()
    inside = (dst >= lo) & (dst < hi)
    part[dst[inside] - lo] = values[inside]
    return part


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, start + count)`` for every pair, vectorized."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.cumsum(counts) - counts
    return np.repeat(np.asarray(starts, dtype=np.int64) - before, counts) + np.arange(total)
