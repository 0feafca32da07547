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
        """Run ``op.formula(*args)``; the legacy op's backward calls this."""
        return op.formula(*args)

    # --- transform entry points ---------------------------------------------------------------
    def vjp(self, fn: Callable, *primals: Any):
        return torch.func.vjp(fn, *primals)

    def grad(self, fn: Callable, argnums: Any = 0) -> Callable:
        return torch.func.grad(fn, argnums=argnums)

    def jacrev(self, fn: Callable, argnums: Any = 0) -> Callable:
        return torch.func.jacrev(fn, argnums=argnums)

    def not_applicable(self, op: "OpSpec", scenario: str) -> str | None:
        """A reason this strategy cannot apply to ``op`` in ``scenario``, or None."""
        return None

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
