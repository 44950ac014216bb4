"""The next batch's inputs and demand, made on a second thread while the engine runs.

Drawing a batch and finding its distinct rows (power-law draws, a sort, a merge with
the previous batch's rows: ~3.5 ms of an RM1 CXL batch's ~12) depend only on the seed
and the batch number, and nearly all of it runs in numpy and numba without the GIL. A
worker thread makes batch N+1 while the main thread simulates batch N, as a training
framework's data loader would, so a run's wall time loses that share. The results are
the same bits: what is made, and the order it is handed over in, do not change.
Where the process may use one CPU only (a one-core SLURM allocation), or a local
sweep's runs already use every CPU, the thread could only take turns with them, so the
batches are made in line instead.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


_sharing = 1  # runs that share this machine's CPUs (a local sweep's worker processes)

WORKER_SWITCH_INTERVAL = 20e-6
"""Seconds a thread waits for the GIL before it asks the holder to hand it over, while
a worker runs (CPython's default is 5 ms). The engine's thread holds the GIL but for
short compiled calls; the worker needs it only between its long ones, and waited
~2 ms per RM1 CXL batch for it (5.4-5.9 ms to make a batch of 3.5-3.9 ms of CPU),
since each short release by the engine woke it too late to take the GIL and started
its wait over. At 20 us it waits less and has time to digest the next batch's
streams (foresight): RM1 CXL runs take 0.93x the wall time (20 alternating pairs of
300 batches; 50 us 0.97x, 5 us 0.97x; against the previous head 0.96x and 0.98x), for
up to ~4% more CPU; the systems without foresight are unchanged within the noise."""
_switching = [0, 0.0]  # workers running, and the interval before the first started


def share_cpus(runs: int) -> None:
    """This process is one of ``runs`` running at once on the usable CPUs (a local
    sweep's pool): each gets its worker thread only if two CPUs are left per run, since
    otherwise the thread only takes turns with the other runs, and a run with it costs
    more CPU (RM1 CXL: 15.1 against 13.1 ms per batch, the GIL's handovers)."""
    global _sharing
    _sharing = max(runs, 1)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def made_ahead(
    items: Iterator[T],
    threaded: bool | None = None,
    foresight: Callable[[T], Iterable[Callable[[], object]]] | None = None,
) -> Iterator[T]:
    """``items`` in order, the next made on a worker thread while the caller uses this
    one (``threaded`` None: where two CPUs per run are usable). ``foresight``: per item,
    pieces of work that save the caller time later (digests of the batch's streams),
    done by the worker only while it waits for the caller to take an item, so the
    caller never waits for them (in line nothing waits: they are left out). An
    exception in the worker is raised here, at the item it stopped at; closing this
    iterator stops it."""
    if threaded is None:
        threaded = usable_cpus() >= 2 * _sharing
    if not threaded:
        yield from items
        return
    ahead = _Worker(items, foresight)
    try:
        yield from ahead
    finally:
        ahead.stop()


class _Worker:
    """One item made ahead: the queue holds at most one, so memory stays bounded. While
    the queue is full the worker does the foresight of the items not yet taken, oldest
    first: the caller, slower then, finds it done; a caller that is faster takes each
    item as soon as it is made and the worker foresees nothing."""

    _END = object()

    def __init__(self, items: Iterator, foresight: Callable | None = None) -> None:
        self._items = items
        self._foresight = foresight
        # per item made and not yet taken, oldest first: its foresight not yet done
        self._untaken: deque[deque] = deque()
        self._ready: queue.Queue = queue.Queue(maxsize=1)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        self._thread.start()
        _switch_faster()

    def _run(self) -> None:
        try:
            for item in self._items:
                pieces = self._foresight(item) if self._foresight is not None else ()
                self._untaken.append(deque(pieces))
                if not self._put((item, None)):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            self._untaken.clear()
            self._put((self._END, error))
            return
        self._put((self._END, None))

    def _put(self, entry: tuple) -> bool:
        """Wait for room, doing foresight meanwhile; False once the consumer has
        stopped. Room means the item before this one was taken: its foresight is
        dropped (the caller may be doing that work now)."""
        while not self._stopped.is_set():
            try:
                self._ready.put_nowait(entry)
            except queue.Full:
                pending = next((pieces for pieces in self._untaken if pieces), None)
                if pending is not None:
                    pending.popleft()()
                    continue
                try:
                    self._ready.put(entry, timeout=0.1)
                except queue.Full:
                    continue
            while len(self._untaken) > 1:
                self._untaken.popleft()
            return True
        return False

    def __iter__(self) -> Iterator:
        while True:
            item, error = self._ready.get()
            if error is not None:
                raise error
            if item is self._END:
                return
            yield item

    def stop(self) -> None:
        """Stop the worker and wait for it; a Ctrl-C during the wait leaves it to end by
        itself after the item it is making (a daemon thread)."""
        self._stopped.set()
        try:
            self._thread.join()
        finally:
            _switch_back()


def _switch_faster() -> None:
    """WORKER_SWITCH_INTERVAL while any worker runs."""
    if not _switching[0]:
        _switching[1] = sys.getswitchinterval()
        sys.setswitchinterval(WORKER_SWITCH_INTERVAL)
    _switching[0] += 1


def _switch_back() -> None:
    """The interval before the first worker started, once the last has stopped."""
    _switching[0] -= 1
    if not _switching[0]:
        sys.setswitchinterval(_switching[1])
