"""The strategy interface: how a legacy backward formula is run when its node executes.

A strategy decides (a) which callable the scenarios differentiate (:meth:`Strategy.function`),
(b) how the legacy formula runs inside the backward (:meth:`Strategy.run_formula`), and (c) which
transform entry points the scenarios call (:meth:`vjp`, :meth:`grad`, :meth:`jacrev`). The
strategy reaches the formula explicitly: :meth:`function` returns the legacy op bound to this
strategy (:func:`funcbwd_lab.ops.legacy_ops.function_for`), whose backward runs
``strategy.run_formula``: no context variable, whatever thread or transform runs the backward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

import torch.func

if TYPE_CHECKING:
    from funcbwd_lab.ops.registry import OpSpec


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
    #: True if the strategy acts on backward passes only (it wraps the vjp_fn or the backward
    #: graph): not applicable to a composition that runs forward mode only (``vmapjvpall``).
    backward_only: ClassVar[bool] = False
    #: The scoped vmap rules (:data:`funcbwd_lab.batching.RULES`) the strategy's backward runs under:
    #: none by default; :meth:`with_rules` gives a copy that enters them (the OpInfo sweep runs
    #: the strategies acting on torch's own nodes that way, never ``builtin``).
    rules: tuple[str, ...] = ()
    #: True for a strategy whose cells take seconds each (``compiled``: a torch.compile per
    #: cell): the test suite checks its saved cells and a few live ones, not a fresh matrix
    slow: ClassVar[bool] = False

    # --- what the scenarios differentiate -------------------------------------------------
    def function(self, op: "OpSpec | str") -> Callable[..., Any]:
        """The callable for ``op`` (an OpSpec or a registered name) under this strategy: the
        legacy op, or torch's own op when ``op`` has no legacy formula (an OpInfo op: only
        strategies that act on torch's own backward nodes apply to it, see
        :meth:`not_applicable`)."""
        if isinstance(op, str):
            from funcbwd_lab.ops import registry

            op = registry.get_op(op)
        if op.formula is None:
            return op.torch_op
        from funcbwd_lab.ops import legacy_ops

        return legacy_ops.function_for(op, self).apply

    def reference(self) -> "Strategy | str":
        """The strategy (or its registry name) whose per-sample loop this one is checked
        against; the engine resolves it once per cell (a name: :func:`funcbwd_lab.strategies.get_strategy`)."""
        return "plain"

    # --- inside the backward ----------------------------------------------------------------
    def run_formula(self, op: "OpSpec", args: tuple) -> Any:
        """Run ``op.formula(*args)``; the legacy op's backward calls this (its jvp, for a
        jvp-kind op)."""
        return op.formula(*args)

    # --- transform entry points ---------------------------------------------------------------
    def vjp(self, fn: Callable, *primals: Any, inputs: Sequence[Any] = ()):
        """``(out, vjp_fn)`` of ``fn(*primals, *inputs)`` w.r.t. ``primals``; ``inputs``: tensors
        ``fn`` reads but is not differentiated for (indices, masks), passed rather than captured
        so a strategy can tell them apart (``traced_backward`` makes them graph inputs)."""
        inputs = tuple(inputs)
        return torch.func.vjp(lambda *p: fn(*p, *inputs), *primals)

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
        if op.formula is None and not self.acts_on_builtin_nodes:
            return (f"{op.name} has no legacy formula (torch's own op only); {self.name} acts on "
                    "legacy formulas only")
        kind = op.kind
        if kind in self.formula_kinds:
            return None
        return (f"{self.name} acts on {' and '.join(self.formula_kinds)} formulas only; "
                f"{op.name}'s formula is a {kind} formula"
                + (f" ({self.formula_kinds_reason})" if self.formula_kinds_reason else ""))

    # --- scoped batching rules -----------------------------------------------------------------
    def with_rules(self) -> "Strategy":
        """A copy of this strategy whose backward runs under :func:`funcbwd_lab.batching.scoped_rules`."""
        import copy

        from funcbwd_lab.batching import RULES

        clone = copy.copy(self)
        clone.rules = RULES
        return clone

    def scoped_backward(self, vjp_fn: Callable[..., Any]) -> Callable[..., Any]:
        """``vjp_fn`` run under the strategy's scoped rules (itself when it has none): the
        backward only, never the op's forward."""
        if not self.rules:
            return vjp_fn
        from funcbwd_lab.batching import scoped_rules

        def scoped(*args: Any, **kwargs: Any) -> Any:
            with scoped_rules():
                return vjp_fn(*args, **kwargs)

        return scoped

    def bookkeeping(self) -> Any:
        """The strategy's own mutable state, compared before/after by the reliability tests."""
        return None

    def __repr__(self) -> str:
        return f"<strategy {self.name}>"

