"""The house: packages import only downward, no cycle, no in-layer back-and-forth, small modules.

The import graph is read from the source with ``ast``: every ``import`` and ``from ... import``
(including those inside functions, so a lazy import cannot hide an arrow), every string literal
that names one of the library's modules (``importlib.import_module("funcbwd.x")``, a registry of
module paths), and the edges out of package ``__init__`` files. Each rule has a mutation test
beside it that proves the rule fires.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib"
TOOL, WORKBENCH = "funcbwd", "funcbwd_lab"

#: Bottom to top: units (top-level packages or modules, or study packages). A module may import
#: its own unit, units of lower layers, and units of its own layer in one direction only. The
#: tool's units (``funcbwd.*``) are the bottom; the workbench's (named without their package) sit
#: on them.
LAYERS = [
    {"funcbwd.errors", "funcbwd.internals", "funcbwd.compare", "funcbwd.tolerances"},
    {"funcbwd.fx", "funcbwd.scope", "funcbwd.cache"},
    {"funcbwd.journal", "funcbwd.masks", "funcbwd.replay", "funcbwd.guards"},
    {"funcbwd.rules"},
    {"funcbwd.inplace", "funcbwd.audit"},
    {"funcbwd.functions", "funcbwd.dense_masks", "funcbwd.eager"},
    {"funcbwd.decorator"},
    {"funcbwd.ladder"},
    {"funcbwd.transforms"},
    {"funcbwd.harness"},
    {"funcbwd.doctor"},
    {"progress", "tables", "command", "figstyle", "parallel", "provenance"},
    {"batching", "fx"},
    {"ops"},
    {"strategies"},
    {"run"},
    {"studies", "studies.matrix"},
    {"studies.trace", "studies.graphs"},
    {"studies.bench"},
    {"studies.coverage", "studies.deletable", "studies.findings", "studies.compiled",
     "studies.yourcode", "studies.bad_input", "studies.cpp"},
    {"studies.libraries"},
    {"studies.review"},
    {"views"},
    {"cli"},
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
MAX_LINES = 450
#: the public faces import everything, lazily
FACADE = ("funcbwd", "funcbwd.__main__", "funcbwd_lab", "funcbwd_lab.__main__")


def _modules() -> dict[str, Path]:
    mods = {}
    for package in (TOOL, WORKBENCH):
        for p in (LIB / package).rglob("*.py"):
            rel = p.relative_to(LIB).with_suffix("")
            mods[".".join(rel.parts).removesuffix(".__init__")] = p
    return mods


def imports_of(name: str, source: str, mods: dict[str, Path], is_package: bool = False) -> set[str]:
    """The library modules ``source`` (module ``name``) refers to: imports and module-name
    strings."""
    pkg_parts = name.split(".") if is_package else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg_parts[: len(pkg_parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in mods else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value
              and node.value in mods):
            out.add(node.value)  # importlib.import_module("funcbwd.x"), a registry of module paths
    return {m for m in out if m in mods and m != name}


@functools.lru_cache(maxsize=1)
def _graph_cached() -> tuple:
    mods = _modules()
    return tuple((m, frozenset(imports_of(m, p.read_text(), mods, p.name == "__init__.py")))
                 for m, p in mods.items())


def _graph() -> dict[str, set[str]]:
    """The import graph (read once per session; each caller gets its own copy to mutate)."""
    return {m: set(ds) for m, ds in _graph_cached()}


def unit_of(module: str) -> str | None:
    """The layer unit of ``funcbwd_lab.a.b.c``: the longest ``a.b`` / ``a`` that is a
    unit; of the tool's ``funcbwd.a.b``: ``funcbwd.a``."""
    head, _, rest = module.partition(".")
    if head == TOOL:
        unit = f"{TOOL}.{rest.split('.')[0]}"
        return unit if unit in RANK else None
    parts = rest.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANK:
            return ".".join(parts[:n])
    return None


def upward(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for mod, deps in graph.items():
        if mod in FACADE:
            continue
        here = unit_of(mod)
        for dep in deps:
            if dep in FACADE and not (dep == TOOL and mod.startswith(WORKBENCH + ".")):
                out.append(f"{mod} -> {dep} (the facade)")
            elif dep in FACADE:
                continue  # the workbench uses the tool's public names
            elif RANK[unit_of(dep)] > RANK[here]:
                out.append(f"{mod} -> {dep}")
    return sorted(out)


def back_and_forth(graph: dict[str, set[str]]) -> list[str]:
    """Pairs of different units of one layer that import each other (in either module)."""
    edges = {(unit_of(m), unit_of(d)) for m, ds in graph.items() if m not in FACADE
             for d in ds if d not in FACADE}
    return sorted(f"{a} <-> {b}" for a, b in edges
                  if a != b and a < b and (b, a) in edges and RANK[a] == RANK[b])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles between modules. A package's ``__init__`` is a module like any other: its
    edges to its own submodules count, so a submodule that imports its package (not a sibling)
    closes a cycle (``strategies.base -> strategies -> strategies.base``)."""
    def edges(m: str) -> set[str]:
        return set() if m in FACADE else set(graph[m])
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


def unresolved(source: str, mods: dict[str, Path]) -> list[str]:
    """``funcbwd.*`` imports in ``source`` that name no module or package of the library (a
    stale path after a move: such an import fails only when its function runs)."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("funcbwd"):
            if node.module not in mods:
                bad.append(node.module)
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith("funcbwd") and a.name not in mods]
    return bad


def test_every_library_import_resolves():
    mods = _modules()
    bad = {m: u for m, p in mods.items() if (u := unresolved(p.read_text(), mods))}
    assert bad == {}, f"imports of modules that do not exist: {bad}"


def test_an_import_of_a_moved_module_is_caught():
    # Mutation: a function-level import of a module that moved away.
    mods = _modules()
    src = "def f():\n    from funcbwd.measure.review_text import COSTS_ELSEWHERE\n"
    assert unresolved(src, mods) == ["funcbwd.measure.review_text"]
    assert unresolved("from funcbwd_lab.studies.bench import text\n", mods) == []


def test_every_module_belongs_to_a_layer():
    unplaced = [m for m in _graph() if m not in FACADE and unit_of(m) is None]
    assert unplaced == [], f"modules outside the layered units: {unplaced}"


def test_no_import_points_up_a_layer():
    assert upward(_graph()) == [], "imports pointing up the layers:\n" + "\n".join(upward(_graph()))


def test_the_layer_rule_can_fail():
    g = _graph()
    g["funcbwd_lab.ops.registry"] = g["funcbwd_lab.ops.registry"] | {"funcbwd_lab.run.runner"}
    assert "funcbwd_lab.ops.registry -> funcbwd_lab.run.runner" in upward(g)
    g["funcbwd_lab.studies.matrix.matrix"] = g["funcbwd_lab.studies.matrix.matrix"] | {"funcbwd_lab.studies.review.review"}
    assert "funcbwd_lab.studies.matrix.matrix -> funcbwd_lab.studies.review.review" in upward(g)


def test_no_back_and_forth_within_a_layer():
    assert back_and_forth(_graph()) == []


def test_the_back_and_forth_rule_can_fail():
    g = _graph()
    g["funcbwd_lab.studies.coverage.sweep"] = g["funcbwd_lab.studies.coverage.sweep"] | {"funcbwd_lab.studies.deletable.deletable"}
    g["funcbwd_lab.studies.deletable.deletable"] = g["funcbwd_lab.studies.deletable.deletable"] | {"funcbwd_lab.studies.coverage.opinfo"}
    assert "studies.coverage <-> studies.deletable" in back_and_forth(g)


def test_module_name_strings_are_edges():
    # a lazy registry of module paths is an import the rules must see (the strategy registry is one)
    mods = _modules()
    src = 'import importlib\ndef f():\n    return importlib.import_module("funcbwd_lab.run.runner")\n'
    assert "funcbwd_lab.run.runner" in imports_of("funcbwd_lab.ops.fake", src, mods)
    assert "funcbwd_lab.strategies.traced" in _graph()["funcbwd_lab.strategies.registry"]


def test_no_import_cycle():
    found = cycles(_graph())
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_cycle_check_can_fail_also_through_a_package_init():
    g = _graph()
    g["funcbwd_lab.ops.registry"] = g["funcbwd_lab.ops.registry"] | {"funcbwd_lab.studies.matrix.matrix"}
    assert cycles(g), "a deliberately added cycle was not detected"
    # an __init__ edge: a strategy module importing its package (whose __init__ imports it back)
    g = _graph()
    g["funcbwd_lab.strategies.base"] = g["funcbwd_lab.strategies.base"] | {"funcbwd_lab.strategies"}
    assert any("funcbwd_lab.strategies" in c and "funcbwd_lab.strategies.base" in c for c in cycles(g))


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


def tool_imports_of_the_workbench(graph: dict[str, set[str]]) -> list[str]:
    """Edges from the tool (``funcbwd``: what ``pip install funcbwd`` is for) into the workbench."""
    return sorted(f"{m} -> {d}" for m, ds in graph.items() if m.split(".")[0] == TOOL
                  for d in ds if d.split(".")[0] == WORKBENCH)


def test_the_tool_never_imports_the_workbench():
    found = tool_imports_of_the_workbench(_graph())
    assert found == [], "the tool imports the workbench:\n" + "\n".join(found)


def test_the_tool_workbench_rule_can_fail():
    # Mutation: the in-place mode reaching up into a study.
    g = _graph()
    g["funcbwd.inplace"] = g["funcbwd.inplace"] | {"funcbwd_lab.studies.yourcode.run"}
    assert tool_imports_of_the_workbench(g) == [
        "funcbwd.inplace -> funcbwd_lab.studies.yourcode.run"]
