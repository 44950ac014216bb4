"""glibc's malloc told to keep freed memory for the next batch instead of returning it.

A batch allocates and frees the same few-hundred-KB arrays (per-access and per-episode
arrays of ~10^5 lines) again and again. glibc returns the top of its heap to the kernel
whenever more than twice its mmap threshold lies free there, so the next batch's arrays
fault their pages in anew: ~500 minor faults per RM1 CXL batch, ~1 ms of system time
on this VM (benchmarks/bench_slowdown.py). With the thresholds set, the freed pages
stay mapped and are reused; memory stays flat in the number of batches (what is kept
is what a batch used). Other C libraries, or no libc to load, leave it as it was.
The setting lasts as long as the run (``freed_memory_kept``): afterwards glibc's
default thresholds are set back and the kept memory returned, so a notebook or
script that runs a simulation keeps its allocator as it was.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

M_TRIM_THRESHOLD = -1  # malloc.h: free heap top kept before returning it (bytes)
M_MMAP_THRESHOLD = -3  # malloc.h: smaller allocations come from the heap (bytes)
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 128 << 20  # what one RM2 batch frees, with room
GLIBC_DEFAULT = 128 << 10  # both thresholds' defaults (malloc.c DEFAULT_*_THRESHOLD)


def keep_freed_memory() -> bool:
    """Set the thresholds (setting them again changes nothing); whether the C library
    took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's C library
    except (OSError, TypeError, AttributeError):  # none to load (Windows), not glibc
        return False
    taken = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and taken


def give_back_freed_memory() -> bool:
    """glibc's default thresholds again, and the free memory returned to the system."""
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, TypeError, AttributeError):
        return False
    restored = mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT) == 1
    restored = mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT) == 1 and restored
    trim(0)
    return restored


@contextlib.contextmanager
def freed_memory_kept() -> Iterator[None]:
    """keep_freed_memory for the length of a run, then glibc's defaults again."""
    taken = keep_freed_memory()
    try:
        yield
    finally:
        if taken:
            give_back_freed_memory()
