"""Reading a spec file safely: a regular file of bounded size, UTF-8, and YAML without
duplicate keys or alias expansion beyond what a spec needs.

A spec is a few dozen lines written by hand, so anything else is a mistake or an attack
on the loader: a FIFO or device node would block or never end, a recursive alias or a
"billion laughs" document expands without bound, and a duplicate key silently drops
one of the values the user wrote.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

import yaml

MAX_SPEC_BYTES = 1 << 20
"""1 MiB: a spec of 10,000 runs written out axis by axis is ~100 KB; the limit is ten
times that, and keeps a file that is not a spec from being parsed at all."""
MAX_ALIASES = 100
"""Aliases (``*name``) one YAML spec may use: a spec reuses a block a handful of times;
a billion-laughs document needs thousands (each level multiplies the expansion)."""


MAX_NODES = 100_000
"""Values (scalars, lists, mappings) a spec may expand to: ten times the largest grid's
axis values (MAX_RUNS), far below what a billion-laughs document expands to."""


class SpecFileError(ValueError):
    """The file cannot be a spec; the message says why (the caller names the path)."""


def read_text(path: Path) -> str:
    """The spec's text, refusing a non-regular file before it is opened for reading
    (O_NONBLOCK, so even a FIFO swapped in after the check cannot block)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise SpecFileError(f"cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SpecFileError(f"not a regular file ({_kind(info.st_mode)})")
    if info.st_size > MAX_SPEC_BYTES:
        raise SpecFileError(f"{info.st_size:,} bytes, more than a spec's {MAX_SPEC_BYTES:,}")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise SpecFileError("not a regular file")
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecFileError(f"cannot read: {exc.strerror}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecFileError(f"more than a spec's {MAX_SPEC_BYTES:,} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecFileError(f"not UTF-8 text (byte {exc.start}: {data[exc.start]:#04x})") from None


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a plain file")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, recursive aliases and alias floods."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"more than {MAX_ALIASES} aliases (an alias bomb?)", mark
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a name, got {key!r}", key_node.start_mark
                ) from None
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root) -> None:
    """Walk the document as its aliases expand it: an alias inside the node it names
    (a structure that contains itself) or an expansion past MAX_NODES is refused."""
    stack = [(root, ())]
    visited = 0
    while stack:
        node, path = stack.pop()
        visited += 1
        if visited > MAX_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases expand to more than {MAX_NODES:,} values", root.start_mark
            )
        if any(node is ancestor for ancestor in path):
            raise yaml.constructor.ConstructorError(
                None, None, "a recursive alias (a node that contains itself)", node.start_mark
            )
        if isinstance(node, yaml.ScalarNode):
            continue
        for child in node.value:
            for item in child if isinstance(child, tuple) else (child,):
                stack.append((item, (*path, node)))


def load_yaml(text: str) -> Any:
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse(path: Path, text: str) -> Any:
    """TOML by suffix, else YAML (a JSON spec is YAML too)."""
    if path.suffix == ".toml":
        return tomllib.loads(text)
    return load_yaml(text)
