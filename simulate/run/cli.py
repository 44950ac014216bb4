"""The one error path of every command-line entry point in configs/ and scripts/.

Bad input is one line, ``prog: error: ...`` naming the option and the value, and exit
status 2 (so is running out of memory: the options asked for more than the machine
has); Ctrl-C is one line and 130 (SIGTERM: 143); never a traceback. It lives in
simulate/ because it must know the input errors of components/ and workloads/ alike,
and configs/ and scripts/ may import simulate/, never the reverse.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable

from components import gem5
from components.persistence.image import CorruptImage
from components.sim.params import ConfigError
from components.sim.units import UnitError
from simulate.run.options import QuietParser, UsageError
from workloads.models import ModelSpecError, UnknownModelError
from workloads.traces import TraceError
from workloads.training import TrainingDiverged

__all__ = [
    "INPUT_ERRORS",
    "QuietParser",
    "UsageError",
    "arm_parent_death",
    "die_with_parent",
    "raise_received",
    "raising_on",
    "run_main",
]

INPUT_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    UnitError,
    UsageError,
    UnknownModelError,
    ModelSpecError,
    CorruptImage,
    json.JSONDecodeError,
    TrainingDiverged,
    TraceError,
)
"""What a user's input can raise: reported as one line, exit 2 (a run that diverges
counts: its options, e.g. a --set, made it unstable)."""

EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143
OVERFLOW = (
    "the run outgrew the simulator's 64-bit tick clock: --set values that together "
    "describe hardware far slower than any modelled (bandwidth x efficiency x lanes)"
)


OUT_OF_MEMORY = (
    "out of memory: the run needed more memory than this machine had free (a smaller "
    "batch, fewer rows or fewer batches need less)"
)


class Terminated(BaseException):
    """SIGTERM turned into an exception, so that cleanup (temp outputs) still runs."""


STOPS: dict[int, type[BaseException]] = {
    signal.SIGINT: KeyboardInterrupt,
    signal.SIGTERM: Terminated,
}
_received: list[type[BaseException]] = []


RETRY_SECONDS = 0.01
"""How soon a stop held back inside numba's code is tried again."""


def _raise_stop(signum, frame) -> None:
    _received.append(STOPS[signum])
    _raise_held(signal.SIGALRM, frame)


def _raise_held(signum, frame) -> None:
    """Raise the stop received, unless numba's own code runs: then try again shortly."""
    if not _received:
        return
    if _within_numba(frame):
        signal.signal(signal.SIGALRM, _raise_held)
        signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
        return
    raise _received[-1]


def _within_numba(frame) -> bool:
    """Whether the main thread is in numba's own Python code (compiling, loading from
    its cache, boxing a compiled function's results). An exception raised there leaves
    a half-built function or a result tuple with a missing item, and the next use
    crashes the process, so the stop waits until that code has returned."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name == "numba" or name.startswith("numba.")


def raise_received() -> None:
    """Raise again the stop signal received inside ``raising_on``, if any.

    Python runs a signal handler wherever the main thread is, finalizers included, and
    drops an exception raised in a finalizer (a ``__del__`` or a generator's
    ``finally`` run by the garbage collector) with an "Exception ignored" message. So
    the loops that take long (a run's batches, a sweep's runs) call this between steps,
    and entry points call it once their work returns.
    """
    if _received:
        if signal.getsignal(signal.SIGALRM) is _raise_held:  # raised here, not again
            signal.setitimer(signal.ITIMER_REAL, 0)
        raise _received[0]


@contextlib.contextmanager
def raising_on(*signums: int):
    """Within the block each of ``signums`` (SIGINT, SIGTERM) raises its exception, so
    that cleanup runs, and is remembered for ``raise_received`` until the block ends;
    one that a finalizer drops prints nothing (the entry point prints the one line)."""
    _received.clear()
    previous = {signum: _install(signum, _raise_stop) for signum in signums}
    retry = signal.getsignal(signal.SIGALRM)
    previous_hook = sys.unraisablehook

    def quiet_about_stops(unraisable) -> None:
        remembered = _received and isinstance(unraisable.exc_value, tuple(STOPS.values()))
        if not remembered:
            previous_hook(unraisable)

    sys.unraisablehook = quiet_about_stops
    try:
        yield
    finally:
        _received.clear()
        if signal.getsignal(signal.SIGALRM) is _raise_held:  # a stop was held back
            signal.setitimer(signal.ITIMER_REAL, 0)
            _install(signal.SIGALRM, retry)
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            _install(signum, handler)


def error_line(prog: str, message: object) -> str:
    """``prog: error: message`` on one line (a multi-line message is joined)."""
    text = " ".join(str(message).split("\n")).strip() or type(message).__name__
    return f"{prog}: error: {text}"


def os_error_text(exc: OSError) -> str:
    """'No space left on device: out/stats.txt' rather than errno tuples."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    name = exc.filename if exc.filename is not None else ""
    return f"{reason}: {name}" if name != "" else reason


def run_main(prog: str, main: Callable[[], int]) -> int:
    """Run an entry point's body; map bad input, OS errors and interrupts to one line.

    Cleanup inside ``main`` (``finally`` blocks, e.g. removing a staging outdir) runs
    before the line is printed, so an interrupted run leaves no partial outputs.
    """
    # Ctrl-C raises KeyboardInterrupt, so cleanup runs (simulate.run.startup set it to exit
    # at once while importing); under gem5.opt, gem5's own handler stays
    signums = (signal.SIGTERM,) if gem5.available() else (signal.SIGTERM, signal.SIGINT)
    with raising_on(*signums):
        try:
            status = main()
            raise_received()
            return status
        except INPUT_ERRORS as exc:
            return _fail(prog, exc, EXIT_USAGE)
        except OSError as exc:
            return _fail(prog, os_error_text(exc), EXIT_USAGE)
        except OverflowError as exc:  # each parameter is bounded; their product may not be
            return _fail(prog, f"{OVERFLOW}: {exc}", EXIT_USAGE)
        except MemoryError:  # the preflight estimate is a bound on what it knows, not all
            return _fail(prog, OUT_OF_MEMORY, EXIT_USAGE)
        except KeyboardInterrupt:
            return _stop(prog, "interrupted", EXIT_INTERRUPTED)
        except Terminated:
            return _stop(prog, "terminated", EXIT_TERMINATED)
        except SystemError as exc:  # a stop raised inside a compiled kernel's call
            stop = _stop_within(exc)
            if stop is None:
                raise
            if isinstance(stop, KeyboardInterrupt):
                return _stop(prog, "interrupted", EXIT_INTERRUPTED)
            return _stop(prog, "terminated", EXIT_TERMINATED)


def _stop_within(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or Terminated a signal raised while numba's dispatcher ran
    (it reports the pending exception as a SystemError chained to it), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt | Terminated):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _fail(prog: str, message: object, status: int) -> int:
    _fresh_line()
    print(error_line(prog, message), file=sys.stderr)
    return status


def _stop(prog: str, what: str, status: int) -> int:
    _fresh_line()
    print(f"{prog}: {what}", file=sys.stderr)
    return status


def _fresh_line() -> None:
    """A progress bar may have left the cursor mid-line on a terminal."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")


def _install(signum: int, handler):
    """Set a signal handler where that is possible (the main thread only)."""
    try:
        return signal.signal(signum, handler)
    except (ValueError, TypeError):
        return handler


_PR_SET_PDEATHSIG = 1


def arm_parent_death(parent: int) -> bool:
    """Have this process get SIGKILL when ``parent`` dies, even by SIGKILL; exit now if
    it already has. False where there is no parent-death signal (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    return armed


def die_with_parent() -> Callable[[], None]:
    """A preexec_fn for subprocess: the child gets SIGKILL when this process dies, even
    by SIGKILL, so no gem5 run or worker outlives the command that started it."""
    parent = os.getpid()
    return lambda: arm_parent_death(parent)


def add_names_option(
    parser, flag: str, default: list[str], help: str, choices: tuple[str, ...] | None = None
) -> None:
    """A list option every script spells the same way: space- or comma-separated
    (``--models rm1 rm3`` and ``--models rm1,rm3`` alike); ``names`` flattens it."""
    shown = f" (one of {', '.join(choices)})" if choices else ""
    parser.add_argument(
        flag,
        nargs="+",
        default=list(default),
        metavar="NAME",
        help=f"{help}{shown}, space- or comma-separated (default {','.join(default)})",
    )


def names(values: list[str], flag: str, choices: tuple[str, ...] | None = None) -> list[str]:
    """The names of a list option, commas split, each checked against ``choices``."""
    found = [name.strip() for value in values for name in value.split(",") if name.strip()]
    if not found:
        raise UsageError(f"{flag} names no {flag.lstrip('-').removesuffix('s')}")
    for name in found:
        if choices and name not in choices:
            raise UsageError(f"{flag} {name!r}: one of {', '.join(choices)}")
    return list(dict.fromkeys(found))
