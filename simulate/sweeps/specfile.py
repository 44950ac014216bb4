"""Reading a spec file safely: a regular file of bounded size, UTF-8, and YAML without
duplicate keys or alias expansion beyond what a spec needs.

A spec is a few dozen lines written by hand, so anything else is a mistake or an attack
on the loader: a FIFO or device node would block or never end, a recursive alias or a
"billion laughs" document expands without bound, and a duplicate key silently drops
one of the values the user wrote.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from components.sim import input_files

MAX_SPEC_BYTES = 1 << 20
"""1 MiB: a spec of 10,000 runs written out axis by axis is ~100 KB; the limit is ten
times that, and keeps a file that is not a spec from being parsed at all."""


class SpecFileError(ValueError):
    """The file cannot be a spec; the message says why (the caller names the path)."""


def read_text(path: Path) -> str:
    """The spec's text: a regular file of at most MAX_SPEC_BYTES, strict UTF-8."""
    try:
        return input_files.read_text(path, MAX_SPEC_BYTES)
    except input_files.InputFileError as exc:
        raise SpecFileError(str(exc)) from None


load_yaml = input_files.load_yaml


def parse(path: Path, text: str) -> Any:
    """TOML by suffix, else YAML (a JSON spec is YAML too)."""
    if path.suffix == ".toml":
        return tomllib.loads(text)
    return load_yaml(text)
