"""The one comparison every computed cell uses: results against a reference, measured.

:func:`compare` pairs outputs and returns a :class:`Comparison`: whether they agree (same
number of outputs, shapes and dtypes, values within :func:`funcbwd.tolerances.tolerance` of
the expected output's dtype, NaN equal to NaN) and the *measured* errors, always: the largest
absolute difference and the largest relative difference (``|a - e| / |e|`` where ``e != 0``).
A structural difference (count, shape, dtype) has infinite error and says which output and how.

:func:`check_close` is the raising form (:class:`Mismatch`) for callers that stop at the first
difference.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import torch

from funcbwd.tolerances import Tolerance, tolerance

ToleranceFor = Callable[[torch.dtype], Tolerance]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """``ok``: every output within tolerance; errors measured over all outputs (``inf`` for a
    structural difference); ``detail``: the first difference ("" when ok); ``tolerance``: the
    tolerance text of the first floating output compared."""

    ok: bool
    max_abs_err: float
    max_rel_err: float
    detail: str = ""
    tolerance: str = ""

    @staticmethod
    def worst(comparisons: Sequence["Comparison"]) -> "Comparison | None":
        """All of ``comparisons`` as one: ok if all are, the largest errors, the first detail."""
        if not comparisons:
            return None
        bad = [c for c in comparisons if not c.ok]
        return Comparison(not bad, max(c.max_abs_err for c in comparisons),
                          max(c.max_rel_err for c in comparisons), bad[0].detail if bad else "",
                          comparisons[0].tolerance)


class Mismatch(AssertionError):
    """A result differs from its reference; ``max_abs_err`` is inf for a structural difference."""

    def __init__(self, max_abs_err: float, where: str, comparison: Comparison | None = None):
        self.max_abs_err = max_abs_err
        self.comparison = comparison
        super().__init__(f"max abs error {max_abs_err:.3g} vs the per-sample loop ({where})")


def _default_tolerance(dtype: torch.dtype) -> Tolerance:
    return tolerance(dtype)


def _errors(a: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Elementwise |a - e| (0 where both are NaN, or equal infinities) and |e| in float64."""
    if a.is_complex() or e.is_complex():
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    a, e = a.double(), e.double()
    both_nan = a.isnan() & e.isnan()
    same_inf = a.isinf() & e.isinf() & (a == e)
    diff = (a - e).abs().masked_fill(both_nan | same_inf, 0.0)
    diff = diff.masked_fill(diff.isnan(), math.inf)  # NaN against a number: infinitely wrong
    return diff, e.abs().masked_fill(both_nan, 0.0)


def compare(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor],
            tol: ToleranceFor | None = None) -> Comparison:
    """Compare paired outputs (see the module docstring); ``tol(dtype)`` gives each expected
    output's tolerance (default: :func:`funcbwd.tolerances.tolerance` by dtype alone)."""
    tol = tol or _default_tolerance
    actual, expected = list(actual), list(expected)
    if len(actual) != len(expected):
        return Comparison(False, math.inf, math.inf, f"{len(actual)} outputs vs {len(expected)}")
    worst_abs = worst_rel = 0.0
    first_bad, tol_text = "", ""
    for i, (a, e) in enumerate(zip(actual, expected)):
        a, e = torch.as_tensor(a).detach(), torch.as_tensor(e).detach()
        if a.shape != e.shape or a.dtype != e.dtype:
            what = (f"shape {tuple(a.shape)} != {tuple(e.shape)}" if a.shape != e.shape
                    else f"dtype {str(a.dtype).removeprefix('torch.')} != "
                         f"{str(e.dtype).removeprefix('torch.')}")
            return Comparison(False, math.inf, math.inf, f"output {i}: {what}", tol_text)
        t = tol(e.dtype)
        tol_text = tol_text or t.text()
        if not e.numel():
            continue
        diff, scale = _errors(a, e)
        worst_abs = max(worst_abs, diff.max().item())
        nonzero = scale > 0
        if nonzero.any():
            worst_rel = max(worst_rel, (diff[nonzero] / scale[nonzero]).max().item())
        if not first_bad and bool((diff > t.atol + t.rtol * scale).any()):
            first_bad = f"output {i}: max abs error {diff.max().item():.3g} > {t.text()}"
    return Comparison(not first_bad, worst_abs, worst_rel, first_bad, tol_text)


def max_abs_error(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference over paired outputs (inf for a structural difference)."""
    return compare(actual, expected).max_abs_err


def close(a: torch.Tensor, e: torch.Tensor, tol: ToleranceFor | None = None) -> bool:
    """Same shape and dtype, and within tolerance."""
    return compare([a], [e], tol).ok


def check_close(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor],
                where: str = "", tol: ToleranceFor | None = None) -> Comparison:
    """The :class:`Comparison` of ``actual`` with ``expected``; raises :class:`Mismatch` unless
    it is ok (``where``, e.g. the in_dims choice, goes into the message)."""
    c = compare(actual, expected, tol)
    if not c.ok:
        raise Mismatch(c.max_abs_err, f"{where}: {c.detail}" if where else c.detail, c)
    return c
