"""Our packages as an EXTRAS build embeds them in gem5.opt (SConscript: PySource for
every .py under components/, workloads/ and simulate/): gem5's importer runs each module's code
without ``__file__``, so no module may need it at import time. The stdlib components
(components/gem5/board.py, memory.py) import gem5's own packages, so they import only
inside gem5 (test_gem5_stdlib.py runs them there)."""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEM5_ONLY = {Path("components/gem5/board.py"), Path("components/gem5/memory.py")}
MODULES = sorted(
    path.relative_to(ROOT)
    for top in ("components", "workloads", "simulate")
    for path in (ROOT / top).rglob("*.py")
    if path.relative_to(ROOT) not in GEM5_ONLY
)


def _embedded_exec(relative: Path, monkeypatch) -> types.ModuleType:
    """Run a module's source as gem5's importer does: a module object with a name and a
    package, in sys.modules while it runs, and no file."""
    parts = relative.with_suffix("").parts
    package = ".".join(parts[:-1])
    name = package if parts[-1] == "__init__" else ".".join(parts)
    real = importlib.import_module(name)  # its imports resolve as they would in gem5
    module = types.ModuleType(name)
    module.__package__ = package
    if hasattr(real, "__path__"):  # a package: gem5's importer gives it its path too
        module.__path__ = real.__path__
    monkeypatch.setitem(sys.modules, name, module)
    code = compile((ROOT / relative).read_text(), str(relative), "exec")
    exec(code, module.__dict__)
    return module


@pytest.mark.parametrize("relative", MODULES, ids=str)
def test_every_embedded_module_imports_without_its_file(relative, monkeypatch):
    assert not hasattr(_embedded_exec(relative, monkeypatch), "__file__")


def test_embedded_gem5_package_has_no_checkout_and_finds_gem5_only_by_GEM5(monkeypatch):
    monkeypatch.delenv("GEM5", raising=False)
    embedded = _embedded_exec(Path("components/gem5/__init__.py"), monkeypatch)
    assert embedded.CHECKOUT is None and embedded.binary() is None
    monkeypatch.setenv("GEM5", "/opt/gem5.opt")
    assert embedded.binary() == "/opt/gem5.opt"
    paths = embedded.environment()["PYTHONPATH"].split(os.pathsep)
    assert str(ROOT) not in paths  # no checkout to add: the packages are in gem5.opt
