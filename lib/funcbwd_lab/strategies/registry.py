"""The strategy registry: the one list of every strategy, its module, and its role.

Roles (every other list of strategies in the workbench derives from :data:`REGISTRY`):

* ``reference``: not a candidate answer, a row to compare with: ``plain`` (the legacy formula as
  written: the failure), ``builtin`` (torch's own op and formula), ``handfixed`` (core's modern
  out-of-place formula in Python), ``compiled`` (torch.compile of the transform call);
* ``candidate``: the ways to functionalize the design review ranks: ``composite``, ``hooks``,
  ``whole``, ``per_formula``, ``traced``;
* ``sweep``: acts on torch's own backward nodes only, for the OpInfo sweep: ``traced_backward``;
* ``cpp``: the C++ study's approaches (:mod:`funcbwd_lab.strategies.cpp`): the 8 test ops built as
  C++ operators, run when named (the C++ study's matrix, ``python -m funcbwd_lab.studies.cpp``).

:func:`available` is the matrix's strategies (references and candidates); :func:`all_names`
adds the sweep's and the C++ study's. Modules are imported on first use, so a broken approach cannot break the others.
"""

from __future__ import annotations

import dataclasses
import importlib

from funcbwd.errors import UnknownNameError
from funcbwd_lab.strategies.base import Strategy


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    module: str  # the module's dotted path (a literal: the architecture test sees the edge)
    cls: str
    role: str  # "reference" | "candidate" | "sweep" | "cpp"


REGISTRY: tuple[Entry, ...] = (
    Entry("plain", "funcbwd_lab.strategies.plain", "Plain", "reference"),
    Entry("builtin", "funcbwd_lab.strategies.builtin", "Builtin", "reference"),
    Entry("handfixed", "funcbwd_lab.strategies.handfixed", "Handfixed", "reference"),
    Entry("composite", "funcbwd_lab.strategies.composite", "Composite", "candidate"),
    Entry("hooks", "funcbwd_lab.strategies.hooks", "Hooks", "candidate"),
    Entry("whole", "funcbwd_lab.strategies.whole", "Whole", "candidate"),
    Entry("per_formula", "funcbwd_lab.strategies.per_formula", "PerFormula", "candidate"),
    Entry("traced", "funcbwd_lab.strategies.traced", "Traced", "candidate"),
    Entry("compiled", "funcbwd_lab.strategies.compiled", "Compiled", "reference"),
    Entry("traced_backward", "funcbwd_lab.strategies.traced_backward", "TracedBackward", "sweep"),
    Entry("cpp_legacy", "funcbwd_lab.strategies.cpp", "CppLegacy", "cpp"),
    Entry("cpp_handfixed", "funcbwd_lab.strategies.cpp", "CppHandfixed", "cpp"),
    Entry("cpp_composite", "funcbwd_lab.strategies.cpp", "CppComposite", "cpp"),
    Entry("cpp_guard", "funcbwd_lab.strategies.cpp", "CppGuard", "cpp"),
    Entry("cpp_whole", "funcbwd_lab.strategies.cpp", "CppWhole", "cpp"),
    Entry("cpp_traced", "funcbwd_lab.strategies.cpp", "CppTraced", "cpp"),
)
ROLES = ("reference", "candidate", "sweep", "cpp")
_BY_NAME = {e.name: e for e in REGISTRY}
_INSTANCES: dict[str, Strategy] = {}


def names(role: str | None = None) -> list[str]:
    """Registered names of ``role`` (every role if None), in registry order."""
    return [e.name for e in REGISTRY if role is None or e.role == role]


def available() -> list[str]:
    """The matrix's strategies: references and candidates, in registry order."""
    return [e.name for e in REGISTRY if e.role in ("reference", "candidate")]


def all_names() -> list[str]:
    """Every registered strategy, the sweep's included."""
    return names()


def role(name: str) -> str:
    return _BY_NAME[get_strategy(name).name].role if isinstance(name, str) else ""


#: the candidates the design review ranks, and its reference rows (derived, never retyped)
CANDIDATES = tuple(names("candidate"))
REFERENCES = tuple(names("reference"))
STRATEGY_NAMES = tuple(available())


def get_strategy(name: str | Strategy) -> Strategy:
    """The strategy called ``name`` (an instance passes through: tests pass broken variants)."""
    if isinstance(name, Strategy):
        return name
    if not isinstance(name, str) or name not in _BY_NAME:
        raise UnknownNameError("strategy", name, {r: names(r) for r in ROLES})
    if name not in _INSTANCES:
        entry = _BY_NAME[name]
        module = importlib.import_module(entry.module)
        _INSTANCES[name] = getattr(module, entry.cls)()
    return _INSTANCES[name]


