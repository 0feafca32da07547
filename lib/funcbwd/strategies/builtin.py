"""``builtin``: torch's own modern op and formula, the reference for correctness, speed and copies."""

from __future__ import annotations

from typing import Any, Callable

from funcbwd.strategies.base import Strategy


class Builtin(Strategy):
    name = "builtin"
    summary = "torch's modern op and hand-fixed formula (the reference)"
    acts_on_builtin_nodes = True

    def function(self, op) -> Callable[..., Any]:
        return op.torch_op

    def reference(self) -> Strategy:
        return self
