"""Crash points of a software checkpoint policy (--checkpoint), each recovered and judged.

A policy's checkpoint is durable at one instant (its store write's end, the commit
record last), so its crash states are instants, not persist orders: around every
checkpoint op of one recorded run (CPR's paused checkpoint; Check-N-Run's snapshot into
host DRAM and its background write) just before it, at its start, a quarter, half and
three quarters in, one tick before its end, at its end and after, and in the middle of
every batch's update; each is recovered from the store as it survived
(components/persistence/checkpoints.py) and judged by simulate/ft_oracle.py. Then
``resumed`` of those crashes are resumed (a fresh recorded stretch whose checkpoints
join the surviving store, its first a new full one) and crashed again at the same
points: a write torn before the failure must stay unused, a torn new full must fall
back to the chain before it. Recovery only reads the store, so a failure during it
leaves the store as it was: its states are the ones above.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from components.boards.software_ft import SoftwareCheckpoint
from components.persistence.checkpoints import ChainRecovery, CheckpointStore
from simulate.configure import fresh_board
from simulate.ft_failures import Crash, bits_of, stored_of
from simulate.ft_oracle import StretchHistory, promised_of
from simulate.options import RunOptions
from simulate.oracle import VIOLATION
from simulate.recording import ModelState, Stretch, run_stretch

SHARES = (0.25, 0.5, 0.75)


def crash_ticks(stretch: Stretch) -> list[int]:
    """Local ticks around each checkpoint op and inside each batch's update."""
    ticks = set()
    for r in stretch.records:
        if r.category == "checkpoint":
            span = r.end - r.start
            ticks.update((r.start - 1, r.start, r.end - 1, r.end, r.end + 1))
            ticks.update(r.start + int(span * f) for f in SHARES)
        elif r.name == "update":
            ticks.add((r.start + r.end) // 2)
    return sorted(t for t in ticks if 0 <= t <= stretch.end_tick)


def with_policy(options: RunOptions, policy: type[SoftwareCheckpoint]) -> RunOptions:
    """The options with a board whose policy is ``policy`` (a subclass of the one
    --checkpoint names: configure.software_policy keeps it)."""
    board = fresh_board(replace(options, board=None))
    board.ft = policy()
    return replace(options, board=board)


def crashcheck_software(options: RunOptions, resumed: int = 2, mutant=None):
    """A CrashReport of every crash point of one recorded run and of ``resumed``
    resumed ones. ``mutant``: a ChainRecovery or policy subclass to check instead."""
    from simulate.crashcheck import CrashReport  # it dispatches here

    codec = ChainRecovery()
    if isinstance(mutant, type) and issubclass(mutant, ChainRecovery):
        codec = mutant()
    elif mutant is not None:
        options = with_policy(options, mutant)
    started = time.perf_counter()
    stretch = run_stretch(options)
    bits, policy = bits_of(options), stretch.board.ft
    start = stretch.initial_state()
    initial = (start.table, start.mlp)
    history = StretchHistory(stretch)
    store = CheckpointStore(stored_of(stretch, 0, history, 0, codec, bits))
    promised = promised_of(stretch, 0, history)
    report = CrashReport(guarantee=describe(options, stretch))
    ticks = crash_ticks(stretch)
    due = set(np.linspace(len(ticks) / 4, len(ticks), resumed, endpoint=False).astype(int))
    for i, tick in enumerate(ticks):
        crash = Crash.at(stretch, history, 0, tick)
        got, resume, outcome = _check(crash, store, promised, codec, bits, policy, initial, report)
        if i in due and outcome != VIOLATION and resume < options.batches:
            ahead = replace(options, batches=min(options.batches, resume + 3))
            again = run_stretch(ahead, resume, ModelState(got.table, got.mlp))
            history2 = StretchHistory(again)
            offset = tick + 1
            left = store.at(tick)
            store2 = left.added(*stored_of(again, offset, history2, left.next_seq(), codec, bits))
            promised2 = [p.cut(tick) for p in promised] + promised_of(again, offset, history2)
            for t in crash_ticks(again):
                crash2 = Crash.at(again, history2, offset, offset + t)
                _check(crash2, store2, promised2, codec, bits, policy, initial, report, "resumed")
            report.resumed_runs += 1
    report.seconds = time.perf_counter() - started
    return report


def _check(crash, store, promised, codec, bits, policy, initial, report, mode="checkpoint"):
    """Recover one crash point, count it, and keep its violation."""
    view = store.at(crash.tick)
    cut = [p.cut(crash.tick) for p in promised]
    got, resume, (outcome, why, _) = crash.recover(view, cut, codec, bits, policy, initial)
    report.states += 1
    report.recoveries += 1
    report.modes[mode] += 1
    report.verdicts[outcome] += 1
    if outcome == VIOLATION:
        phase = ", ".join(sorted({f"{r.name}@{r.batch}" for r in crash.running}))
        report.violations.append({"tick": crash.tick, "mode": mode, "regions": [phase],
                                  "why": why})  # fmt: skip
    return got, resume, outcome


def describe(options: RunOptions, stretch: Stretch) -> dict:
    """The guarantee the oracle enforced, for the report."""
    return {
        "policy": options.checkpoint,
        "bits": bits_of(options),
        "checkpoints": len(stretch.board.ft.taken),
        "resume": "replay from the checkpoint" if stretch.board.ft.replays else "partial",
        "rows": "state at its batch" if stretch.board.ft.complete_rows else "as last saved",
    }
