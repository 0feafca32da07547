"""``per_formula``: the discussion's "cheap option 2", done generically by one decorator.

:func:`functionalize_under_vmap` wraps a backward formula so that it runs under
``torch.func.functionalize`` iff a vmap level is active, and as written otherwise; no formula is
edited by hand. Functionalization turns ``copy_``/``index_add_``/``scatter_`` into out-of-place ops
vmap can batch, but the ``aten::copy`` it emits has no batching rule, so formulas with ``copy_``
still take vmap's slow per-sample fallback (``traced`` removes that). It cannot fix data-dependent
control flow (prod's ``.item()``) or dynamic shapes (masked_select's forward).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch.func

from funcbwd import internals
from funcbwd.strategies.base import Strategy


def functionalize_under_vmap(formula: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: run ``formula`` functionalized when vmap is active, as written otherwise."""

    functionalized = torch.func.functionalize(formula)

    @functools.wraps(formula)
    def wrapper(*args: Any) -> Any:
        if internals.vmap_active():
            return functionalized(*args)
        return formula(*args)

    wrapper.__wrapped_formula__ = formula  # type: ignore[attr-defined]
    return wrapper


class PerFormula(Strategy):
    name = "per_formula"
    summary = "each formula functionalized iff vmap is active (one generic decorator)"

    def __init__(self) -> None:
        self._wrapped: dict[str, Callable[..., Any]] = {}

    def wrapped(self, op) -> Callable[..., Any]:
        fn = self._wrapped.get(op.name)
        if fn is None:
            fn = self._wrapped[op.name] = functionalize_under_vmap(op.formula)
        return fn

    def run_formula(self, op, args: tuple) -> Any:
        return self.wrapped(op)(*args)
