"""A failure run works on a copy of its --pmem-image, swapped in once the run succeeds.

Recovering from an image rewrites it (recovery's writes, the resumed training, the
seal), and a run can still fail after that: the output file size limit, a full disk,
an error while writing the outputs, Ctrl-C. Working on a sibling copy and renaming it
over the image as the run's last step means such a failure leaves the power-cut image
byte for byte as it was, so the same recovery can be run again. A fresh image (the
file did not exist) is written the same way, so a run that fails never leaves half an
image for a later run to recover from.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from components.sim.outputs import STAGING, check_replaceable, process_alive
from simulate.run.options import RunOptions


def _working_path(image: Path) -> Path:
    return image.with_name(f".{image.name}{STAGING}{socket.gethostname()}-{os.getpid()}")


def _remove_stale(image: Path) -> None:
    """Working copies of processes on this host that died (SIGKILL) without cleaning up."""
    for entry in image.parent.glob(f".{image.name}{STAGING}{socket.gethostname()}-*"):
        pid = entry.name.rpartition("-")[2]
        if pid.isdigit() and not process_alive(int(pid)):
            entry.unlink(missing_ok=True)


@contextlib.contextmanager
def working_image(options: RunOptions) -> Iterator[RunOptions]:
    """Options whose pmem_image is a working copy; when the block completes, the copy
    replaces the image in one rename; when it raises, the copy is removed and the
    image is untouched. Options without an image pass through."""
    if options.pmem_image is None:
        yield options
        return
    image = Path(options.pmem_image)
    check_replaceable(image)
    _remove_stale(image)
    working = _working_path(image)
    working.unlink(missing_ok=True)
    try:
        if image.exists():
            shutil.copyfile(image, working)
        yield replace(options, pmem_image=str(working))
        check_replaceable(image)
        os.replace(working, image)
    except Exception as exc:  # the error line names the user's image, not the copy
        if exc.args and isinstance(exc.args[0], str) and str(working) in exc.args[0]:
            exc.args = (exc.args[0].replace(str(working), str(image)), *exc.args[1:])
        raise
    finally:
        working.unlink(missing_ok=True)


def named_as_given(failure: Any, working: RunOptions, options: RunOptions) -> Any:
    """results.json's failure entries with the working copy's path replaced by the
    image's own (the copy is gone once the run ends)."""
    if working.pmem_image == options.pmem_image or failure is None:
        return failure
    entries = failure if isinstance(failure, list) else [failure]
    for entry in entries:
        for key in ("image", "resumed_from"):
            if entry.get(key) == working.pmem_image:
                entry[key] = options.pmem_image
    return failure
