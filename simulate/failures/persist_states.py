"""The crash states a persist journal allows, each recovered by a hardware protocol and
judged by the oracle (failures/hardware.py explores with it).

The journal (components/persistence/journal.py) is walked by the explorer
(components/persistence/explorer.py): the timing's own persist order (prefix walk),
then, in every crash interval, reorderings and torn subsets of the writes in flight. A
recovery's verdict is reused while the bytes of every region it read are unchanged
(generations), so states that differ only where recovery does not look cost a
dictionary lookup. More families are drawn from the states visited: failures DURING
recovery (the recovery's earlier epochs durable, a torn subset of one epoch, then a
fresh recovery that must reach the same state), media faults (one flipped bit in a
record the recovery read, or in metadata: a record header field, a flag, the base
record's header: it must be refused as corrupt or not matter), and, at the recoveries
drawn for it, training resumed from the recovered image (``resume``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from components.persistence.explorer import CrashExplorer, CrashState, ExploreSettings
from components.persistence.image import RECORD_HEADER, WORD, CorruptImage
from components.persistence.protocols import Protocol, Recovery
from components.persistence.writes import Writes, all_words
from simulate.failures.crash_report import CheckSettings, CrashReport
from simulate.failures.oracle import (
    DETECTED,
    VIOLATION,
    Expected,
    Guarantee,
    Reference,
    expected_for,
    mlp_matches,
    verdict,
)

LOW_BITS = 8
"""Low bits of a flag, commit or count word flipped at every metadata draw."""


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
        self.metadata_draws = 0

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
        for label in self.protocol.cross_device(self.explorer.words):
            self.report.cross_device[label] += count
        self.report.count(kind, outcome, count, state.tick, lambda: self.regions(state))

    def regions(self, state: CrashState) -> list[str]:
        """The regions a state's durable and torn pieces write."""
        j = self.explorer.journal
        if state.durable is None:
            return []
        pieces = np.concatenate([state.durable, state.torn]).astype(np.int64)
        return sorted({self.names[r] for r in j.region[pieces]}) if len(pieces) else []

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
        """Bit rot aimed at what recovery decides by: every flag and commit word and the
        entry count of every record it read (and of the base record), each at its
        ``LOW_BITS`` low bits (a value moved by a few, which no range check sees) and a
        share of the others that changes from draw to draw, so that the draws together
        flip every bit a decoder could read (a decoder that skips or weakens the word's
        check, or trusts a count, is shown the value it would believe); the batch field
        at each of its 4 low bits and one more, the CRC at one random bit."""
        lay = self.layout
        bits = sorted({*range(LOW_BITS), *self._sweep_bits()})
        flips = [(word, bit) for word in self.protocol.metadata_words() for bit in bits]
        for region in dict.fromkeys([*read, *self.protocol.base_regions()]):
            start = lay.offset(region)
            flips += [(start, bit) for bit in (0, 1, 2, 3, int(self.rng.integers(4, 64)))]
            flips += [(start + 8, bit) for bit in bits]
            flips.append((start + 16, int(self.rng.integers(32))))
        for offset, bit in flips:
            outcome = self._flipped(offset // WORD, bit, want)
            self.report.metadata += 1
            if outcome[0] == DETECTED:
                self.report.metadata_detected += 1
            self.record(state, outcome, "metadata")

    def _sweep_bits(self) -> list[int]:
        draw = self.metadata_draws
        self.metadata_draws += 1
        return sweep_bits(draw, self.settings.metadata)

    def _flipped(self, word: int, bit: int, want: Expected) -> tuple[str, str]:
        """The verdict on recovering the current image with one bit of ``word`` flipped."""
        overlay = self.explorer.overlay
        depth = overlay.depth
        mask = np.uint64(1) << np.uint64(bit)
        overlay.push(np.array([word]), np.array([self.explorer.words[word] ^ mask]))
        _, outcome = self.run(want, media=True)
        overlay.unwind(depth)
        return outcome


def sweep_bits(draw: int, draws: int) -> list[int]:
    """The bits of a metadata word draw ``draw`` of ``draws`` flips: bits i, i + D,
    i + 2D, ... (i = draw mod D), so that every D draws cover all 64."""
    draws = max(draws, 1)
    return list(range(draw % draws, 64, draws)) if draws <= 64 else [draw % draws % 64]


def walk(checker: Checker) -> None:
    for state in checker.explorer.walk(checker.watch):
        checker.check(state)


def estimate_states(journal, explore: ExploreSettings) -> int:
    """Roughly how many states the walk will visit (for the progress bar and rates)."""
    prefix = np.unique(journal.p).size
    if explore.prefix >= 0:
        prefix = min(prefix, explore.prefix)
    intervals = np.unique(np.concatenate([journal.lo, journal.hi])).size if explore.budget else 0
    return prefix + 1 + intervals * explore.budget
