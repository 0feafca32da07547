"""An op's story on one screen: the module that registers an op also holds its citations, its
legacy formula and its modern formula (``OpSpec.handfixed``), in that order, above the registration.

Each family module under ``funcbwd_lab.ops.discussion`` and ``funcbwd_lab.ops.corpus`` is executed afresh
from its source with a recording ``register``; for every op it registers:

* ``formula`` and ``handfixed`` are functions *defined by that execution* (their ``__globals__``
  is the fresh namespace): not imported from elsewhere, not looked up in a table;
* the legacy formula's ``def`` comes first, the modern one's after it with no registration in
  between, and the ``register`` call after both;
* every ``pytorch#N`` / ``functorch#N`` its ``fixed_by`` names is cited in the module docstring or
  in the comment block right above one of the two formulas.

Together the modules register exactly the registry's non-live ops, in registry order. Each check is
shown to fire on a mutated module (a formula imported from another module, the two formulas
swapped, a citation dropped, a module missing).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
import sys
from typing import Any, Callable
from unittest import mock

import pytest

import funcbwd_lab.ops.corpus
import funcbwd_lab.ops.discussion
from funcbwd_lab.ops import registry

PACKAGES = (funcbwd_lab.ops.corpus, funcbwd_lab.ops.discussion)
GROUPS = ("test", "extended", "negative_control")  # every built-in group but "live"
CITATION = re.compile(r"(?:pytorch|functorch)#\d+")


def family_modules() -> list[str]:
    return [f"{pkg.__name__}.{m.name}" for pkg in PACKAGES for m in pkgutil.iter_modules(pkg.__path__)]


@dataclasses.dataclass
class Registration:
    name: str
    formula: Callable[..., Any]
    handfixed: Callable[..., Any] | None
    fixed_by: str
    line: int  # the line of the module's code that called register


def execute(module_name: str, source: str) -> tuple[list[Registration], dict[str, Any]]:
    """Run ``source`` as module ``module_name`` with ``register`` recording instead of registering."""
    recorded: list[Registration] = []
    namespace: dict[str, Any] = {"__name__": module_name}

    def record(spec: registry.OpSpec) -> registry.OpSpec:
        caller = sys._getframe(1)
        assert caller.f_globals is namespace, f"{spec.name}: register called from outside {module_name}"
        recorded.append(Registration(spec.name, spec.formula, spec.handfixed, spec.fixed_by, caller.f_lineno))
        return spec

    with mock.patch.object(registry, "register", record):
        exec(compile(source, f"<fresh {module_name}>", "exec"), namespace)
    return recorded, namespace


def _comment_above(lines: list[str], def_line: int) -> str:
    """The ``#`` comment block right above line ``def_line`` (1-based)."""
    out, i = [], def_line - 2
    while i >= 0 and lines[i].startswith("#"):
        out.append(lines[i])
        i -= 1
    return "\n".join(reversed(out))


def problems(module_name: str, source: str) -> tuple[list[Registration], list[str]]:
    """The registrations ``source`` makes and what is wrong with its layout (empty: all good)."""
    recorded, namespace = execute(module_name, source)
    lines = source.splitlines()
    docstring = ast.get_docstring(ast.parse(source)) or ""
    found = [] if recorded else [f"{module_name}: registers nothing"]
    register_lines = sorted(r.line for r in recorded)
    for r in recorded:
        where = f"{module_name} / {r.name}"
        fns = {"formula": r.formula, "handfixed": r.handfixed}
        for role, fn in fns.items():
            if fn is not None and getattr(fn, "__globals__", None) is not namespace:
                found.append(f"{where}: {role} {getattr(fn, '__qualname__', fn)!r} is not defined in this module")
        if any(p for p in found if p.startswith(where)):
            continue
        legacy = r.formula.__code__.co_firstlineno
        cited = docstring + "\n" + _comment_above(lines, legacy)
        if r.handfixed is not None:
            modern = r.handfixed.__code__.co_firstlineno
            cited += "\n" + _comment_above(lines, modern)
            if not legacy < modern < r.line:
                found.append(f"{where}: expected legacy (line {legacy}) < modern (line {modern}) < "
                             f"register (line {r.line})")
            elif any(legacy < ln < modern for ln in register_lines):
                found.append(f"{where}: a registration sits between the legacy and the modern formula")
        elif not legacy < r.line:
            found.append(f"{where}: the legacy formula (line {legacy}) is not above register (line {r.line})")
        missing = sorted(set(CITATION.findall(r.fixed_by)) - set(CITATION.findall(cited)))
        if missing:
            found.append(f"{where}: fixed_by cites {missing}, the module docstring and the formulas' "
                         "comments do not")
    return recorded, found


def coverage_problems(by_module: dict[str, list[str]]) -> list[str]:
    """The modules' registrations, taken module by module in registry order, must be exactly the
    registry's non-live ops in registry order."""
    expected = [n for n in registry.op_names(include_opt_in=True) if registry.get_op(n).group in GROUPS]
    index = {n: i for i, n in enumerate(expected)}
    ordered = sorted((names for names in by_module.values() if names),
                     key=lambda names: index.get(names[0], len(index)))
    got = [n for names in ordered for n in names]
    return [] if got == expected else [f"modules register {got}, the registry holds {expected}"]


def _source(module_name: str) -> str:
    return inspect.getsource(importlib.import_module(module_name))


@pytest.fixture(scope="module")
def layouts() -> dict[str, tuple[list[Registration], list[str]]]:
    return {m: problems(m, _source(m)) for m in family_modules()}


@pytest.mark.parametrize("module_name", family_modules())
def test_each_module_holds_citations_legacy_modern_and_registration(layouts, module_name):
    recorded, found = layouts[module_name]
    assert found == []
    assert all(r.handfixed is not None for r in recorded) or module_name.startswith("funcbwd_lab.ops.corpus")


def test_the_modules_register_exactly_the_registry_in_its_order(layouts):
    by_module = {m: [r.name for r in recorded] for m, (recorded, _) in layouts.items()}
    assert coverage_problems(by_module) == []
    # the registered specs are the ones these modules build: same formula code, same modern code
    for recorded, _ in layouts.values():
        for r in recorded:
            spec = registry.get_op(r.name)
            assert spec.formula.__code__.co_code == r.formula.__code__.co_code, r.name
            assert (spec.handfixed is None) == (r.handfixed is None), r.name


def test_the_registry_order_is_corpus_then_live_then_the_discussion_ops():
    names = registry.op_names(include_opt_in=True)
    groups = [registry.get_op(n).group for n in names]
    live = [i for i, g in enumerate(groups) if g == "live"]
    assert live == list(range(live[0], live[-1] + 1)), "the live sites are one block"
    assert set(groups[:live[0]]) == {"extended", "negative_control"} and names[0] == "gather"
    assert names[live[-1] + 1:] == ["diag", "index_select", "topk", "sort", "mode", "masked_select",
                                    "clamp", "prod"]


# ------------------------------------------------------------------ the checks can fail
DIAG = "funcbwd_lab.ops.discussion.diag"


def _def_block(source: str, name: str) -> str:
    """The source of top-level ``def name`` with the comment block right above it."""
    lines = source.splitlines()
    node = next(n for n in ast.parse(source).body if getattr(n, "name", None) == name)
    comment = _comment_above(lines, node.lineno)
    return (comment + "\n" if comment else "") + "\n".join(lines[node.lineno - 1:node.end_lineno])


@pytest.mark.parametrize("role,defined,elsewhere", [
    ("handfixed", "diag_backward_modern", "funcbwd_lab.ops.corpus.copy_into_view.diagonal_backward_modern"),
    ("formula", "diag_backward", "funcbwd_lab.ops.corpus.copy_into_view.diagonal_backward"),
])
def test_a_formula_imported_from_elsewhere_is_caught(role, defined, elsewhere):
    module, fn = elsewhere.rsplit(".", 1)
    src = _source(DIAG).replace(f"    {role}={defined},", f"    {role}=_elsewhere,").replace(
        "from funcbwd_lab.ops.registry import", f"from {module} import {fn} as _elsewhere\n"
        "from funcbwd_lab.ops.registry import")
    assert "_elsewhere," in src
    _, found = problems(DIAG, src)
    assert any(f"{role} '{fn}' is not defined in this module" in p for p in found), found


def test_the_modern_formula_above_the_legacy_one_is_caught():
    src = _source(DIAG)
    legacy, modern = _def_block(src, "diag_backward"), _def_block(src, "diag_backward_modern")
    swapped = src.replace(legacy, "@@LEGACY@@").replace(modern, legacy).replace("@@LEGACY@@", modern)
    assert swapped != src
    _, found = problems(DIAG, swapped)
    assert any("expected legacy" in p for p in found), found


def test_a_dropped_citation_is_caught():
    lines = _source(DIAG).splitlines()
    cited = [i for i, ln in enumerate(lines) if "pytorch#87180" in ln and "fixed_by=" not in ln]
    assert len(cited) >= 2  # the docstring and the formulas' comments; fixed_by keeps its own
    src = "\n".join(ln.replace("pytorch#87180", "a later change") if i in cited else ln
                    for i, ln in enumerate(lines))
    _, found = problems(DIAG, src)
    assert any("cites ['pytorch#87180']" in p for p in found), found


def test_a_missing_or_reordered_module_is_caught(layouts):
    by_module = {m: [r.name for r in recorded] for m, (recorded, _) in layouts.items()}
    assert coverage_problems(by_module) == []
    dropped = dict(by_module)
    dropped.pop("funcbwd_lab.ops.discussion.clamp")
    assert coverage_problems(dropped) != []
    reordered = dict(by_module)
    reordered["funcbwd_lab.ops.discussion.value_selecting"] = ["sort", "topk", "mode"]
    assert coverage_problems(reordered) != []
