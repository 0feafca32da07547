"""The house by concern: the package layout shows the architecture and the test keeps it so.

Packages import only downward (``LAYERS``), no module imports itself back through a cycle, and no
module grows much past a few hundred lines. The import graph is read from the source with ``ast``
(every import, including those inside functions), so a lazy import cannot hide an upward arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "funcbwd"

#: Bottom to top. A module may import modules of its own layer or lower layers, never higher.
LAYERS = [
    {"errors", "internals", "progress", "tables"},
    {"batching", "fx"},
    {"tool"},
    {"ops"},
    {"strategies"},
    {"run"},
    {"doctor"},
    {"observe", "measure"},
    {"studies"},
    {"views"},
    {"cli"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    mods = {}
    for p in LIB.rglob("*.py"):
        rel = p.relative_to(LIB.parent).with_suffix("")
        name = ".".join(rel.parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    pkg_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg_parts[: len(pkg_parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in mods else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in mods and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None  # funcbwd itself: the facade


def test_every_module_belongs_to_a_layer():
    unplaced = [m for m in _graph() if m.count(".") >= 1 and _layer(m) is None
                and m not in ("funcbwd.__main__",)]
    assert unplaced == [], f"modules outside the layered packages: {unplaced}"


def test_no_import_points_up_a_layer():
    upward = []
    for mod, deps in _graph().items():
        here = _layer(mod)
        for dep in deps:
            there = _layer(dep)
            if here is not None and there is not None and there > here:
                upward.append(f"{mod} -> {dep}")
            if here is not None and dep == "funcbwd":
                upward.append(f"{mod} -> funcbwd (the facade)")
    assert upward == [], "imports pointing up the layers:\n" + "\n".join(sorted(upward))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # A package's __init__ importing its own submodules is how Python packages work, not a cycle.
    def edges(m: str) -> set[str]:
        return {d for d in graph[m] if not (m == "funcbwd" or (d.startswith(m + ".") and
                                                               LIB.joinpath(*m.split(".")[1:]).is_dir()))}
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges(m)):
            if state.get(d) == 1:
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_can_fail():
    # Mutation: add an arrow back from ops.registry to run.matrix; the check must see the cycle.
    g = _graph()
    g["funcbwd.ops.registry"] = g["funcbwd.ops.registry"] | {"funcbwd.run.matrix"}
    assert _cycles(g), "a deliberately added cycle was not detected"


#: Modules still over MAX_LINES, each with who is splitting it. An entry whose module has shrunk
#: under the limit fails the test too, so the list only ever shrinks.
OVERSIZE: dict[str, str] = {}


def _oversized(limit: int) -> dict[str, int]:
    sizes = {m: len(p.read_text().splitlines()) for m, p in _modules().items()}
    return {m: n for m, n in sizes.items() if n > limit}


def test_modules_stay_small():
    big = _oversized(MAX_LINES)
    new = {m: n for m, n in big.items() if m not in OVERSIZE}
    assert new == {}, f"modules over {MAX_LINES} lines (split them by job): {new}"
    shrunk = [m for m in OVERSIZE if m not in big]
    assert shrunk == [], f"no longer over {MAX_LINES} lines, remove from OVERSIZE: {shrunk}"


def test_the_size_check_can_fail():
    # Mutation: a limit every module exceeds must report every module.
    assert set(_oversized(-1)) == set(_modules())
