"""The journal: every functional PMEM write, split into the device requests that carried
it, with the ticks between which each piece may become durable.

A protocol declares what an op writes in *epochs* (groups separated by the op's fences,
docs/failures.md). The timing model reports, per op, each device write request
(address, size), the tick it entered the persistence domain and the tick its stream was
issued. A functional write is matched to the requests by ADDRESS: it is cut at request
boundaries into *pieces*, and each piece takes the persist tick ``p`` of the request
that covered it. Under ADR a piece may become durable at any tick in ``[lo, hi]``:
``lo`` = when its request was issued (or its epoch began), ``hi`` = the fence that closes
its epoch (the last persist tick of the epoch: the fence waits for all of them). ``p``
is the order the timing model itself produced (the prefix walk). In a domain that
persists at issue (eADR, GPF) stores become durable in issue order: ``lo = hi = p``.

A functional write no request covered (a protocol writing where the board does not,
e.g. a broken protocol or state the board does not model) is *unmatched*: it may become
durable anywhere in its epoch. The journal counts those bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from components.persistence.image import WORD, ImageLayout
from components.persistence.writes import Writes, ranges

POOL_LIMIT = 1 << 20  # payload groups smaller than this share one pool array


@dataclass(frozen=True)
class Requests:
    """One op's device write requests, sorted by address, non-overlapping."""

    addr: np.ndarray
    end: np.ndarray
    tick: np.ndarray
    issued: np.ndarray

    @classmethod
    def from_events(cls, events) -> Requests:
        """From ``PersistedWrites`` events (components/memory/base.py) of one op."""
        if not events:
            return cls.empty()
        addr = np.concatenate([np.asarray(e.addresses, dtype=np.int64) for e in events])
        size = np.concatenate([np.full(len(e.addresses), e.size, np.int64) for e in events])
        tick = np.concatenate([np.asarray(e.ticks, dtype=np.int64) for e in events])
        issued = np.concatenate([np.full(len(e.addresses), e.issued, np.int64) for e in events])
        order = np.lexsort((tick, addr))
        addr, size, tick, issued = addr[order], size[order], tick[order], issued[order]
        last = np.r_[addr[1:] != addr[:-1], True]  # a rewritten address: its last write
        addr, size, tick, issued = addr[last], size[last], tick[last], issued[last]
        end = addr + size
        end[:-1] = np.minimum(end[:-1], addr[1:])
        return cls(addr, end, tick, issued)

    @classmethod
    def empty(cls) -> Requests:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z)

    def __len__(self) -> int:
        return int(self.addr.size)


@dataclass
class Journal:
    """Pieces of functional writes as parallel arrays (one entry per piece).

    ``dst``/``count``: first word and word count in the image; ``source``/``src``: where
    the payload words are (``sources[source][src:src + count]``); ``lo``/``p``/``hi``:
    persist window and timing order; ``epoch``: global epoch id (ordered by its fence);
    ``op``: the op's uid; ``region``: index into ``region_names``."""

    layout: ImageLayout
    dst: np.ndarray
    count: np.ndarray
    src: np.ndarray
    source: np.ndarray
    lo: np.ndarray
    p: np.ndarray
    hi: np.ndarray
    epoch: np.ndarray
    op: np.ndarray
    region: np.ndarray
    matched: np.ndarray
    sources: list[np.ndarray]
    unhonoured_fences: list[tuple[int, int]] = field(default_factory=list)
    overlaps: int = 0

    def __len__(self) -> int:
        return int(self.dst.size)

    @property
    def end(self) -> int:
        return int(self.hi.max()) if len(self) else 0

    @property
    def unmatched_bytes(self) -> int:
        return int(self.count[~self.matched].sum()) * WORD

    @property
    def region_names(self) -> list[str]:
        return self.layout.region_starts()[0]

    def words_of(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(destination word, value) of every word of the pieces ``sel``, in sel order."""
        sel = np.asarray(sel, dtype=np.int64)
        counts = self.count[sel]
        dst = ranges(self.dst[sel], counts)
        sources = self.source[sel]
        kinds = np.unique(sources)
        if kinds.size == 1:
            return dst, self.sources[int(kinds[0])][ranges(self.src[sel], counts)]
        values = np.empty(dst.size, dtype=np.uint64)
        before = np.cumsum(counts) - counts
        for s in kinds.tolist():
            pick = np.flatnonzero(sources == s)
            at = ranges(before[pick], counts[pick])
            values[at] = self.sources[s][ranges(self.src[sel[pick]], counts[pick])]
        return dst, values

    def apply(self, words: np.ndarray, sel: np.ndarray) -> None:
        """Write the pieces ``sel`` into ``words``; where two write the same word, the one
        of the later epoch (then the later ``p``) wins."""
        sel = np.asarray(sel, dtype=np.int64)
        if sel.size == 0:
            return
        if not self._overlapping(sel):
            self._write(words, sel)
            return
        order = sel[np.lexsort((self.p[sel], self.epoch[sel]))]
        cuts = np.flatnonzero(np.diff(self.epoch[order])) + 1
        for group in np.split(order, cuts):
            self._write(words, group)

    def runs(self, sel: np.ndarray) -> tuple[np.ndarray, ...]:
        """The pieces ``sel`` merged into maximal runs contiguous in the image and in one
        payload source: (image word, source, source word, length) per run."""
        sel = sel[np.lexsort((self.dst[sel],))]
        dst, src, source, count = self.dst[sel], self.src[sel], self.source[sel], self.count[sel]
        joined = (dst[1:] == dst[:-1] + count[:-1]) & (source[1:] == source[:-1])
        joined &= src[1:] == src[:-1] + count[:-1]
        starts = np.flatnonzero(np.r_[True, ~joined])
        lengths = np.add.reduceat(count, starts) if starts.size else starts
        return dst[starts], source[starts], src[starts], lengths

    def _write(self, words: np.ndarray, sel: np.ndarray) -> None:
        """Write non-overlapping pieces: long runs as slices, many short ones gathered."""
        dst, source, src, lengths = self.runs(sel)
        if dst.size * 64 > lengths.sum():
            d, values = self.words_of(sel)
            words[d] = values
            return
        spans = zip(dst.tolist(), source.tolist(), src.tolist(), lengths.tolist(), strict=True)
        for d, s, at, n in spans:
            words[d : d + n] = self.sources[s][at : at + n]

    def _overlapping(self, sel: np.ndarray) -> bool:
        start = self.dst[sel]
        order = np.argsort(start, kind="stable")
        start, stop = start[order], start[order] + self.count[sel][order]
        return bool((start[1:] < stop[:-1]).any())

    def durable_at(self, tick: int) -> np.ndarray:
        """Pieces the timing model made durable by ``tick`` (the prefix walk's state)."""
        return np.flatnonzero(self.p <= tick)

    def image_at(self, words: np.ndarray, tick: int) -> None:
        """Apply, in place, the pieces durable at ``tick`` in the timing's own order: a
        functional write spanning several requests is torn at their boundaries."""
        self.apply(words, self.durable_at(tick))


class JournalBuilder:
    """Collects ops' epochs of functional writes and matches them to their requests."""

    def __init__(self, layout: ImageLayout, ordered: bool = False) -> None:
        self.layout = layout
        self.ordered = ordered
        self._names, self._starts = layout.region_starts()
        self._cols: dict[str, list[np.ndarray]] = {
            k: []
            for k in ("dst", "count", "src", "source", "lo", "p", "hi", "epoch", "op", "matched")
        }
        self._sources: list[np.ndarray] = []
        self._epochs = 0
        self.unhonoured_fences: list[tuple[int, int]] = []

    def add_op(self, uid: int, start: int, epochs: list[list[Writes]], requests: Requests) -> None:
        """Place one op's epochs: each piece's persist window from its request (and the
        op's declared fences), checked against the order the timing produced."""
        epoch_start = start
        previous_last = None
        for k, epoch in enumerate(epochs):
            parts = [self._pieces(group, requests) for group in epoch if group.count]
            parts = [p for p in parts if p["dst"].size]
            if not parts:
                continue
            cols = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
            matched = cols["matched"]
            tick, issued = cols["tick"], cols["issued"]
            if previous_last is not None and matched.any():
                if previous_last > int(issued[matched].min()):
                    self.unhonoured_fences.append((uid, k))
            hi = max(epoch_start, int(tick[matched].max()) if matched.any() else epoch_start)
            lo = np.where(matched, np.maximum(issued, epoch_start), epoch_start)
            p = np.where(matched, np.clip(tick, lo, hi), hi)
            if self.ordered:
                lo = p.copy()
                hi_col = p.copy()
            else:
                hi_col = np.full(p.size, hi, dtype=np.int64)
            n = p.size
            self._cols["dst"].append(cols["dst"])
            self._cols["count"].append(cols["count"])
            self._cols["src"].append(cols["src"])
            self._cols["source"].append(cols["source"])
            self._cols["lo"].append(lo.astype(np.int64))
            self._cols["p"].append(p.astype(np.int64))
            self._cols["hi"].append(hi_col)
            self._cols["epoch"].append(np.full(n, self._epochs, dtype=np.int64))
            self._cols["op"].append(np.full(n, uid, dtype=np.int64))
            self._cols["matched"].append(matched)
            self._epochs += 1
            previous_last = int(tick[matched].max()) if matched.any() else previous_last
            epoch_start = hi

    def _pieces(self, group: Writes, requests: Requests) -> dict[str, np.ndarray]:
        """Cut a group's writes at request boundaries; each piece with its request."""
        n, size = group.count, group.size
        w_lo = group.offsets
        w_hi = w_lo + size
        bounds = np.unique(np.concatenate([requests.addr, requests.end]) // WORD * WORD)
        a = np.searchsorted(bounds, w_lo, side="right")
        b = np.searchsorted(bounds, w_hi, side="left")
        cuts = b - a
        per = cuts + 1
        write = np.repeat(np.arange(n), per)
        j = np.arange(write.size) - np.repeat(np.cumsum(per) - per, per)
        first = j == 0
        inner = np.minimum(a[write] + j - 1, max(bounds.size - 1, 0))
        start = np.where(first, w_lo[write], bounds[inner] if bounds.size else 0)
        last = j == cuts[write]
        after = np.minimum(a[write] + j, max(bounds.size - 1, 0))
        stop = np.where(last, w_hi[write], bounds[after] if bounds.size else 0)
        r = np.searchsorted(requests.addr, start, side="right") - 1
        rr = np.maximum(r, 0)
        matched = (r >= 0) & (requests.end[rr] > start) if len(requests) else np.zeros_like(first)
        keep = (stop > start) & (matched | (not group.clip))
        write, start, stop, rr = write[keep], start[keep], stop[keep], rr[keep]
        matched = matched[keep]
        source = len(self._sources)
        self._sources.append(np.ascontiguousarray(group.data).reshape(-1).view(np.uint64))
        tick = requests.tick[rr] if len(requests) else np.zeros(start.size, np.int64)
        issued = requests.issued[rr] if len(requests) else np.zeros(start.size, np.int64)
        return {
            "dst": start // WORD,
            "count": (stop - start) // WORD,
            "src": (write * size + (start - w_lo[write])) // WORD,
            "source": np.full(start.size, source, dtype=np.int64),
            "tick": tick,
            "issued": issued,
            "matched": matched.astype(bool),
        }

    def freeze(self) -> Journal:
        """The journal as arrays; small payloads pooled into one array."""
        if not self._cols["dst"]:
            z = np.zeros(0, dtype=np.int64)
            return Journal(self.layout, z, z, z, z, z, z, z, z, z, z, np.zeros(0, bool), [], [])
        cols = {k: np.concatenate(v) for k, v in self._cols.items()}
        fence = np.zeros(self._epochs, dtype=np.int64)
        np.maximum.at(fence, cols["epoch"], cols["hi"])
        rank = np.empty(self._epochs, dtype=np.int64)
        rank[np.lexsort((np.arange(self._epochs), fence))] = np.arange(self._epochs)
        cols["epoch"] = rank[cols["epoch"]]  # epoch ids in the order of their fences
        sources, remap, offset = [], {}, {}
        small = [i for i, s in enumerate(self._sources) if s.nbytes < POOL_LIMIT]
        if small:
            pool = np.concatenate([self._sources[i] for i in small])
            starts = np.cumsum([0] + [self._sources[i].size for i in small])[:-1]
            for i, at in zip(small, starts, strict=True):
                remap[i], offset[i] = 0, int(at)
            sources.append(pool)
        for i, s in enumerate(self._sources):
            if i not in remap:
                remap[i], offset[i] = len(sources), 0
                sources.append(s)
        src_map = np.array([remap[i] for i in range(len(self._sources))], dtype=np.int64)
        off_map = np.array([offset[i] for i in range(len(self._sources))], dtype=np.int64)
        source = src_map[cols["source"]]
        src = cols["src"] + off_map[cols["source"]]
        region = np.searchsorted(self._starts, cols["dst"] * WORD, side="right") - 1
        journal = Journal(
            self.layout,
            cols["dst"],
            cols["count"],
            src,
            source,
            cols["lo"],
            cols["p"],
            cols["hi"],
            cols["epoch"],
            cols["op"],
            region.astype(np.int64),
            cols["matched"],
            sources,
            list(self.unhonoured_fences),
        )
        journal.overlaps = _epoch_overlaps(journal)
        return journal


def _epoch_overlaps(journal: Journal) -> int:
    """Pairs of pieces of one epoch writing the same word (their order is undefined)."""
    order = np.lexsort((journal.dst, journal.epoch))
    dst, epoch = journal.dst[order], journal.epoch[order]
    stop = dst + journal.count[order]
    same = epoch[1:] == epoch[:-1]
    return int((same & (dst[1:] < stop[:-1])).sum())
