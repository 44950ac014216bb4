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
        "components/sub/b.py": "def f():\n    from simulate.simulator import run_job\n",
        "workloads/sub/c.py": "from simulate import options\n",
        "workloads/sub/d.py": "import os\nif os:\n    import simulate.run.cli as cli\n",
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


# ----- no import circles; the rooms of simulate/ ---------------------------------------
ROOMS = {"simulate.run": 0, "simulate.failures": 1, "simulate": 2, "simulate.sweeps": 3}
"""simulate/'s rooms, bottom to top: how a run is driven, what a failure does, the entry
that dispatches (the modules at simulate/'s top level), grids of runs."""


def module_graph(root: Path) -> dict[str, set[str]]:
    """Every module of the three packages and the modules of the tree it imports (at the
    top or in a function): ``from a.b import c`` names a.b.c where that is a module,
    else a.b."""
    modules = {}
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in modules else base)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def room_of(module: str) -> str | None:
    if not module.startswith("simulate"):
        return None
    for room in ("simulate.run", "simulate.failures", "simulate.sweeps"):
        if module == room or module.startswith(room + "."):
            return room
    return "simulate"


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """'module imports module' for every import from a room above the importer's."""
    found = []
    for module, imported in sorted(graph.items()):
        mine = room_of(module)
        if mine is None:
            continue
        for other in sorted(imported):
            theirs = room_of(other)
            if theirs is not None and ROOMS[theirs] > ROOMS[mine]:
                found.append(f"{module} imports {other}")
    return found


def test_no_import_circle_anywhere():
    assert import_circles(module_graph(ROOT)) == []


def test_the_rooms_of_simulate_import_only_downwards():
    assert room_violations(module_graph(ROOT)) == []


def test_each_room_says_its_job():
    for room in ("run", "failures", "sweeps"):
        doc = ast.get_docstring(ast.parse((ROOT / "simulate" / room / "__init__.py").read_text()))
        assert doc and len(doc.splitlines()) == 1, f"simulate/{room}/ needs a one-line docstring"


def test_the_checks_catch_a_planted_circle_and_an_upward_room(tmp_path):
    """Mutants: a circle of two modules through a function-level import, one of three
    through relative imports, and a run module reaching into failures/ and the entry."""
    for package in ("components/sub", "workloads", "simulate/run", "simulate/failures"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    planted = {
        "components/sub/a.py": "from components.sub import b\n",
        "components/sub/b.py": "def f():\n    import components.sub.a\n",
        "workloads/x.py": "from . import y\n",
        "workloads/y.py": "from .z import thing\n",
        "workloads/z.py": "from workloads.x import other\n",
        "simulate/run/job.py": "def f():\n    from simulate.failures.inject import inject\n",
        "simulate/run/opts.py": "from simulate import simulator\n",
        "simulate/failures/inject.py": "from simulate.run.opts import x\n",
        "simulate/simulator.py": "from simulate.run import job\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text)
    graph = module_graph(tmp_path)
    assert sorted(import_circles(graph)) == [
        ["components.sub.a", "components.sub.b"],
        ["simulate.failures.inject", "simulate.run.job", "simulate.run.opts", "simulate.simulator"],
        ["workloads.x", "workloads.y", "workloads.z"],
    ]
    assert room_violations(graph) == [
        "simulate.run.job imports simulate.failures.inject",
        "simulate.run.opts imports simulate.simulator",
    ]
