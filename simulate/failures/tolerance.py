"""The one interface a failure-tolerance scheme offers the failure machinery.

A scheme says three things: what a crash keeps (the durable state a recorded stretch
leaves at any tick), how recovery runs and what it costs (timed on the device model,
started over when the power fails again during it), and what it guarantees (the oracle's
verdict on what recovery produced). A hardware persistence protocol
(failures/hardware.py: PMEM logs and commit flags) and a software checkpoint policy
(failures/software.py: a checkpoint store) implement it; failure injection
(failures/inject.py) and crash exploration (failures/crashcheck.py) are written once
against it, and failures/schemes.py picks the implementation a run's options name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulate.failures.crash_report import CheckSettings, CrashReport
from simulate.failures.recording import ModelState, Stretch
from simulate.run.options import RunOptions


@dataclass
class Failure:
    """One injected failure as a scheme handled it: results.json's ``entry`` and where
    training goes on (``batch`` from ``state`` at global tick ``resumes_at``).
    ``state`` None: training cannot go on (the image was refused as corrupt); ``halt``:
    the power stays off (the durable state is left for a later process)."""

    entry: dict[str, Any]
    batch: int = 0
    state: ModelState | None = None
    resumes_at: int = 0
    halt: bool = False


@dataclass
class Resumption:
    """Training resumed after one recovery of a crash check: from ``batch`` with
    ``state``; ``explore`` walks the crash states of the stretch recorded from there
    (the scheme's durable state as that recovery left it) into a report."""

    batch: int
    state: ModelState
    explore: Callable[[Stretch, CrashReport], None]


class FailureTolerance(ABC):
    """A failure-tolerance scheme over one run's options; ``recorded``: the run's
    failure-free recorded stretch (the reference every recovery is judged against);
    ``variant``: a class that replaces one part of the scheme (a mutant a check must
    catch)."""

    def __init__(
        self, options: RunOptions, recorded: Stretch, lr: float, optimizer: str, variant=None
    ) -> None:
        self.options = options
        self.recorded = recorded
        self.lr = lr
        self.optimizer = optimizer

    @staticmethod
    def prepare(options: RunOptions, variant=None) -> RunOptions:
        """The options the run is recorded with when ``variant`` replaces a part."""
        return options

    # ----- injection ----------------------------------------------------------------------
    @abstractmethod
    def extend(self, stretch: Stretch, offset: int, until: int | None) -> None:
        """Take in what ``stretch`` (begun at global tick ``offset``) makes durable, up to
        the next failure at ``until`` (None: none left)."""

    @abstractmethod
    def settle(self) -> None:
        """No failure left in the current stretch: all it writes becomes durable."""

    @abstractmethod
    def fail(self, tick: int, pending: list[int]) -> Failure:
        """The power fails at global ``tick`` in the current stretch: cut what is
        durable, recover (timed on the device model; a failure of ``pending`` landing
        during recovery is taken from it and starts recovery over), judge."""

    @abstractmethod
    def final_fields(self, final: Stretch | None) -> dict[str, Any]:
        """What every failure entry says of the model the run ended with (``final``:
        the last stretch; None when training could not go on)."""

    @abstractmethod
    def close(self) -> None:
        """The run is over: leave the durable state as it ends (a file kept)."""

    # ----- crash exploration --------------------------------------------------------------
    @abstractmethod
    def guarantee(self) -> dict[str, Any]:
        """What the oracle enforces on the recorded stretch, for the report."""

    @abstractmethod
    def explore(
        self,
        settings: CheckSettings,
        report: CrashReport,
        resume: Callable[[Resumption], None],
    ) -> None:
        """Walk the crash states the scheme's durability allows in the recorded stretch,
        recover and judge each into ``report``; call ``resume`` at the recoveries the
        settings draw for resumed training."""
