"""The outroot layout: outroot/<id>/ per finished run, failed/<id>.txt, temp dirs.

A run writes into a temp sibling ``.tmp.<id>.<pid>.<host>`` and renames it to
``<id>`` only after its DONE marker (holding the id) is on disk, so a directory named
by an id is always complete; killing a sweep leaves at most temp dirs, which the next
sweep on the same host removes once their process is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

from components.sim.input_files import InputFileError, read_bytes
from components.sim.outputs import process_alive
from simulate.run.provenance import provenance

DONE = "DONE"
OPTIONS = "options.json"
RESULTS = "results.json"
FAILED = "failed"
TEMP_PREFIX = ".tmp."
MAX_MARKER_BYTES = 1 << 20
"""A DONE marker, options.json or failure note the sweep wrote: a few hundred bytes."""


def _small_text(path: Path) -> str:
    """A file the sweep wrote, read only if it is a regular file of bounded size (a
    FIFO or device in its place would block or never end); OSError otherwise."""
    try:
        return read_bytes(path, MAX_MARKER_BYTES).decode("utf-8", errors="replace")
    except InputFileError as exc:
        raise OSError(str(exc)) from None


def is_complete(outroot: Path, run_id: str) -> bool:
    rundir = outroot / run_id
    try:
        marker = _small_text(rundir / DONE).strip()
    except OSError:
        return False
    return marker == run_id and (rundir / RESULTS).is_file()


def temp_dir(outroot: Path, run_id: str) -> Path:
    return outroot / f"{TEMP_PREFIX}{run_id}.{os.getpid()}.{socket.gethostname()}"


def _owner(path: Path) -> tuple[str, int, str] | None:
    """(id, pid, host) of a temp dir, or None when the name is not one of ours."""
    parts = path.name[len(TEMP_PREFIX) :].split(".", 2)
    if not path.name.startswith(TEMP_PREFIX) or len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


def clean_stale(outroot: Path, run_id: str | None = None) -> int:
    """Remove temp dirs (of run_id, or all) whose process on this host is gone, or whose
    run has finished elsewhere; temp dirs of live runs on other hosts are left alone."""
    if not outroot.is_dir():
        return 0
    host, removed = socket.gethostname(), 0
    for path in outroot.glob(f"{TEMP_PREFIX}*"):
        owner = _owner(path)
        if owner is None or (run_id is not None and owner[0] != run_id):
            continue
        mine = owner[2] == host and owner[1] != os.getpid()
        if (mine and not process_alive(owner[1])) or is_complete(outroot, owner[0]):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _fsync_tree(path: Path) -> None:
    for item in [*path.iterdir(), path]:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def finalize(outroot: Path, run_id: str, tmp: Path, options: dict[str, Any]) -> bool:
    """Mark tmp complete and rename it to outroot/<id>; False if another copy won.
    options.json keeps the run's options and the code that ran it (simulate/provenance)."""
    record = {"id": run_id, "options": options, "provenance": provenance()}
    (tmp / OPTIONS).write_text(json.dumps(record, indent=1) + "\n")
    (tmp / DONE).write_text(run_id + "\n")
    _fsync_tree(tmp)
    final = outroot / run_id
    if final.exists() and not is_complete(outroot, run_id):
        shutil.rmtree(final)
    try:
        os.rename(tmp, final)
    except OSError:
        if not is_complete(outroot, run_id):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    (outroot / FAILED / f"{run_id}.txt").unlink(missing_ok=True)
    return True


def record_failure(outroot: Path, run_id: str, message: str, options: dict[str, Any]) -> None:
    """failed/<id>.txt: the one-line error, then the run's options as JSON."""
    folder = outroot / FAILED
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{run_id}.{os.getpid()}.tmp"
    tmp.write_text(f"{message}\n{json.dumps(options, sort_keys=True)}\n")
    os.replace(tmp, folder / f"{run_id}.txt")


def code_of(outroot: Path, run_id: str) -> str | None:
    """The source hash of the code that ran a complete run (None: not recorded)."""
    try:
        recorded = json.loads(_small_text(outroot / run_id / OPTIONS)).get("provenance")
    except (OSError, ValueError, AttributeError):
        return None
    return recorded.get("code") if isinstance(recorded, dict) else None


def failure_message(outroot: Path, run_id: str) -> str | None:
    try:
        return _small_text(outroot / FAILED / f"{run_id}.txt").splitlines()[0]
    except (OSError, IndexError):
        return None
