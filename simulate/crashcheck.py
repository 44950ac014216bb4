"""Crash-state exploration: one recorded run, the crash states the persistency model
allows, a recovery and a verdict for each.

The run is simulated once; its journal (components/persistence/journal.py) is walked
by the explorer (components/persistence/explorer.py): the timing's own persist order
(prefix walk), then, in every crash interval, reorderings and torn subsets of the
writes in flight. Each state is recovered by the system's protocol and judged by the
oracle against what the protocol guarantees (simulate/oracle.py). A recovery's verdict
is reused while the bytes of every region it read are unchanged (generations), so
states that differ only where recovery does not look cost a dictionary lookup.

More families are drawn from the states visited: failures DURING recovery (the
recovery's earlier epochs durable, a torn subset of one epoch, then a fresh recovery
that must reach the same state), media faults (one flipped bit in a record the
recovery read, or in metadata: a record header field, a flag, the base record's
header: it must be refused as corrupt or not matter) and failures in the training
RESUMED after a recovery (the recovered image, a fresh recorded stretch from the
resume batch, its crash states). Schedules are explored too (simulate/schedules.py):
for every pair of concurrent ops the board does not order, the other finishing order.
"""

from __future__ import annotations

import functools
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from itertools import chain

import numpy as np
from tqdm import tqdm

from components.persistence.explorer import CrashExplorer, CrashState, ExploreSettings
from components.persistence.image import RECORD_HEADER, WORD, CorruptImage
from components.persistence.protocols import Protocol, Recovery
from components.persistence.writes import Writes, all_words
from simulate.options import RunOptions
from simulate.oracle import (
    DETECTED,
    VIOLATION,
    Expected,
    Guarantee,
    Reference,
    expected_for,
    guarantee_for,
    mlp_matches,
    reference_from,
    verdict,
)
from simulate.recording import (
    ModelState,
    Stretch,
    build_journal,
    initial_image,
    protocol_for,
    run_stretch,
)
from simulate.schedules import delayed_commits, reordered_schedules
from workloads.training import DEFAULT_LR


@dataclass(frozen=True)
class CheckSettings:
    """What to explore: ``explore`` (prefix walk and reordering), ``interrupted``
    failures during recovery, ``media`` bit flips in records and ``metadata`` ones in
    headers, flags and the base record (``metadata`` states, every field flipped in
    each), drawn at random (seeded) from the distinct
    recoveries the walk runs; ``resumed`` recoveries whose resumed training is recorded
    and crashed again (its first ``resumed_batches``, ``resumed_prefix`` sampled persist
    ticks of them); ``schedules``:
    the other order of every pair of concurrent unordered ops (``schedule_prefix``
    sampled persist ticks of each window, every crash interval in it reordered)."""

    explore: ExploreSettings = ExploreSettings()
    interrupted: int = 400
    media: int = 64
    metadata: int = 24
    resumed: int = 2
    resumed_prefix: int = 200
    resumed_batches: int = 3
    schedules: bool = True
    schedule_prefix: int = 64


@dataclass
class CrashReport:
    states: int = 0
    seconds: float = 0.0
    recoveries: int = 0
    modes: Counter = field(default_factory=Counter)
    verdicts: Counter = field(default_factory=Counter)
    violations: list[dict] = field(default_factory=list)
    interrupted: int = 0
    media: int = 0
    media_detected: int = 0
    metadata: int = 0
    metadata_detected: int = 0
    resumed_runs: int = 0
    schedules: int = 0
    schedules_skipped: int = 0
    guarantee: dict = field(default_factory=dict)
    intervals: int = 0
    exhaustive_intervals: int = 0
    pair_coverage: tuple[float, float] = (1.0, 1.0)
    pieces: int = 0
    unmatched_bytes: int = 0
    unhonoured_fences: list = field(default_factory=list)
    cross_device: Counter = field(default_factory=Counter)

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0

    @property
    def recoveries_per_second(self) -> float:
        return self.recoveries / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> dict:
        return {
            "states": self.states,
            "states_per_second": round(self.states_per_second, 1),
            "recoveries": self.recoveries,
            "recoveries_per_second": round(self.recoveries_per_second, 1),
            "by_mode": dict(sorted(self.modes.items())),
            "verdicts": dict(sorted(self.verdicts.items())),
            "intervals": self.intervals,
            "exhaustive_intervals": self.exhaustive_intervals,
            "sampled_pair_coverage": {
                "mean": round(self.pair_coverage[0], 4),
                "min": round(self.pair_coverage[1], 4),
            },
            "interrupted_recoveries": self.interrupted,
            "media_faults": self.media,
            "media_faults_detected": self.media_detected,
            "metadata_faults": self.metadata,
            "metadata_faults_detected": self.metadata_detected,
            "resumed_runs": self.resumed_runs,
            "schedules": self.schedules,
            "schedules_skipped": self.schedules_skipped,
            "guarantee": self.guarantee,
            **(
                {"cross_device": dict(sorted(self.cross_device.items()))}
                if self.cross_device
                else {}
            ),
            "violations": len(self.violations),
        }


class Checker:
    """Recovers and judges the explorer's current image, reusing verdicts by the
    generations of the regions a recovery read."""

    def __init__(
        self,
        explorer: CrashExplorer,
        protocol: Protocol,
        reference: Reference,
        report: CrashReport,
        settings: CheckSettings,
        bounds: Guarantee | None = None,
        family: str | None = None,
        resume=None,
    ) -> None:
        """``bounds``: the stretch's absolute guarantee; ``family``: the mode its states
        are reported under (None: the explorer's own: prefix, full, partial);
        ``resume``: called with a copy of the image at each drawn resume point."""
        self.explorer = explorer
        self.bounds = bounds
        self.family = family
        self.resume = resume
        self.protocol = protocol
        self.reference = reference
        self.report = report
        self.settings = settings
        self.layout = explorer.journal.layout
        self.names, starts = self.layout.region_starts()
        self.index = {name: i for i, name in enumerate(self.names)}
        self.starts = starts
        self.image = protocol.image_over(explorer.words.view(np.uint8))
        gen = explorer.overlay.gen
        self.image.generation = lambda name: int(gen[self.index[name]])
        self.memo: dict[tuple, tuple[str, str]] = {}
        self.candidates: dict[int, set[tuple[int, ...]]] = defaultdict(set)
        self.mlp_memo: dict[tuple, bool] = {}
        self.rng = np.random.default_rng([settings.explore.seed, 29])
        end = max(explorer.journal.end, 1)
        self.due = {  # ticks from which the next of each family is drawn: spread over the run
            "interrupted": list(np.linspace(0, end, settings.interrupted, endpoint=False)),
            "media": list(np.linspace(0, end, settings.media, endpoint=False)),
            "metadata": list(np.linspace(0, end, settings.metadata, endpoint=False)),
            "resumed": list(np.linspace(end / 4, end, settings.resumed, endpoint=False)),
        }
        self.always = {self.index[n] for n in protocol.always_read()}
        self.commits = [self.index[n] for n in protocol.commit_regions()]
        self.last = None
        self.tick = 0

    # ----- one state --------------------------------------------------------------------
    def check(self, state: CrashState) -> None:
        self.tick = state.tick
        gen = self.explorer.overlay.gen
        touched = set(state.touched.tolist())
        changed = not touched.isdisjoint(self.commits)
        regions, outcome = (None, None) if changed else self.lookup(touched)
        if outcome is None:
            self.image.on_read = lambda name: state.apply([self.index[name]])
            state.apply(self.always)
            outcome, regions, rec = self.recover_and_judge()
            self.memo[(regions, tuple(gen[list(regions)].tolist()))] = outcome
            self.candidates[self.commit_key()].add(regions)
            self.report.recoveries += 1
            if rec is not None and outcome[0] != VIOLATION:
                self.explore_recovery(rec, state, regions)
                if self.resume and rec.batch > 0 and self._due("resumed", state.tick):
                    state.apply()
                    self.resume(self.explorer.words.copy())
            self.image.on_read = None
        self.last = regions if state.mode == "prefix" and outcome[0] != VIOLATION else None
        self.record(state, outcome)

    def lookup(self, touched: set) -> tuple[tuple | None, tuple[str, str] | None]:
        """A verdict already reached on the same bytes of every region a recovery read
        (the state differs only in ``touched`` regions, none of them read)."""
        gen = self.explorer.overlay.gen
        for regions in self.candidates.get(self.commit_key(), ()):
            if touched.isdisjoint(regions):
                outcome = self.memo.get((regions, tuple(gen[list(regions)].tolist())))
                if outcome is not None:
                    return regions, outcome
        return None, None

    def commit_key(self) -> tuple[int, ...]:
        """The generations of the words that decide what a recovery resumes at."""
        return tuple(self.explorer.overlay.gen[self.commits].tolist())

    def watch(self) -> set | None:
        """The regions the verdict on the current (prefix) image depends on."""
        return None if self.last is None else set(self.last)

    def recover_and_judge(self) -> tuple[tuple[str, str], tuple[int, ...], Recovery | None]:
        image = self.image
        image.reads = set()
        want = self.expected()
        rec, outcome = self.run(want)
        self.records_read = [n for n in self.protocol.record_regions() if n in image.reads]
        regions = tuple(sorted({self.index[n] for n in image.reads} | self.always))
        image.reads = None
        return outcome, regions, rec

    def expected(self) -> Expected:
        """The guarantee for the current image at the current state's tick."""
        tick = self.tick if self.bounds is not None else 0
        return expected_for(self.protocol.system_kind, self.image, self.bounds, tick)

    def run(self, want: Expected, media: bool = False):
        """Recover the current image; (recovery or None, (verdict, why))."""
        try:
            rec = self.protocol.plan(self.image)
        except CorruptImage as exc:
            return None, (DETECTED if media else VIOLATION, str(exc))
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            return None, (VIOLATION, f"recovery failed: {type(exc).__name__}: {exc}")
        table, acc = self.protocol.table_after(self.explorer.words, rec)
        return rec, verdict(self.reference, rec, want, table, acc, self.mlp_equal)

    def mlp_equal(self, rec: Recovery, batch: int) -> bool:
        """MLP comparison memoized by the generation of the region the MLPs are in."""
        where = (self._where(rec.mlp), self._where(rec.mlp_acc))
        if None in where:  # not a view of the image: compare directly
            return mlp_matches(self.reference, rec, batch)
        key = (batch, *where)
        if key not in self.mlp_memo:
            self.mlp_memo[key] = mlp_matches(self.reference, rec, batch)
        return self.mlp_memo[key]

    def _where(self, array: np.ndarray | None):
        if array is None:
            return ()
        base = self.explorer.words.__array_interface__["data"][0]
        offset = array.__array_interface__["data"][0] - base
        if not 0 <= offset < self.explorer.words.nbytes:
            return None
        region = int(np.searchsorted(self.starts, offset, side="right") - 1)
        return (region, offset, int(self.explorer.overlay.gen[region]))

    def record(self, state: CrashState, outcome: tuple[str, str], kind: str | None = None):
        count = state.count if kind is None else 1
        kind = kind or self.family or state.mode
        report = self.report
        report.states += count
        report.modes[kind] += count
        report.verdicts[outcome[0]] += count
        for label in self.protocol.cross_device(self.explorer.words):
            report.cross_device[label] += count
        if outcome[0] == VIOLATION:
            report.violations.append(self.describe(state, kind, outcome[1]))

    def describe(self, state: CrashState, kind: str, why: str) -> dict:
        j = self.explorer.journal
        pieces = []
        if state.durable is not None:
            pieces = np.concatenate([state.durable, state.torn]).astype(np.int64)
        regions = sorted({self.names[r] for r in j.region[pieces]}) if len(pieces) else []
        return {"tick": state.tick, "mode": kind, "regions": regions, "why": why}

    # ----- failures during recovery and media faults -------------------------------------
    def explore_recovery(self, rec: Recovery, state: CrashState, regions: tuple) -> None:
        epochs = [e for e in rec.epochs if any(group.count for group in e)]
        want = self.expected()
        if epochs and self._due("interrupted", state.tick):
            self.interrupt(epochs, want, state)
        if self.records_read and self._due("media", state.tick):
            self.flip(self.records_read, want, state)
        if self._due("metadata", state.tick):
            self.flip_metadata(self.records_read, want, state)

    def _due(self, family: str, tick: int) -> bool:
        """Whether a state at ``tick`` takes the next draw of ``family`` (draws not
        taken when due wait for the next distinct recovery)."""
        due = self.due[family]
        if not due or tick < due[0]:
            return False
        due.pop(0)
        return True

    def interrupt(self, epochs: list[list[Writes]], want: Expected, state: CrashState) -> None:
        """A failure inside recovery epoch k: epochs before k durable, any subset of k's
        writes (each torn to any subset of its words), then a fresh recovery."""
        overlay = self.explorer.overlay
        depth = overlay.depth
        k = int(self.rng.integers(len(epochs)))
        for epoch in epochs[:k]:
            overlay.push(*all_words(epoch))
        dst, values, write = self._epoch_words(epochs[k])
        durable = self.rng.random(int(write.max()) + 1) < 0.5
        torn = self.rng.random(durable.size) < self.settings.explore.tear
        keep = durable[write] & (~torn[write] | (self.rng.random(dst.size) < 0.5))
        overlay.push(dst[keep], values[keep])
        _, outcome = self.run(want)
        overlay.unwind(depth)
        self.report.interrupted += 1
        self.record(state, outcome, "interrupted")

    @staticmethod
    def _epoch_words(epoch: list[Writes]):
        dsts, values, writes, offset = [], [], [], 0
        for group in epoch:
            if not group.count:
                continue
            d, v = group.words()
            dsts.append(d)
            values.append(v)
            writes.append(offset + np.repeat(np.arange(group.count), group.size // WORD))
            offset += group.count
        return np.concatenate(dsts), np.concatenate(values), np.concatenate(writes)

    def flip(self, read: list[str], want: Expected, state: CrashState) -> None:
        """Bit rot in one record the recovery read (its header fields or payload)."""
        image = self.image
        region = read[int(self.rng.integers(len(read)))]
        start, lay = self.layout.offset(region), self.protocol.layout_of(region)
        if region.rsplit(".", 1)[-1].startswith("emb"):
            count = int(image.buf[start + 8 : start + 16].view("<i8")[0])
            size = max(min(count, lay.max_rows), 0) * lay.entry_bytes
        else:
            size = lay.mlp_bytes
        spots = 20 + size  # batch, count and CRC, then the payload
        at = int(self.rng.integers(spots))
        byte = start + (at if at < 20 else RECORD_HEADER + at - 20)
        bit = (byte % WORD) * 8 + int(self.rng.integers(8))
        outcome = self._flipped(byte // WORD, bit, want)
        self.report.media += 1
        if outcome[0] == DETECTED:
            self.report.media_detected += 1
        self.record(state, outcome, "media")

    def flip_metadata(self, read: list[str], want: Expected, state: CrashState) -> None:
        """Bit rot aimed at what recovery decides by: every header field (batch, count,
        CRC) of the records it read and of the base record, and every flag word, each
        flipped at one random bit; a batch field also at each of its 4 low bits (a batch
        moved by a few, the damage no range check sees)."""
        lay = self.layout
        flips = [(word, int(self.rng.integers(64))) for word in self.protocol.metadata_words()]
        for region in dict.fromkeys([*read, *self.protocol.base_regions()]):
            start = lay.offset(region)
            flips += [(start, bit) for bit in (0, 1, 2, 3, int(self.rng.integers(4, 64)))]
            flips += [
                (start + 8, int(self.rng.integers(64))),
                (start + 16, int(self.rng.integers(32))),
            ]
        for offset, bit in flips:
            outcome = self._flipped(offset // WORD, bit, want)
            self.report.metadata += 1
            if outcome[0] == DETECTED:
                self.report.metadata_detected += 1
            self.record(state, outcome, "metadata")

    def _flipped(self, word: int, bit: int, want: Expected) -> tuple[str, str]:
        """The verdict on recovering the current image with one bit of ``word`` flipped."""
        overlay = self.explorer.overlay
        depth = overlay.depth
        mask = np.uint64(1) << np.uint64(bit)
        overlay.push(np.array([word]), np.array([self.explorer.words[word] ^ mask]))
        _, outcome = self.run(want, media=True)
        overlay.unwind(depth)
        return outcome


def crashcheck(
    options: RunOptions,
    settings: CheckSettings | None = None,
    protocol_class: type[Protocol] | None = None,
    optimizer: str = "sgd",
    stretch: Stretch | None = None,
) -> CrashReport:
    """Check recovery at every crash state the settings select (one recorded run), in
    the other orders of its concurrent ops, and in the runs resumed after recoveries.
    A software checkpoint policy (--checkpoint) is checked at its crash points instead
    (simulate/ft_crashcheck.py; ``protocol_class``: a mutant of its recovery or policy)."""
    if options.checkpoint != "paper":
        from simulate.ft_crashcheck import crashcheck_software  # it builds on this module

        resumed = (settings or CheckSettings()).resumed
        return crashcheck_software(options, resumed, protocol_class)
    settings = settings or CheckSettings(explore=ExploreSettings(seed=options.seed))
    stretch = stretch or run_stretch(options, lr=DEFAULT_LR, optimizer=optimizer)
    start = stretch.initial_state()
    base = initial_image(options, optimizer=optimizer, state=start, layout=stretch.layout)
    make = protocol_class or functools.partial(protocol_for, options.system)
    protocol = make(base.layout)
    journal = build_journal(protocol, stretch)
    reference = reference_from(start)
    reference.extend(stretch.facts)
    reference.cache_all(options.batches)
    bounds = guarantee_for(protocol.system_kind, stretch)
    report = CrashReport(
        pieces=len(journal),
        unmatched_bytes=journal.unmatched_bytes,
        unhonoured_fences=list(journal.unhonoured_fences),
        guarantee=bounds.describe(),
    )
    started = time.perf_counter()
    if settings.schedules:  # first: each variant walks a copy of the pristine image
        quiet = CheckSettings(interrupted=0, media=0, metadata=0, resumed=0, schedules=False)
        records = stretch.records
        variants = chain(reordered_schedules(journal, records), delayed_commits(journal, records))
        for variant in variants:
            if variant is None:
                report.schedules_skipped += 1
                continue
            report.schedules += 1
            walk = replace(settings.explore, window=variant.window, prefix=settings.schedule_prefix)
            other = CrashExplorer(variant.journal, base.words, walk)
            held = bounds
            if variant.ends is not None:  # a delayed commit: its bound moves with it
                moved = {variant.first.uid: variant.ends}
                held = guarantee_for(protocol.system_kind, stretch, moved=moved)
            _walk(Checker(other, protocol, reference, report, quiet, held, "schedule"))
            del other
    explorer = CrashExplorer(journal, base.words, settings.explore, copy=False)
    estimate = _estimate(journal, settings.explore)

    def resume(words: np.ndarray) -> None:
        _resumed(options, make, optimizer, start, stretch, words, bounds, report, settings)

    checker = Checker(explorer, protocol, reference, report, settings, bounds, resume=resume)
    progress = tqdm(
        total=estimate,
        desc=f"crash states {options.system}",
        unit="state",
        file=sys.stderr,
        disable=None if options.progress else True,
        leave=False,
    )
    for state in explorer.walk(checker.watch):
        before = report.states
        checker.check(state)
        progress.update(report.states - before)
    progress.close()
    sampled = [i.pair_coverage for i in explorer.intervals if not i.exhaustive]
    report.intervals = len(explorer.intervals)
    report.exhaustive_intervals = sum(i.exhaustive for i in explorer.intervals)
    if sampled:
        report.pair_coverage = (float(np.mean(sampled)), float(np.min(sampled)))
    report.seconds = time.perf_counter() - started
    return report


def _walk(checker: Checker) -> None:
    for state in checker.explorer.walk(checker.watch):
        checker.check(state)


def _resumed(options, make, optimizer, start, stretch, words, bounds, report, settings) -> None:
    """Recover a crash image, resume training from it (a fresh recorded stretch whose
    writes land on the recovered image) and check the crash states of that stretch: a
    recovery that leaves the image subtly wrong (stale flags, a base record it did not
    finish) is caught by the failure after it."""
    first = make(stretch.layout)
    image = first.image_over(words.view(np.uint8))
    try:
        rec = first.recover(image)
    except CorruptImage:
        return  # already a violation of the walk
    if rec.batch >= options.batches:
        return
    state = ModelState(rec.table, rec.mlp, rec.row_acc, rec.mlp_acc)
    ahead = replace(options, batches=min(options.batches, rec.batch + settings.resumed_batches))
    resumed = run_stretch(ahead, rec.batch, state, DEFAULT_LR, optimizer)
    history = reference_from(start)
    history.extend(stretch.facts)
    history.extend(resumed.facts)
    history.cache_all(ahead.batches)
    protocol = make(image.layout)
    journal = build_journal(protocol, resumed)
    age = rec.batch - rec.mlp_batch
    held = bounds.snapshots or ()
    again = guarantee_for(protocol.system_kind, resumed, rec.batch, held, age)
    walk = ExploreSettings(prefix=settings.resumed_prefix, budget=4, seed=settings.explore.seed)
    explorer = CrashExplorer(journal, image.words, walk, copy=False)
    sub = CheckSettings(walk, interrupted=20, media=0, metadata=0, resumed=0, schedules=False)
    _walk(Checker(explorer, protocol, history, report, sub, again, "resumed"))
    report.resumed_runs += 1


def _estimate(journal, explore: ExploreSettings) -> int:
    """Roughly how many states the walk will visit (for the progress bar and rates)."""
    prefix = np.unique(journal.p).size
    if explore.prefix >= 0:
        prefix = min(prefix, explore.prefix)
    intervals = np.unique(np.concatenate([journal.lo, journal.hi])).size if explore.budget else 0
    return prefix + 1 + intervals * explore.budget
