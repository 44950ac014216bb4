"""Data flows down: configs/scripts -> simulate -> workloads -> components. Every import
of every module (at the top, in a function, relative or absolute) is read from its
source, so a layer that reaches up fails here before anyone has to untangle it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("components", "workloads", "simulate")  # bottom to top
FORBIDDEN = {layer: set(LAYERS[i + 1 :]) for i, layer in enumerate(LAYERS)}


def imported_packages(source: str, module: str) -> set[str]:
    """The top-level packages a module's source imports, relative imports resolved."""
    found = set()
    package = module.split(".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level]
                found.add(base[0] if base else "")
            elif node.module:
                found.add(node.module.split(".")[0])
    return found


def violations(root: Path) -> list[str]:
    """'module imports package' for every import against the layer order."""
    found = []
    for layer, above in FORBIDDEN.items():
        for path in sorted((root / layer).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            bad = imported_packages(path.read_text(), module) & above
            found += [f"{module} imports {package}" for package in sorted(bad)]
    return found


def test_no_layer_imports_a_layer_above_it():
    assert violations(ROOT) == []


def test_every_layer_is_checked():
    for layer in LAYERS:
        assert list((ROOT / layer).rglob("*.py")), f"{layer}/ has no modules"


def test_the_check_catches_imports_that_reach_up(tmp_path):
    """Mutants: each kind of upward import, planted in a copy of the layout."""
    for layer in LAYERS:
        (tmp_path / layer / "sub").mkdir(parents=True)
    planted = {
        "components/sub/a.py": "import workloads.models\n",
        "components/sub/b.py": "def f():\n    from simulate.job import run_job\n",
        "workloads/sub/c.py": "from simulate import options\n",
        "workloads/sub/d.py": "import os\nif os:\n    import simulate.cli as cli\n",
        "simulate/sub/e.py": "from components.sim import units\nfrom workloads import models\n",
        "components/sub/f.py": "from . import g\nfrom ..sim import units\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    assert violations(tmp_path) == [
        "components.sub.a imports workloads",
        "components.sub.b imports simulate",
        "workloads.sub.c imports simulate",
        "workloads.sub.d imports simulate",
    ]


def test_relative_imports_resolve_to_their_package():
    assert imported_packages("from .. import x", "workloads.dlrm.model") == {"workloads"}
    assert imported_packages("from .sim import units", "components.boards.base") == {"components"}
