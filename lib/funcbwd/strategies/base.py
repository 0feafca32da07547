"""The strategy interface: how a legacy backward formula is run when its node executes.

A strategy decides (a) which callable the scenarios differentiate (:meth:`Strategy.function`),
(b) how the legacy formula runs inside the backward (:meth:`Strategy.run_formula`), and (c) which
transform entry points the scenarios call (:meth:`vjp`, :meth:`grad`, :meth:`jacrev`). The
legacy ops capture the active strategy when their forward runs, so the backward uses the
strategy that was active when the graph was built, whatever thread or transform runs it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator

import torch.func

from funcbwd.ops.active import activated, active_strategy

if TYPE_CHECKING:
    from funcbwd.ops.registry import OpSpec


class Strategy:
    """Base class; subclasses override what their approach changes."""

    name: ClassVar[str] = "?"
    summary: ClassVar[str] = ""
    #: True if the strategy can act on torch's own (C++) backward nodes, not just our formulas.
    acts_on_builtin_nodes: ClassVar[bool] = False
    #: True if the scenarios differentiate the legacy op (its forward-mode rule is ``OpSpec.jvp``);
    #: False for a strategy that differentiates torch's own op (``builtin``).
    runs_legacy_op: ClassVar[bool] = True
    #: The kinds of formula (``OpSpec.kind``) the strategy's mechanism acts on: "backward" (a vjp
    #: formula run by the legacy op's backward) and/or "jvp" (a forward-mode formula run by its
    #: jvp). A strategy opts in to "jvp"; for an op of another kind it is not applicable.
    formula_kinds: ClassVar[tuple[str, ...]] = ("backward",)
    #: Why the strategy cannot act on the other kinds (the not_applicable text), if it says more.
    formula_kinds_reason: ClassVar[str] = ""

    # --- what the scenarios differentiate -------------------------------------------------
    def function(self, op: "OpSpec") -> Callable[..., Any]:
        """The callable for ``op`` under this strategy (default: the legacy op)."""
        from funcbwd.ops import legacy_ops

        return legacy_ops.function_for(op).apply

    def reference(self) -> "Strategy":
        """The strategy whose per-sample loop this one is checked against."""
        from funcbwd.strategies import get_strategy

        return get_strategy("plain")

    # --- inside the backward ----------------------------------------------------------------
    def run_formula(self, op: "OpSpec", args: tuple) -> Any:
        """Run ``op.formula(*args)``; the legacy op's backward calls this (its jvp, for a
        jvp-kind op)."""
        return op.formula(*args)

    # --- transform entry points ---------------------------------------------------------------
    def vjp(self, fn: Callable, *primals: Any):
        return torch.func.vjp(fn, *primals)

    def grad(self, fn: Callable, argnums: Any = 0) -> Callable:
        return torch.func.grad(fn, argnums=argnums)

    def jacrev(self, fn: Callable, argnums: Any = 0) -> Callable:
        return torch.func.jacrev(fn, argnums=argnums)

    def transform(self, composed: Callable[..., Any]) -> Callable[..., Any]:
        """The callable a scenario runs for its strategy part: ``composed(*inputs)`` is the whole
        transform call (e.g. ``vmap`` over ``vjp_fn``); a strategy may wrap it (``compiled``
        returns ``torch.compile(composed)``). Default: ``composed`` itself."""
        return composed

    def not_applicable(self, op: "OpSpec", scenario: str) -> str | None:
        """A reason this strategy cannot apply to ``op`` in ``scenario``, or None (base: the
        op's formula kind must be one of :attr:`formula_kinds`; overrides call this first)."""
        kind = op.kind
        if kind in self.formula_kinds:
            return None
        return (f"{self.name} acts on {' and '.join(self.formula_kinds)} formulas only; "
                f"{op.name}'s formula is a {kind} formula"
                + (f" ({self.formula_kinds_reason})" if self.formula_kinds_reason else ""))

    # --- activation ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def active(self) -> Iterator["Strategy"]:
        with activated(self):
            yield self

    def bookkeeping(self) -> Any:
        """The strategy's own mutable state, compared before/after by the reliability tests."""
        return None

    def __repr__(self) -> str:
        return f"<strategy {self.name}>"


def current() -> Strategy:
    s = active_strategy()
    if s is None:
        from funcbwd.strategies import get_strategy

        return get_strategy("plain")
    return s
