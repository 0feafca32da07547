"""``handfixed``: the modern out-of-place formula, run in Python through the legacy op.

The reference that pays the same Python costs as every other strategy: the op is the legacy
``torch.autograd.Function`` (``generate_vmap_rule=True``), and its backward runs the formula core
has today, written out of place in :mod:`funcbwd.ops.handfixed` (no functionalization, no
tracing). ``builtin`` mixes two costs, running a backward formula in Python at all and
functionalizing it; ``handfixed`` has only the first, so ``strategy / handfixed`` is the cost of
the functionalization approach and ``handfixed / builtin`` the cost of Python.

Its per-sample loop reference is the default one (the plain legacy formula), like every other
strategy's, so a ``handfixed`` cell checks the modern formula against the legacy one.
"""

from __future__ import annotations

from typing import Any

from funcbwd.errors import NotApplicableError
from funcbwd.ops.handfixed import handfixed_formula
from funcbwd.strategies import provenance
from funcbwd.strategies.base import Strategy


class Handfixed(Strategy):
    name = "handfixed"
    summary = "core's modern out-of-place formula written in Python, run through the legacy op"
    formula_kinds = ("backward", "jvp")

    def run_formula(self, op, args: tuple) -> Any:
        formula = handfixed_formula(op)
        if formula is None:
            raise NotApplicableError(self._missing(op))
        provenance.record(self.name, "handfixed out-of-place formula ran", True, op.name)
        return formula(*args)

    def not_applicable(self, op, scenario: str) -> str | None:
        kind_reason = super().not_applicable(op, scenario)
        if kind_reason:
            return kind_reason
        return None if handfixed_formula(op) is not None else self._missing(op)

    @staticmethod
    def _missing(op) -> str:
        return (f"no handfixed formula for {op.name} (set OpSpec.handfixed or add it to "
                "funcbwd.ops.handfixed.HANDFIXED)")
