"""Crash states the persistency model allows, visited incrementally over one image.

A crash at tick T leaves durable every piece whose window closed (``hi <= T``: its
fence completed), none of those not yet issued (``lo > T``), and ANY subset of the
pieces in flight (``lo <= T < hi``), each possibly torn to any subset of its 8 B words
(docs/failures.md). The in-flight set only changes at ``lo``/``hi`` ticks, so the
explorer visits every *crash interval* between them once. Vocabulary after PMDK's
pmreorder:
- ``prefix`` (NoReorder): the timing model's own order, every distinct persist tick
  ``p`` (or a seeded sample of them): pieces with ``p <= T`` durable.
- ``full`` (ReorderFull): every state of an interval, when there are at most
  ``budget`` of them (all word subsets, else all subsets of whole pieces).
- ``partial`` (ReorderPartial): seeded samples of a larger interval: nothing of it,
  all of it, each piece alone, then random subsets with random tearing; the coverage
  reported is the share of ordered piece pairs (a, b) seen with a durable and b not.

The image is never copied per state: the walk applies each piece once, in ``p``
order, keeping the words it overwrote while its window is open; a reordered state is
a small overlay (revert some open pieces, apply others) undone afterwards. Every
region carries a generation number that changes with its content, so a consumer can
tell that the bytes a recovery read are the same as in an earlier state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from components.persistence.image import WORD
from components.persistence.journal import Journal
from components.persistence.writes import ranges

PAIR_TRACK = 256  # pieces of an interval followed for pair coverage


@dataclass(frozen=True)
class ExploreSettings:
    """``prefix``: persist ticks of the prefix walk (-1 all, 0 none, K a seeded
    sample); ``budget``: states per crash interval (0: no reordering); ``tear``: chance
    a durable piece of a sampled state is torn; ``seed``: the sampling seed."""

    prefix: int = -1
    budget: int = 24
    tear: float = 0.25
    seed: int = 0


class WordOverlay:
    """Temporary word writes over an image, undone in reverse order, with per-region
    generations that change with content and come back when it does."""

    def __init__(self, words: np.ndarray, region_starts: np.ndarray) -> None:
        self.words = words
        self.starts = region_starts // WORD
        self.gen = np.zeros(region_starts.size, dtype=np.int64)
        self._next = 1
        self._stack: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def regions(self, dst: np.ndarray) -> np.ndarray:
        if dst.size == 0:
            return np.zeros(0, dtype=np.int64)
        index = np.searchsorted(self.starts, dst, side="right") - 1
        return np.flatnonzero(np.bincount(index, minlength=self.starts.size))

    def bump(self, regions: np.ndarray) -> None:
        self.gen[regions] = self._next + np.arange(regions.size)
        self._next += regions.size

    def write(self, dst: np.ndarray, values: np.ndarray) -> None:
        """A permanent write (the walk moving forward)."""
        if dst.size:
            self.words[dst] = values
            self.bump(self.regions(dst))

    def push(self, dst: np.ndarray, values: np.ndarray) -> None:
        regions = self.regions(dst)
        self._stack.append((dst, self.words[dst], regions, self.gen[regions].copy()))
        if dst.size:
            self.words[dst] = values
            self.bump(regions)

    def pop(self) -> None:
        dst, old, regions, gens = self._stack.pop()
        if dst.size:
            self.words[dst] = old
            self.gen[regions] = gens

    @property
    def depth(self) -> int:
        return len(self._stack)

    def unwind(self, depth: int) -> None:
        while len(self._stack) > depth:
            self.pop()


@dataclass
class CrashState:
    """One crash state while the explorer holds the image in it. ``durable``/``torn``:
    the in-flight pieces made fully / partly durable (reordered states only)."""

    mode: str
    tick: int
    interval: int = -1
    durable: np.ndarray | None = None
    torn: np.ndarray | None = None
    touched: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _apply: object = None

    def apply(self) -> None:
        """Put the image in this state (reordered states are applied lazily, so a
        consumer that can reuse an earlier verdict need not pay for the overlay)."""
        if self._apply is not None:
            self._apply()
            self._apply = None


@dataclass
class IntervalStats:
    tick: int
    pieces: int
    words: int
    explored: int
    exhaustive: bool
    pair_coverage: float


class CrashExplorer:
    """Walks the crash states of ``journal`` over a copy of ``base_words``."""

    def __init__(self, journal: Journal, base_words: np.ndarray, settings: ExploreSettings) -> None:
        self.journal = journal
        self.settings = settings
        self.words = np.array(base_words, copy=True)
        self.overlay = WordOverlay(self.words, journal.layout.region_starts()[1])
        self.rng = np.random.default_rng([settings.seed, 13])
        self.intervals: list[IntervalStats] = []
        self._pre: dict[int, np.ndarray] = {}

    # ----- the walk ---------------------------------------------------------------------
    def walk(self) -> Iterator[CrashState]:
        j, s = self.journal, self.settings
        prefix = self._prefix_ticks()
        intervals = np.unique(np.concatenate([j.lo, j.hi])) if s.budget else np.zeros(0, int)
        ticks = np.unique(np.concatenate([prefix, intervals, [0]]))
        by_p = np.argsort(j.p, kind="stable")
        by_hi = np.argsort(j.hi, kind="stable")
        done_p = done_hi = 0
        prefix_set = set(prefix.tolist())
        interval_set = set(intervals.tolist())
        for tick in ticks.tolist():
            stop = int(np.searchsorted(j.p[by_p], tick, side="right"))
            if stop > done_p:
                self._advance(by_p[done_p:stop], tick)
                done_p = stop
            stop = int(np.searchsorted(j.hi[by_hi], tick, side="right"))
            for piece in by_hi[done_hi:stop].tolist():
                self._pre.pop(piece, None)
            done_hi = stop
            if tick in prefix_set or tick == 0:
                yield CrashState("prefix", tick)
            if tick in interval_set:
                yield from self._reorder(tick)

    def _prefix_ticks(self) -> np.ndarray:
        ticks = np.unique(self.journal.p)
        k = self.settings.prefix
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        if 0 < k < ticks.size:
            rng = np.random.default_rng([self.settings.seed, 7])
            return np.sort(rng.choice(ticks, size=k, replace=False))
        return ticks

    def _advance(self, pieces: np.ndarray, tick: int) -> None:
        """Make ``pieces`` durable for good (the prefix walk), keeping what they
        overwrote while their window is still open."""
        j = self.journal
        if pieces.size == 1:
            piece = int(pieces[0])
            lo, n = int(j.dst[piece]), int(j.count[piece])
            if j.hi[piece] > tick:
                self._pre[piece] = self.words[lo : lo + n].copy()
            src = int(j.src[piece])
            self.words[lo : lo + n] = j.sources[int(j.source[piece])][src : src + n]
            self.overlay.bump(j.region[pieces])
            return
        pieces = pieces[np.lexsort((j.p[pieces], j.epoch[pieces]))]
        open_ = pieces[j.hi[pieces] > tick]
        if open_.size:
            dst = ranges(j.dst[open_], j.count[open_])
            old = self.words[dst]
            splits = np.cumsum(j.count[open_])[:-1]
            for piece, words in zip(open_.tolist(), np.split(old, splits), strict=True):
                self._pre[piece] = words
        j.apply(self.words, pieces)
        self.overlay.bump(np.unique(j.region[pieces]))

    # ----- reordering within an interval ------------------------------------------------------
    def _reorder(self, tick: int) -> Iterator[CrashState]:
        j, budget = self.journal, self.settings.budget
        live = np.flatnonzero((j.lo <= tick) & (j.hi > tick))
        if live.size == 0:
            return
        words = int(j.count[live].sum())
        index = len(self.intervals)
        track = (
            live
            if live.size <= PAIR_TRACK
            else np.sort(self.rng.choice(live, size=PAIR_TRACK, replace=False))
        )
        seen = np.zeros((track.size, track.size), dtype=bool)
        explored = 0
        exhaustive = words < 63 and (1 << words) <= budget
        for durable, torn, mode in self._selections(live, words, budget, exhaustive):
            state = self._state(tick, index, live, durable, torn, mode)
            inside = np.isin(track, durable)
            outside = ~np.isin(track, durable) & ~np.isin(track, [t for t, _ in torn])
            seen |= inside[:, None] & outside[None, :]
            explored += 1
            depth = self.overlay.depth
            yield state
            self.overlay.unwind(depth)
        pairs = track.size * (track.size - 1)
        coverage = 1.0 if exhaustive or pairs == 0 else float(seen.sum()) / pairs
        self.intervals.append(
            IntervalStats(tick, int(live.size), words, explored, exhaustive, min(coverage, 1.0))
        )

    def _selections(self, live: np.ndarray, words: int, budget: int, exhaustive: bool):
        """(fully durable pieces, [(torn piece, word mask)]) of the states to visit."""
        n = live.size
        if exhaustive:
            counts = self.journal.count[live]
            for bits in range(1 << words):
                mask = (bits >> np.arange(words)) & 1 == 1
                per = np.split(mask, np.cumsum(counts)[:-1])
                full = live[[m.all() for m in per]]
                torn = [
                    (int(p), m) for p, m in zip(live, per, strict=True) if m.any() and not m.all()
                ]
                yield full, torn, "full"
            return
        if n < 63 and (1 << n) <= budget:
            for bits in range(1 << n):
                yield live[(bits >> np.arange(n)) & 1 == 1], [], "full"
            left = budget - (1 << n)
        else:
            yield live[:0], [], "partial"
            yield live, [], "partial"
            singles = live if n <= budget // 2 else self.rng.choice(live, budget // 4, False)
            for piece in np.sort(singles):
                yield np.array([piece]), [], "partial"
            left = budget - 2 - singles.size
        counts = self.journal.count[live]
        for _ in range(max(left, 0)):
            durable = self.rng.random(n) < 0.5
            torn_pick = durable & (self.rng.random(n) < self.settings.tear) & (counts > 1)
            torn = [
                (int(p), self.rng.random(int(c)) < 0.5)
                for p, c in zip(live[torn_pick], counts[torn_pick], strict=True)
            ]
            yield live[durable & ~torn_pick], torn, "partial"

    def _state(self, tick, index, live, durable, torn, mode) -> CrashState:
        j = self.journal
        torn_ids = np.array([p for p, _ in torn], dtype=np.int64)
        applied = live[j.p[live] <= tick]
        revert = np.setdiff1d(applied, durable)
        add = np.setdiff1d(durable, applied)
        touched = np.unique(j.region[np.concatenate([revert, add, torn_ids])])

        def apply() -> None:
            if revert.size:
                dst = ranges(j.dst[revert], j.count[revert])
                old = np.concatenate([self._pre[p] for p in revert.tolist()])
                self.overlay.push(dst, old)
            if add.size:
                self.overlay.push(*j.words_of(add))
            if torn_ids.size:
                dst, values = j.words_of(torn_ids)
                mask = np.concatenate([m for _, m in torn])
                self.overlay.push(dst[mask], values[mask])

        return CrashState(mode, tick, index, durable, torn_ids, touched, apply)
