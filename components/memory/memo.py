"""A device's digests of read-only address arrays, made once, by whichever thread first.

Two things make a stream's digest (components/memory/digest.py) worth keeping:
- a batch's log copy and its update read the same rows through one read-only address
  array (TrainingBoard.unique_addresses), and every read starts with cold buffers, so
  the second read's counts are the first's;
- a digest depends on the addresses and the device's geometry only, so the thread that
  makes the next batch (simulate/run/prefetch.py) can digest that batch's streams ahead of
  the engine's thread (MemoryDevice.foresee_read, foresee_write), which then finds
  them done.

Entries are keyed by the array object, held with it (so its id cannot be reused while
kept), and by the kind and key of the digest. A digest being made by one thread is
waited for by the other, never made twice at once; one whose making failed is made
again by the thread that asks for it, so a failure is raised where the engine would
raise it. Writable arrays are never kept (they may change).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class _Entry:
    """One digest, made by the thread that claimed it; ``value`` None until made."""

    __slots__ = ("addr", "made", "value")

    def __init__(self, addr) -> None:
        self.addr = addr
        self.made = threading.Event()
        self.value: Any = None


class DigestMemo:
    """Digests of a device's read-only address arrays (see the module's docstring)."""

    __slots__ = ("_entries", "_lock")

    # per batch its lookup's, its rows' and its log entries' spans and read counts (5),
    # and its two write plans until taken, for six batches, as the board's
    # AddressCache: the one whose update runs, the one whose lookup and log copy run,
    # and those the batch maker has made and foresees meanwhile, more under load. Each
    # entry keeps its address array alive (RM1: up to 1.6 MB), as that cache does
    DEPTH = 36

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple, _Entry] = {}

    def __reduce__(self):
        """A copy (a board copied to explore crashes, a pickled run) starts empty: the
        digests are derived from the arrays, whose copies are other objects anyway."""
        return (type(self), ())

    def get(self, kind: str, addr, key: tuple, make: Callable[[], Any], keep: bool = True):
        """The digest ``make()`` of ``addr``: from the memo where it is held or being
        made; else made here, and kept where ``keep`` (a digest used once, as a write
        plan, is left out: keeping it would only evict others)."""
        if addr.flags.writeable:
            return make()
        entry, mine = self._claim((id(addr), kind, key), addr, keep)
        if mine:
            return self._make(entry, make)
        entry.made.wait()
        return make() if entry.value is None else entry.value

    def foresee(self, kind: str, addr, key: tuple, make: Callable[[], Any]) -> None:
        """Make and keep the digest of read-only ``addr`` now, unless held or being made;
        an error is left for the thread that asks for it, which makes it again."""
        if addr.flags.writeable:
            return
        entry, mine = self._claim((id(addr), kind, key), addr, True)
        if mine:
            try:
                self._make(entry, make)
            except Exception:  # noqa: BLE001 - raised again where the digest is used
                return

    def _claim(self, ident: tuple, addr, keep: bool) -> tuple[_Entry, bool]:
        """The entry of ``ident`` and whether this thread is to make it; an entry found
        is taken out where not ``keep``, an entry made here is held only where it is."""
        with self._lock:
            entry = self._entries.get(ident)
            if entry is not None and entry.addr is addr:
                if not keep:
                    del self._entries[ident]
                return entry, False
            entry = _Entry(addr)
            if keep:
                self._entries.pop(ident, None)
                self._entries[ident] = entry
                while len(self._entries) > self.DEPTH:
                    del self._entries[next(iter(self._entries))]
            return entry, True

    @staticmethod
    def _make(entry: _Entry, make: Callable[[], Any]):
        try:
            entry.value = make()
        finally:
            entry.made.set()
        return entry.value
