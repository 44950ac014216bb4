"""The memory ops of a run replayed with stock gem5 SimObjects (docs/gem5.md).

``translate``, ``trace``, ``record``, ``ops`` and ``pools`` are pure and import
anywhere; ``memory`` and ``board`` (gem5 standard-library components) and ``runner``
need gem5's own packages and are imported only under gem5 (``simulate.run.gem5_run``,
configs/examples/cxl_mem_on_test_board.py). This module also finds a gem5 binary and
gives the environment its embedded interpreter needs, for the scripts and tests that
launch it.
"""

from __future__ import annotations

import importlib.util
import os
import site
from pathlib import Path

# None when this package is embedded in gem5.opt (an EXTRAS build): gem5's importer
# runs embedded modules without ``__file__``, and no checkout is needed there
_HERE = globals().get("__file__")
CHECKOUT = Path(_HERE).resolve().parents[2] if _HERE else None
SHARED_BINARY = Path("..") / "shared" / "gem5" / "gem5"  # relative to the checkout


def available() -> bool:
    """True when running inside gem5.opt (its ``m5`` package is importable)."""
    try:
        return importlib.util.find_spec("m5") is not None
    except ValueError:  # m5 already imported without a spec (embedded module)
        return True


def binary() -> str | None:
    """The gem5.opt to launch: ``GEM5``, else ../shared/gem5/gem5 beside the checkout;
    ``GEM5`` set empty means none (the built-in engine alone)."""
    if "GEM5" in os.environ:
        return os.environ["GEM5"] or None
    if CHECKOUT is None:
        return None
    shared = (CHECKOUT / SHARED_BINARY).resolve()
    return str(shared) if shared.is_file() else None


def environment() -> dict[str, str]:
    """This process's environment plus what gem5's embedded interpreter needs to import
    our packages and their dependencies: the checkout and this interpreter's
    site-packages on PYTHONPATH (gem5 embeds a CPython of the same version)."""
    paths = [str(CHECKOUT)] if CHECKOUT is not None else []
    paths += site.getsitepackages()
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        paths.append(site.getusersitepackages())
    current = os.environ.get("PYTHONPATH")
    if current:
        paths.append(current)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env
