"""numba where it is installed: the row kernels (components/memory/rowsort.py,
workloads/rowgen.py) compile, cached on disk, else stay Python and their callers take
the numpy definitions (COMPILED False)."""

from __future__ import annotations

try:
    from numba import njit
except ImportError:  # a fresh install without numba
    COMPILED = False
else:
    COMPILED = True


def kernel(function):
    """The function compiled (and cached on disk) where numba is available."""
    return njit(cache=True, nogil=True)(function) if COMPILED else function
