"""``builtin``: torch's own modern op and formula, the reference for correctness, speed and copies."""

from __future__ import annotations

from typing import Any, Callable

from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy


class Builtin(Strategy):
    name = "builtin"
    summary = "torch's modern op and hand-fixed formula (the reference)"
    acts_on_builtin_nodes = True
    runs_legacy_op = False
    formula_kinds = ("backward", "jvp")  # for a jvp-kind op: torch's own op and forward mode

    def function(self, op) -> Callable[..., Any]:
        """torch's op; provenance: it ran (its backward is torch's own formula)."""
        def torch_op(*args: Any) -> Any:
            provenance.record(self.name, "torch's op and built-in backward ran", True, op.name)
            return op.torch_op(*args)

        return torch_op

    def reference(self) -> Strategy:
        return self
