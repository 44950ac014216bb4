"""Reading a user's small input files safely: topologies and sweep specs.

These files are a few dozen lines written by hand, so anything else is a mistake or an
attack on the loader: a FIFO or device node blocks or never ends, a file in another
encoding is misread, a recursive alias or a "billion laughs" document expands without
bound, a deeply nested one exhausts Python's stack, and a duplicate key silently drops
one of the values the user wrote. Each is refused with a message saying why (the caller
names the file).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_ALIASES = 100
"""Aliases (``*name``) one document may use: a hand-written file reuses a block a
handful of times; a billion-laughs document needs thousands."""
MAX_NODES = 100_000
"""Values (scalars, lists, mappings) a document may expand to through its aliases."""
MAX_DEPTH = 64
"""Nesting of lists and mappings: a spec or topology nests three or four deep; PyYAML
composes recursively, so a document nested thousands deep would exhaust the stack."""


class InputFileError(ValueError):
    """The file cannot be read as the input it is given as; the message says why."""


def file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def check_regular(path: str | os.PathLike) -> os.stat_result:
    """The file's stat; InputFileError unless it is a regular file (checked before it
    is opened, so a FIFO or a device is never read)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError(f"not a regular file ({file_kind(info.st_mode)})")
    return info


def read_bytes(path: str | os.PathLike, limit: int) -> bytes:
    """At most ``limit`` bytes of a regular file, refusing anything else before reading
    (opened O_NONBLOCK, so even a FIFO swapped in after the check cannot block)."""
    info = check_regular(path)
    if info.st_size > limit:
        raise InputFileError(f"{info.st_size:,} bytes, more than the {limit:,} allowed")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise InputFileError("not a regular file")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InputFileError(f"cannot read: {exc.strerror}") from None
    if len(data) > limit:
        raise InputFileError(f"more than the {limit:,} bytes allowed")
    return data


def decode_utf8(data: bytes) -> str:
    """UTF-8 text (a byte-order mark allowed); a bad byte is named by line and column.
    A NUL is refused too: no text format here holds one, and YAML reads it as text."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = " (UTF-16? save it as UTF-8)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise InputFileError(
            f"line {line}, column {column}: not UTF-8 text (byte {data[exc.start]:#04x}){hint}"
        ) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise InputFileError(f"line {line}: a NUL character, not text")
    return text


def read_text(path: str | os.PathLike, limit: int) -> str:
    return decode_utf8(read_bytes(path, limit))


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, alias floods and deep nesting."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"more than {MAX_ALIASES} aliases (an alias bomb?)", mark
                )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

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
    """The document, strictly (yaml.YAMLError for what is refused, with its mark)."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> str:
    """'duplicate key 'a' (line 3, column 1)': the problem and where, in one line."""
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["bad YAML"])[0]
    return f"{problem}{where}"


def read_yaml(path: str | os.PathLike, limit: int) -> Any:
    """A small YAML file, read and parsed strictly; InputFileError says why not."""
    text = read_text(Path(path), limit)
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise InputFileError(f"not valid YAML: {yaml_problem(exc)}") from None
