"""``handfixed``: the modern out-of-place formula, run in Python through the legacy op.

The reference that pays the same Python costs as every other strategy: the op is the legacy
``torch.autograd.Function`` (``generate_vmap_rule=True``), and its backward runs the formula core
has today, written out of place in Python (``OpSpec.handfixed``: for the built-in ops, defined
right below the legacy formula in the op's module under :mod:`funcbwd_lab.ops`; no functionalization,
no tracing). ``builtin`` mixes two costs, running a backward formula in Python at all and
functionalizing it; ``handfixed`` has only the first, so ``strategy / handfixed`` is the cost of
the functionalization approach and ``handfixed / builtin`` the cost of Python.

Its per-sample loop reference is the default one (the plain legacy formula), like every other
strategy's, so a ``handfixed`` cell checks the modern formula against the legacy one.
"""

from __future__ import annotations

from typing import Any, Callable

from funcbwd.errors import NotApplicableError
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy


def handfixed_formula(op: Any) -> Callable[..., Any] | None:
    """The modern formula ``op`` (an :class:`funcbwd_lab.OpSpec`) carries, ``op.handfixed``; None when it
    has none (among the built-ins block_diag, cumprod and narrow; their modules say why)."""
    return op.handfixed


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
        return f"no handfixed formula for {op.name} (its OpSpec.handfixed is None)"
