"""``plain``: the legacy formula exactly as written. Reproduces the historical failure."""

from __future__ import annotations

from typing import Any

from funcbwd import internals
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy


class Plain(Strategy):
    name = "plain"
    summary = "legacy in-place formula as written (reproduces the failure)"
    formula_kinds = ("backward", "jvp")

    def run_formula(self, op, args: tuple) -> Any:
        """The formula as written; provenance: it ran (plain's "mechanism" is the formula itself)."""
        where = "under vmap" if internals.vmap_active() else "(no vmap level)"
        provenance.record(self.name, f"legacy formula ran as written {where}", True, op.name)
        return op.formula(*args)
