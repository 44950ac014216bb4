"""glibc's malloc told to keep freed memory for the next batch instead of returning it.

A batch allocates and frees the same few-hundred-KB arrays (per-access and per-episode
arrays of ~10^5 lines) again and again. glibc returns the top of its heap to the kernel
whenever more than twice its mmap threshold lies free there, so the next batch's arrays
fault their pages in anew: ~500 minor faults per RM1 CXL batch, ~1 ms of system time
on this VM (benchmarks/bench_slowdown.py). With the thresholds set, the freed pages
stay mapped and are reused; memory stays flat in the number of batches (what is kept
is what a batch used). Other C libraries, or no libc to load, leave it as it was.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # malloc.h: free heap top kept before returning it (bytes)
M_MMAP_THRESHOLD = -3  # malloc.h: smaller allocations come from the heap (bytes)
MMAP_THRESHOLD = 32 << 20  # glibc's largest on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 128 << 20  # what one RM2 batch frees, with room


def keep_freed_memory() -> bool:
    """Set the thresholds (setting them again changes nothing); whether the C library
    took them."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's C library
    except (OSError, TypeError, AttributeError):  # none to load (Windows), not glibc
        return False
    taken = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and taken
