"""docs/parameters.md documents every parameter the code declares, with its default."""

import importlib
import pkgutil
import re
from pathlib import Path

import components
from components.sim.simobject import SimObject

DOC = Path(__file__).resolve().parents[1] / "docs" / "parameters.md"


def all_simobject_classes():
    for info in pkgutil.walk_packages(components.__path__, "components."):
        if not info.name.startswith("components.gem5."):
            importlib.import_module(info.name)
    seen, stack = set(), [SimObject]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen and sub.__module__.startswith("components."):
                seen.add(sub)
                stack.append(sub)
    return seen


def documented_rows():
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"^\|\s*`([\w.]+)`\s*\|\s*([^|]*)\|", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    return rows


def same_default(doc: str, default) -> bool:
    """Equal as written, or as numbers to the 6 significant digits the docs show."""
    if str(default) in doc:
        return True
    try:
        return abs(float(doc) - float(default)) <= 1e-6 * max(abs(float(default)), 1.0)
    except ValueError:
        return False


def test_every_parameter_is_documented_with_its_default():
    rows = documented_rows()
    missing, wrong = [], []
    classes = all_simobject_classes()
    for cls in classes:
        for name, param in vars(cls).items():
            if getattr(param, "desc", None) is None or not hasattr(param, "default"):
                continue
            key = f"{cls.__name__}.{name}"
            # a subclass may document an inherited parameter, unless it redeclares it
            names = [cls] + sorted(
                (s for s in classes if issubclass(s, cls) and name not in vars(s)),
                key=lambda s: s.__name__,
            )
            found = [f"{c.__name__}.{name}" for c in names if f"{c.__name__}.{name}" in rows]
            if not found:
                missing.append(key)
            elif not same_default(rows[found[0]], param.default):
                wrong.append(f"{found[0]}: doc {rows[found[0]]!r} vs code {param.default!r}")
            assert param.source, f"{key} has no source"
    assert not missing, f"undocumented parameters: {sorted(missing)}"
    assert not wrong, wrong
