"""Quiet Ctrl-C while an entry point is still importing numpy and the simulator.

Imported by configs/ and scripts/ before their heavy imports (it imports nothing
heavy itself); simulate.run.cli.run_main takes SIGINT over once the work starts.
"""

from __future__ import annotations

import os
import signal
import sys

from components import gem5

_named: list[str] = []


def quiet_interrupts(prog: str) -> None:
    """Until run_main starts: Ctrl-C prints ``prog: interrupted`` and exits 130.
    Under gem5.opt its own SIGINT handling stays in charge. The first call names the
    program: an entry point may import another (sensitivity.py, reproduce_paper.py)."""
    if gem5.available() or _named:
        return
    _named.append(prog)

    def interrupted(signum, frame) -> None:
        print(f"{prog}: interrupted", file=sys.stderr)
        os._exit(130)

    signal.signal(signal.SIGINT, interrupted)


def note_first_compile(prog: str) -> None:
    """On a terminal, say before the first run on a machine goes quiet compiling the
    kernels (components/compiled.py), once, and where they will be kept."""
    from components.compiled import cache_dir, first_compile_pending

    if sys.stderr.isatty() and first_compile_pending():
        print(
            f"{prog}: compiling the simulator's kernels for this machine, once (30-60 s); "
            f"later runs load them from {cache_dir()}",
            file=sys.stderr,
        )
