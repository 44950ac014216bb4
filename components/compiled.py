"""numba where it is installed: the kernels (components/memory/rowsort.py, workloads/rowgen.py,
components/memory/kernels.py, components/sim/flow_kernels.py) compile, cached on disk,
else stay Python and their callers take the numpy definitions (COMPILED False).

The compiled caches go to the user's cache directory (``$NUMBA_CACHE_DIR`` where set,
else ``$XDG_CACHE_HOME/trainingcxl/numba``, by default ``~/.cache/trainingcxl/numba``),
never into the source tree. numba's setting is changed only while this package's own
kernels are declared, so other numba code in the same process caches where it did.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    from numba import njit
    from numba.core import config as numba_config
except ImportError:  # a fresh install without numba
    COMPILED = False
else:
    COMPILED = True


def cache_dir() -> Path:
    """Where the compiled kernels are kept."""
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainingcxl" / "numba"


@contextlib.contextmanager
def _cached_in_user_dir() -> Iterator[None]:
    """numba's CACHE_DIR pointed at cache_dir() while a kernel is declared (numba fixes
    a function's cache path then); an unwritable directory leaves numba's default."""
    if numba_config.CACHE_DIR:  # the user chose one ($NUMBA_CACHE_DIR)
        yield
        return
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError:
        yield
        return
    numba_config.CACHE_DIR = str(cache_dir())
    try:
        yield
    finally:
        numba_config.CACHE_DIR = ""


def compile_kernel(function: Callable, signature: str | None = None) -> Callable:
    """The function compiled (lazily, or now for ``signature``) and cached on disk where
    numba is available; else the function itself."""
    if not COMPILED:
        return function
    with _cached_in_user_dir():
        if signature is None:
            return njit(cache=True, nogil=True)(function)
        return njit(signature, cache=True, nogil=True)(function)


def kernel(function: Callable) -> Callable:
    """The function compiled (and cached on disk) where numba is available."""
    return compile_kernel(function)


def first_compile_pending() -> bool:
    """Whether no kernel of this package has been cached on this machine yet: the first
    run compiles them (30-60 s) before it simulates."""
    return COMPILED and not any(cache_dir().rglob("*.nbi"))
