"""Running a call the way a fresh install without numba would."""

from __future__ import annotations


def numpy_path(switch, call):
    """``call()`` with ``switch.COMPILED`` off (the numpy definitions), then back on."""
    switch.COMPILED = False
    try:
        return call()
    finally:
        switch.COMPILED = True
