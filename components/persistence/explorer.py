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
    a durable piece of a sampled state is torn; ``seed``: the sampling seed;
    ``window``: visit only the ticks in [lo, hi] (None: the whole run)."""

    prefix: int = -1
    budget: int = 24
    tear: float = 0.25
    seed: int = 0
    window: tuple[int, int] | None = None


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
        if regions.size == 1:
            self.gen[regions[0]] = self._next
            self._next += 1
            return
        self.gen[regions] = self._next + np.arange(regions.size)
        self._next += regions.size

    def write(self, dst: np.ndarray, values: np.ndarray) -> None:
        """A permanent write (the walk moving forward)."""
        if dst.size:
            self.words[dst] = values
            self.bump(self.regions(dst))

    def push(self, dst: np.ndarray, values: np.ndarray, regions: np.ndarray | None = None) -> None:
        """Write ``values`` at word indices ``dst`` until popped (``regions``: the regions
        they fall in, when the caller knows them)."""
        regions = self.regions(dst) if regions is None else regions
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
    the in-flight pieces made fully / partly durable (reordered states only);
    ``touched``: regions the state changes relative to the prefix walk's image."""

    mode: str
    tick: int
    interval: int = -1
    durable: np.ndarray | None = None
    torn: np.ndarray | None = None
    touched: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    count: int = 1
    _apply: object = None
    _applied: set = field(default_factory=set)

    def apply(self, regions=None) -> None:
        """Put the image in this state, in the given regions only (None: all). Reordered
        states are applied lazily: a consumer that can reuse an earlier verdict, or whose
        recovery reads only some regions, need not pay for the rest of the overlay."""
        if self._apply is None:
            return
        wanted = set(self.touched.tolist()) if regions is None else set(regions)
        wanted &= set(self.touched.tolist())
        wanted -= self._applied
        if wanted:
            self._apply(np.array(sorted(wanted), dtype=np.int64))
            self._applied |= wanted

    @property
    def pending(self) -> set:
        """Touched regions not applied yet."""
        if self._apply is None:
            return set()
        return set(self.touched.tolist()) - self._applied


@dataclass
class IntervalStats:
    tick: int
    pieces: int
    words: int
    explored: int
    exhaustive: bool
    pair_coverage: float


class CrashExplorer:
    """Walks the crash states of ``journal`` over (a copy of) ``base_words``."""

    def __init__(
        self,
        journal: Journal,
        base_words: np.ndarray,
        settings: ExploreSettings,
        copy: bool = True,
    ) -> None:
        """``copy=False``: walk in ``base_words`` itself (it ends as the last state)."""
        self.journal = journal
        self.settings = settings
        self.words = np.array(base_words, copy=True) if copy else base_words
        self.overlay = WordOverlay(self.words, journal.layout.region_starts()[1])
        self.rng = np.random.default_rng([settings.seed, 13])
        self.intervals: list[IntervalStats] = []
        self._pre: dict[int, np.ndarray] = {}

    # ----- the walk ---------------------------------------------------------------------
    def walk(self, watch=None) -> Iterator[CrashState]:
        """Every selected crash state, in tick order. ``watch``: called after a prefix
        state, the regions the consumer's verdict on the current image depends on (or
        None); the following prefix states that change none of them (nor any interval
        starting) are yielded as ONE state with ``count`` > 1: the verdict is theirs too."""
        j, s = self.journal, self.settings
        prefix = self._prefix_ticks()
        intervals = np.unique(np.concatenate([j.lo, j.hi])) if s.budget else np.zeros(0, int)
        ticks = np.unique(np.concatenate([prefix, intervals, [0]]))
        if s.window is not None:
            ticks = ticks[(ticks >= s.window[0]) & (ticks <= s.window[1])]
            intervals = intervals[(intervals >= s.window[0]) & (intervals <= s.window[1])]
        is_prefix = np.isin(ticks, prefix) | (ticks == 0)
        is_interval = np.isin(ticks, intervals)
        next_interval = np.searchsorted(ticks, intervals)  # tick indices of intervals
        self._by_p = np.argsort(j.p, kind="stable")
        self._by_hi = np.argsort(j.hi, kind="stable")
        self._sorted_p, self._sorted_hi = j.p[self._by_p], j.hi[self._by_hi]
        self._region_p = j.region[self._by_p]
        self._done_p = self._done_hi = 0
        i = 0
        while i < ticks.size:
            tick = int(ticks[i])
            self._to(tick)
            if is_prefix[i]:
                yield CrashState("prefix", tick)
            if is_interval[i]:
                yield from self._reorder(tick)
            elif is_prefix[i] and watch is not None:
                k = int(np.searchsorted(next_interval, i, side="right"))
                limit = int(next_interval[k]) if k < next_interval.size else ticks.size
                skip = self._invisible(ticks, i, limit, watch())
                if skip:
                    i += skip
                    self._to(int(ticks[i]))
                    yield CrashState("prefix", int(ticks[i]), count=skip)
            i += 1

    def _to(self, tick: int) -> None:
        """Advance the prefix walk to ``tick``: pieces with p <= tick durable; those
        whose window closed need no pre-image any more."""
        stop = int(np.searchsorted(self._sorted_p, tick, side="right"))
        if stop > self._done_p:
            self._advance(self._by_p[self._done_p : stop], tick)
            self._done_p = stop
        stop = int(np.searchsorted(self._sorted_hi, tick, side="right"))
        for piece in self._by_hi[self._done_hi : stop].tolist():
            self._pre.pop(piece, None)
        self._done_hi = stop

    def _invisible(self, ticks: np.ndarray, i: int, limit: int, watched) -> int:
        """How many prefix ticks after ticks[i] (before index ``limit``) only make
        durable pieces outside the ``watched`` regions."""
        if watched is None or i + 1 >= limit:
            return 0
        start = self._done_p
        if start >= self._region_p.size or self._region_p[start] in watched:
            return 0
        window = self._region_p[start : start + (1 << 16)]
        bad = np.flatnonzero(np.isin(window, np.fromiter(watched, dtype=np.int64)))
        if bad.size:
            bound = int(self._sorted_p[start + bad[0]])
        elif start + window.size < self._region_p.size:
            bound = int(self._sorted_p[start + window.size])
        else:
            bound = np.iinfo(np.int64).max
        last = int(np.searchsorted(ticks, bound, side="left")) - 1  # last tick < bound
        return max(min(last, limit - 1) - i, 0)

    def _prefix_ticks(self) -> np.ndarray:
        ticks = np.unique(self.journal.p)
        if self.settings.window is not None:  # a sample is drawn from the window's ticks
            ticks = ticks[(ticks >= self.settings.window[0]) & (ticks <= self.settings.window[1])]
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
        open_ = pieces[j.hi[pieces] > tick]
        if open_.size:
            open_ = open_[np.argsort(j.dst[open_], kind="stable")]
            dst, _, _, lengths = j.runs(open_)
            if dst.size * 64 > lengths.sum():
                old = self.words[ranges(dst, lengths)]
            else:
                spans = zip(dst.tolist(), lengths.tolist(), strict=True)
                old = np.concatenate([self.words[d : d + n] for d, n in spans])
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
        for durable, torn, mask, mode in self._selections(live, words, budget, exhaustive):
            state = self._state(tick, index, live, durable, torn, mask, mode)
            inside = np.isin(track, durable)
            outside = ~inside & ~np.isin(track, torn)
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
        """(fully durable pieces, torn pieces, their durable words, mode) of the states
        to visit."""
        n = live.size
        none = np.zeros(0, dtype=np.int64)
        counts = self.journal.count[live]
        if exhaustive:
            owner = np.repeat(np.arange(n), counts)
            for bits in range(1 << words):
                mask = (bits >> np.arange(words)) & 1 == 1
                got = np.bincount(owner, weights=mask, minlength=n)
                full = got == counts
                part = (got > 0) & ~full
                yield live[full], live[part], mask[part[owner]], "full"
            return
        if n < 63 and (1 << n) <= budget:
            for bits in range(1 << n):
                yield live[(bits >> np.arange(n)) & 1 == 1], none, none.astype(bool), "full"
            left = budget - (1 << n)
        else:
            yield live[:0], none, none.astype(bool), "partial"
            yield live, none, none.astype(bool), "partial"
            singles = live if n <= budget // 2 else self.rng.choice(live, budget // 4, False)
            for piece in np.sort(singles):
                yield np.array([piece]), none, none.astype(bool), "partial"
            left = budget - 2 - singles.size
        for _ in range(max(left, 0)):
            durable = self.rng.random(n) < 0.5
            torn = durable & (self.rng.random(n) < self.settings.tear) & (counts > 1)
            masks = self.rng.random(int(counts[torn].sum())) < 0.5
            yield live[durable & ~torn], live[torn], masks, "partial"

    def _state(self, tick, index, live, durable, torn, mask, mode) -> CrashState:
        j = self.journal
        applied = live[j.p[live] <= tick]
        revert = np.setdiff1d(applied, durable)
        add = np.setdiff1d(durable, applied)
        touched = np.unique(j.region[np.concatenate([revert, add, torn])])
        owner = np.repeat(np.arange(torn.size), j.count[torn])

        def apply(regions: np.ndarray) -> None:
            back = revert[np.isin(j.region[revert], regions)]
            if back.size:
                dst = ranges(j.dst[back], j.count[back])
                old = np.concatenate([self._pre[p] for p in back.tolist()])
                self.overlay.push(dst, old, np.unique(j.region[back]))
            more = add[np.isin(j.region[add], regions)]
            if more.size:
                self.overlay.push(*j.words_of(more), np.unique(j.region[more]))
            keep = np.isin(j.region[torn], regions)
            if keep.any():
                dst, values = j.words_of(torn[keep])
                words = mask[keep[owner]]
                self.overlay.push(dst[words], values[words], np.unique(j.region[torn[keep]]))

        return CrashState(mode, tick, index, durable, torn, touched, _apply=apply)
