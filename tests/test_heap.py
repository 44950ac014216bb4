"""simulate/run/heap.py: with the thresholds set, a batch's freed arrays are reused without
faulting their pages in again; without them glibc returns the heap top each time.
Each case runs in a fresh interpreter (the setting is per process). glibc only."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

from simulate.run.heap import keep_freed_memory

try:
    GLIBC = hasattr(ctypes.CDLL(None), "mallopt")
except OSError:
    GLIBC = False
pytestmark = pytest.mark.skipif(not GLIBC, reason="not glibc")

BATCHES = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from simulate.run.heap import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory()
    if sys.argv[1] == "kept then given back":
        from simulate.run.heap import freed_memory_kept
        with freed_memory_kept():
            pass
    def batch():  # six 800 KB arrays, written, then freed: one RM1 write stream's
        arrays = [np.ones(100_000) for _ in range(6)]
        return sum(float(a[-1]) for a in arrays)
    for _ in range(5):
        batch()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        batch()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
    """
)


def faults_per_batch(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", BATCHES, mode], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def test_freed_arrays_are_reused_without_page_faults():
    pages = 6 * 100_000 * 8 // 4096  # what the batch writes, in 4 KiB pages
    assert faults_per_batch("default") > pages / 2  # glibc alone: the heap top goes back
    assert faults_per_batch("keep") < pages / 20


def test_the_thresholds_are_taken():
    assert keep_freed_memory()


def test_after_a_run_the_allocator_returns_freed_memory_again():
    """The setting does not outlive the run: a process that ran one behaves as glibc's
    default does (the heap top goes back), not as the run's setting (kept)."""
    pages = 6 * 100_000 * 8 // 4096
    assert faults_per_batch("kept then given back") > pages / 2
