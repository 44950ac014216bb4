"""Writers for the outdir: stats.txt, stats.json, config.json, results.json, timeline.csv.

A run's outputs replace the previous run's as a set: everything is written into a fresh
staging directory beside the outdir and swapped in only once complete, so a run that
fails half way (disk full, Ctrl-C, an error) leaves the previous outputs byte for byte
and no temporary files. See ``replacing_dir`` for the cases.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import errno
import io
import json
import os
import shutil
import socket
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from components.sim.schedule import OpRecord
from components.sim.stats import format_rows
from components.sim.units import TICKS_PER_SECOND

GLOBAL_STATS = (
    ("simSeconds", "Number of seconds simulated", "Second"),
    ("simTicks", "Number of ticks simulated", "Tick"),
    ("finalTick", "Number of ticks from beginning of simulation", "Tick"),
    ("simFreq", "The number of ticks per simulated second", "Tick/Second"),
    ("hostSeconds", "Real time elapsed on the host", "Second"),
    ("hostMemory", "Number of bytes of host memory used", "Byte"),
)
HOST_DEPENDENT = ("hostSeconds", "hostMemory")
RUN_OUTPUTS = (
    "stats.txt",
    "stats.json",
    "config.json",
    "results.json",
    "timeline.csv",
    "timeline.png",
    "breakdown.png",
)
"""Every file a run may write into its outdir (the plots only with --plot)."""
STAGING = ".partial-"  # marks a staging directory: "<name>.partial-<host>-<pid>"


class NotRegularFile(OSError):
    """An output path that names something other than a regular file (a FIFO, a device
    node, a socket, a directory): outputs replace regular files only, so that a typo
    (``--png /dev/null``) never renames over a device, even as root."""

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(
            errno.EEXIST, f"exists and is {_kind(mode)}, not a regular file", str(path)
        )


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "a special file")


def check_replaceable(path: Path) -> None:
    """Raise NotRegularFile unless ``path`` is missing or a regular file (a symlink is
    judged by what it points to: replacing it replaces the link, not its target)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return  # missing (the caller's own checks name a missing folder)
    except OSError:
        mode = os.lstat(path).st_mode  # a link that cannot be followed (a loop)
    if not stat.S_ISREG(mode):
        raise NotRegularFile(path, mode)


@contextlib.contextmanager
def replacing_files(*paths: Path) -> Iterator[list[Path]]:
    """Temporary siblings to write, which replace ``paths`` only once all are fully
    written: Ctrl-C, a full disk or a failed write leave the previous files as they
    were, never a mixture, and no temporary behind. Only regular files are replaced
    (NotRegularFile, before anything is written)."""
    for path in paths:
        check_replaceable(path)
    temps = [path.with_name(f".{path.name}{STAGING}{_owner()}") for path in paths]
    try:
        yield temps
        for path in paths:
            check_replaceable(path)
        for temp, path in zip(temps, paths, strict=True):
            os.replace(temp, path)
    finally:
        for temp in temps:
            temp.unlink(missing_ok=True)


Owned = Iterable[str] | Callable[[str], bool]


def _predicate(owned: Owned) -> Callable[[str], bool]:
    return owned if callable(owned) else frozenset(owned).__contains__


@contextlib.contextmanager
def replacing_dir(outdir: Path, owned: Owned, owned_dirs: Owned = ()) -> Iterator[Path]:
    """Yield an empty staging directory; when the block completes, its contents become
    ``outdir``'s, replacing the previous set; when it raises, it is removed and
    ``outdir`` is left exactly as it was.

    ``owned`` says which entries of an existing outdir belong to the previous set (a
    collection of names, or a predicate). When the outdir holds nothing else, the
    staging directory takes its place in one atomic exchange (Linux renameat2; two
    renames elsewhere). When it also holds other files (a PMEM image, gem5's own -d
    directory, anything of the user's), those stay: the new entries are renamed in one
    by one after all were written, and previous owned entries the new set lacks are
    removed. ``owned_dirs`` says which of the owned entries are directories the set
    writes; a directory under any other owned name is the user's, and is refused
    before anything is written (check_outputs), never replaced or removed.
    """
    outdir = Path(outdir)
    is_owned = _predicate(owned)
    check_outputs(outdir, owned, owned_dirs)
    swap = _swappable(outdir, is_owned)
    if swap:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(outdir.parent, f".{outdir.name}{STAGING}")
        staging = outdir.parent / f".{outdir.name}{STAGING}{_owner()}"
    else:
        _remove_stale(outdir, STAGING)
        staging = outdir / f"{STAGING}{_owner()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
        if swap:
            _swap_in(staging, outdir)
        else:
            _move_in(staging, outdir, is_owned)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_outputs(outdir: Path, owned: Owned, owned_dirs: Owned = ()) -> None:
    """The previous set's entries are regular files, or directories where the set
    writes directories (``owned_dirs``): anything else under an output's name (a FIFO
    called stats.txt, a folder of the user's called REPORT.md) is refused, never
    replaced or removed. Entry points call it before their work, replacing_dir again."""
    outdir = Path(outdir)
    if not outdir.is_dir() or outdir.is_symlink():
        return
    is_owned, is_owned_dir = _predicate(owned), _predicate(owned_dirs)
    for entry in outdir.iterdir():
        if not is_owned(entry.name) or STAGING in entry.name:
            continue
        if entry.is_dir() and not entry.is_symlink():
            if not is_owned_dir(entry.name):
                raise NotRegularFile(entry, entry.stat().st_mode)
        else:
            check_replaceable(entry)


def _owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _swappable(outdir: Path, is_owned: Callable[[str], bool]) -> bool:
    """Whether the whole outdir may be exchanged: it is missing, or a plain directory
    (no symlink, not the working directory or above it) holding owned entries only."""
    if not outdir.exists():
        return True
    if outdir.is_symlink() or not outdir.is_dir():
        return False
    here = Path.cwd().resolve()
    if outdir.resolve() in (here, *here.parents):
        return False
    if not os.access(outdir.resolve().parent, os.W_OK | os.X_OK):
        return False
    return all(is_owned(entry.name) or STAGING in entry.name for entry in outdir.iterdir())


def _remove_stale(folder: Path, prefix: str) -> None:
    """Staging directories of this host's processes that died without cleaning up
    (SIGKILL); those of live processes or other hosts stay."""
    if not folder.is_dir():
        return
    host = socket.gethostname()
    for entry in folder.glob(f"{prefix}{host}-*"):
        pid = entry.name.rpartition("-")[2]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()


def process_alive(pid: int) -> bool:
    """Running on this host: a zombie (killed, not yet reaped) writes nothing more."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc here: kill(0) is all there is
        return True
    return state not in ("Z", "X")


def _swap_in(staging: Path, target: Path) -> None:
    """Make staging's directory ``target``; the previous target ends up at staging."""
    if not target.exists():
        os.rename(staging, target)
        return
    if _exchange(staging, target):
        return
    old = target.with_name(f".{target.name}.old-{_owner()}")
    os.rename(target, old)
    os.rename(staging, target)
    os.rename(old, staging)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (renameat2 RENAME_EXCHANGE); False if unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return result == 0


def _move_in(staging: Path, outdir: Path, is_owned: Callable[[str], bool]) -> None:
    new = {entry.name for entry in staging.iterdir()}
    for name in sorted(new):
        source, target = staging / name, outdir / name
        if source.is_dir() and target.is_dir() and not target.is_symlink():
            _swap_in(source, target)  # the previous directory lands in staging
        else:
            os.replace(source, target)
    for entry in outdir.iterdir():
        if entry.name not in new and is_owned(entry.name) and STAGING not in entry.name:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def global_rows(sim_ticks: int, host_seconds: float, host_memory: int) -> list[tuple]:
    values = {
        "simSeconds": sim_ticks / TICKS_PER_SECOND,
        "simTicks": sim_ticks,
        "finalTick": sim_ticks,
        "simFreq": TICKS_PER_SECOND,
        "hostSeconds": round(host_seconds, 2),
        "hostMemory": host_memory,
    }
    return [(name, values[name], desc, unit) for name, desc, unit in GLOBAL_STATS]


def stats_json(rows: list[tuple]) -> str:
    data = {
        name: {"value": value, "description": desc, "unit": unit}
        for name, value, desc, unit in rows
    }
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def timeline_csv(records: list[OpRecord]) -> str:
    """One row per op: its unit, times, the time its flows lost to other ops (and to
    whom, largest first) and the shared resources it used."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(
        [
            "unit", "op", "category", "batch", "start_ms", "end_ms", "background",
            "wait_ms", "waited_on", "uses",
        ]
    )  # fmt: skip
    for record in sorted(records, key=lambda r: (r.start, r.uid)):
        writer.writerow(
            [
                record.resource or "-",
                record.name,
                record.category,
                record.batch,
                f"{record.start / 1e9:.6f}",
                f"{record.end / 1e9:.6f}",
                int(record.background),
                f"{record.wait / 1e9:.6f}",
                _blockers(records, record),
                ";".join(resource_lanes(record.resources)),
            ]
        )
    return buffer.getvalue()


def _blockers(records: list[OpRecord], record: OpRecord, most: int = 3) -> str:
    """``op@batch:ms`` of the ops this one lost most time to."""
    ranked = sorted(record.waited_on.items(), key=lambda item: (-item[1], str(item[0])))
    parts = []
    for uid, lost in ranked[:most]:
        name = f"{records[uid].name}@{records[uid].batch}" if uid is not None else "other"
        parts.append(f"{name}:{lost / 1e9:.6f}")
    return ";".join(parts)


def resource_lanes(resources: tuple[str, ...]) -> list[str]:
    """Shared resources as plot lanes: a device's controllers form one lane."""
    lanes = []
    for key in resources:
        head, _, tail = key.rpartition(".")
        lane = head if tail.startswith("ctrl") and tail[4:].isdigit() else key
        if lane not in lanes:
            lanes.append(lane)
    return lanes


def write_outdir(
    outdir: Path,
    rows: list[tuple],
    config: dict[str, Any],
    results: dict[str, Any],
    records: list[OpRecord],
    extra: Callable[[Path], None] | None = None,
) -> None:
    """Write every output file of one run, replacing the previous run's as a set.
    ``extra(staging)`` may add files (the plots) before the set is swapped in."""
    with replacing_dir(outdir, RUN_OUTPUTS) as staging:
        (staging / "stats.txt").write_text(format_rows(rows))
        (staging / "stats.json").write_text(stats_json(rows))
        (staging / "config.json").write_text(_strict_json(config))
        (staging / "timeline.csv").write_text(timeline_csv(records))
        (staging / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        if extra is not None:
            extra(staging)


def _strict_json(data: Any) -> str:
    """Standard JSON: every parameter is parsed finite, so an infinity here is a bug."""
    return json.dumps(data, indent=1, allow_nan=False) + "\n"
