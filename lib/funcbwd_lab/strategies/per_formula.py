"""``per_formula``: the discussion's "cheap option 2", done generically by one decorator.

:func:`functionalize_under_vmap` wraps a backward formula so that it runs under
``torch.func.functionalize`` iff a vmap level is active, and as written otherwise; no formula is
edited by hand. Functionalization turns ``copy_``/``index_add_``/``scatter_`` into out-of-place ops
vmap can batch, but the ``aten::copy`` it emits has no batching rule, so formulas with ``copy_``
still take vmap's slow per-sample fallback (``traced`` removes that). It cannot fix data-dependent
control flow (prod's ``.item()``) or dynamic shapes (masked_select's forward).

Provenance: the formula's body records whether it actually received functional tensors ("formula
functionalized under vmap", ran=True) or not; with no vmap level the formula runs as written and
says so (ran=False). A decorator that skipped functionalization would therefore show
``mechanism_ran`` False (tests/test_provenance.py builds such a variant).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.func
import torch.utils._pytree as pytree

from funcbwd import internals
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy


def observed(formula: Callable[..., Any], strategy: str) -> Callable[..., Any]:
    """``formula`` recording, each time it runs under vmap, whether its tensor args are functional
    (i.e. whether functionalization really wraps it): the provenance of ``strategy``."""

    @functools.wraps(formula)
    def body(*args: Any) -> Any:
        functional = any(internals.is_functional(t) for t in pytree.tree_leaves(args)
                         if isinstance(t, torch.Tensor))
        provenance.record(strategy, "formula functionalized under vmap" if functional
                          else "formula ran unfunctionalized under vmap", functional)
        return formula(*args)

    return body


def functionalize_under_vmap(formula: Callable[..., Any], strategy: str = "per_formula"
                             ) -> Callable[..., Any]:
    """Decorator: run ``formula`` functionalized when vmap is active, as written otherwise
    (provenance recorded under ``strategy``)."""

    functionalized = torch.func.functionalize(observed(formula, strategy))

    @functools.wraps(formula)
    def wrapper(*args: Any) -> Any:
        if internals.vmap_active():
            return functionalized(*args)
        provenance.record(strategy, "formula ran as written (no vmap level)", False)
        return formula(*args)

    wrapper.__wrapped_formula__ = formula  # type: ignore[attr-defined]
    return wrapper


class PerFormula(Strategy):
    name = "per_formula"
    summary = "each formula functionalized iff vmap is active (one generic decorator)"
    formula_kinds = ("backward", "jvp")

    def __init__(self) -> None:
        self._wrapped: dict[str, Callable[..., Any]] = {}

    def wrapped(self, op) -> Callable[..., Any]:
        fn = self._wrapped.get(op.name)
        if fn is None:
            fn = self._wrapped[op.name] = functionalize_under_vmap(op.formula, self.name)
        return fn

    def run_formula(self, op, args: tuple) -> Any:
        return self.wrapped(op)(*args)
