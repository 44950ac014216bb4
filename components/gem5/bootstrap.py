"""Make a run's dependencies importable inside gem5's embedded interpreter.

gem5 embeds the system's CPython; numpy, simpy and tqdm live in the project's virtual
environment. ``ensure_dependencies`` adds the first site-packages that has them, of
the same Python version: the active venv (``VIRTUAL_ENV``), the checkout's ``.venv``,
or the ``python3`` on PATH. Imports nothing beyond the standard library.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import shutil
import site
import subprocess
import sys

REQUIRED = ("numpy", "simpy", "tqdm")


def _missing() -> list[str]:
    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def _candidates(checkout: str) -> list[str]:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = []
    for prefix in (os.environ.get("VIRTUAL_ENV"), os.path.join(checkout, ".venv")):
        if prefix:
            found += sorted(glob.glob(os.path.join(prefix, "lib", version, "site-packages")))
    python3 = shutil.which("python3")
    if python3:
        major, minor = sys.version_info[:2]
        query = (
            f"import site, sys; print(sys.version_info[:2] == ({major}, {minor})); "
            "print(*site.getsitepackages(), sep='\\n')"
        )
        out = subprocess.run([python3, "-c", query], capture_output=True, text=True)
        lines = out.stdout.split("\n")
        if out.returncode == 0 and lines[0] == "True":
            found += [line for line in lines[1:] if line]
    return found


def ensure_dependencies(checkout: str) -> None:
    """Extend sys.path until numpy, simpy and tqdm import, or exit with one line."""
    for path in _candidates(checkout) if _missing() else []:
        if path not in sys.path:
            site.addsitedir(path)  # also reads its .pth files
            importlib.invalidate_caches()
        if not _missing():
            return
    missing = _missing()
    if missing:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        print(
            f"error: gem5's embedded Python {version} cannot import {', '.join(missing)}: "
            f"activate a Python {version} venv with this project installed "
            "(pip install -e .) or put its site-packages on PYTHONPATH",
            file=sys.stderr,
        )
        raise SystemExit(2)
