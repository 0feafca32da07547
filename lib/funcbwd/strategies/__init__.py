"""Strategy registry. Each approach lives in its own module and registers one instance here."""

from __future__ import annotations

import importlib

from funcbwd.errors import UnknownNameError
from funcbwd.strategies.base import Strategy, current

# name -> module defining it (imported lazily so a broken approach cannot break the others)
_MODULES = {
    "plain": ("plain", "Plain"),
    "builtin": ("builtin", "Builtin"),
    "handfixed": ("handfixed", "Handfixed"),
    "composite": ("composite", "Composite"),
    "hooks": ("hooks", "Hooks"),
    "whole": ("whole", "Whole"),
    "per_formula": ("per_formula", "PerFormula"),
    "traced": ("traced", "Traced"),
    "compiled": ("compiled", "Compiled"),
}
_INSTANCES: dict[str, Strategy] = {}


def available() -> list[str]:
    """Strategy names whose module exists, in the canonical order."""
    out = []
    for name, (mod, _) in _MODULES.items():
        if importlib.util.find_spec(f"{__name__}.{mod}") is not None:
            out.append(name)
    return out


STRATEGY_NAMES = tuple(_MODULES)


def get_strategy(name: str | Strategy) -> Strategy:
    if isinstance(name, Strategy):
        return name
    if not isinstance(name, str) or name not in available():
        raise UnknownNameError("strategy", name, available())
    if name not in _INSTANCES:
        mod, cls = _MODULES[name]
        module = importlib.import_module(f"{__name__}.{mod}")
        _INSTANCES[name] = getattr(module, cls)()
    return _INSTANCES[name]


__all__ = ["Strategy", "current", "get_strategy", "available", "STRATEGY_NAMES"]
