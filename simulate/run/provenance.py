"""Which code produced a result: recorded in config.json and results.json of every run.

``code`` is a hash of the simulator's own source (components, workloads, simulate,
configs and pyproject.toml), so it names the code that ran whether or not the tree is a
git checkout and whether or not it had uncommitted edits; the git commit and dirty flag
say where to find that code again. A sweep compares ``code`` before it counts an earlier
run as finished (simulate/sweeps/driver.py), and collection treats it as an axis.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

_HERE = globals().get("__file__")  # none where gem5 embeds this module
ROOT = Path(_HERE).resolve().parents[2] if _HERE else None
"""The checkout whose source is hashed (None embedded in gem5: no source files)."""
SOURCE_PACKAGES = ("components", "workloads", "simulate", "configs")
# the packages whose versions can change a simulated number or the inputs it is drawn from
KEY_PACKAGES = ("numpy", "numba", "simpy", "torch")


@functools.cache
def provenance() -> dict[str, Any]:
    """This process's code version, git state, Python and key package versions."""
    commit, dirty = _git_state()
    return {
        "version": _project_version(),
        "code": code_hash(),
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "packages": {name: _package_version(name) for name in KEY_PACKAGES},
    }


def code_version() -> str:
    """Short label of the running code: version, source hash and commit."""
    data = provenance()
    commit = data["git_commit"][:10] if data["git_commit"] else "no git"
    dirty = ", uncommitted edits" if data["git_dirty"] else ""
    return f"{data['version']} code {data['code']} ({commit}{dirty})"


@functools.cache
def code_hash() -> str:
    """sha256 (12 hex digits) over the simulator's Python sources, path and content."""
    if ROOT is None:
        return "embedded"
    digest = hashlib.sha256()
    files = sorted(p for package in SOURCE_PACKAGES for p in (ROOT / package).rglob("*.py"))
    for path in [*files, ROOT / "pyproject.toml"]:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _project_version() -> str:
    if ROOT is None:
        return "unknown"
    try:
        return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git_state() -> tuple[str | None, bool | None]:
    """(HEAD commit, tracked files changed) of the source tree; (None, None) outside git."""
    if ROOT is None:
        return None, None

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10
        )
        if done.returncode:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, dirty
