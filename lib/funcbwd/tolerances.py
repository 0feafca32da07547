"""How close is close: one tolerance table per dtype, and reviewed loosenings with a reason each.

A computed result passes when every element satisfies ``|actual - expected| <= atol + rtol *
|expected|`` (NaN equals NaN), with ``(atol, rtol)`` for the expected output's dtype:

* :data:`DTYPE_DEFAULTS` are ``torch.testing.assert_close``'s defaults (float32: atol 1e-5,
  rtol 1.3e-6, about 10 ulps; float16, bfloat16 likewise) except for float64 and complex128:
  1e-9 / 1e-9 instead of 1e-7, because a float64 cell exists to catch a computation done in
  float32 (a graph or cache of the wrong dtype), whose rounding (up to 6e-8 relative) passes
  1e-7; float64 rounding, even amplified a thousandfold, stays far below 1e-9. A vmapped result
  and a per-sample loop run the same kernels in the same precision, so they agree to a few ulps
  unless something is wrong. Integer and bool outputs compare exactly.
* :data:`LOOSENINGS` are exceptions: each names the ops, scenarios and dtypes it covers, the
  tolerance, and *why*. For functorch's compositions (the OpInfo sweep) they are upstream's own
  float32 tolerances for the same tests, transcribed with their source line
  (``@toleranceOverride`` and ``tol1``/``tol2`` in ``test/functorch/test_ops.py``, pytorch/pytorch
  @ 28a580b0; CPU entries only): the batched and the per-sample computation of a composition of
  torch's own ops differ by float32 roundoff in reductions, which upstream allows as 1e-4
  (a layer norm's gradient of a one-element input, exact 0, comes out 1.2e-4 either way).

One table for the whole workbench: the matrix, the OpInfo sweep, ``doctor`` and the bench checks
all call :func:`tolerance`.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import torch

#: (atol, rtol) per dtype: torch.testing.assert_close's defaults, float64/complex128 stricter
DTYPE_DEFAULTS: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
    torch.float32: (1e-5, 1.3e-6),
    torch.float64: (1e-9, 1e-9),
    torch.complex32: (1e-5, 1e-3),
    torch.complex64: (1e-5, 1.3e-6),
    torch.complex128: (1e-9, 1e-9),
}
EXACT = (0.0, 0.0)
ALL = "*"


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """``atol``/``rtol`` for one dtype, and where they come from (``source``)."""

    atol: float
    rtol: float
    source: str = "default"

    def allows(self, abs_err: float, scale: float) -> bool:
        return abs_err <= self.atol + self.rtol * scale

    def text(self) -> str:
        return f"atol={self.atol:g} rtol={self.rtol:g} ({self.source})"


@dataclasses.dataclass(frozen=True)
class Loosening:
    """A reviewed exception to :data:`DTYPE_DEFAULTS` (``ops``/``scenarios``/``dtypes`` are
    names, or ``ALL``)."""

    ops: tuple[str, ...] | str
    scenarios: tuple[str, ...] | str
    dtypes: tuple[torch.dtype, ...]
    atol: float
    rtol: float
    why: str

    def covers(self, op: str | None, scenario: str | None, dtype: torch.dtype) -> bool:
        return (dtype in self.dtypes and _matches(self.ops, op) and _matches(self.scenarios, scenario))


def _matches(names: tuple[str, ...] | str, name: str | None) -> bool:
    return names == ALL or (name is not None and name in names)


_UPSTREAM = "upstream's float32 tolerance for test_{}{} (test/functorch/test_ops.py line {})"
#: (composition, op id or ALL, atol, rtol, upstream line): float32, CPU
_UPSTREAM_FLOAT32 = [
    ("vmapvjpvjp", "linalg.svd", 1e-3, 5e-4, 1032), ("vmapvjpvjp", "linalg.lu_factor", 2e-3, 2e-2, 1033),
    ("vmapvjpvjp", "svd", 1e-3, 5e-4, 1034), ("vmapvjpvjp", "matrix_exp", 1e-3, 5e-4, 1035),
    ("vmapvjp", "linalg.householder_product", 1e-4, 1e-4, 1177),
    ("vmapjvpall", "linalg.householder_product", 2e-4, 9e-3, 1303),
    ("vmapjvpvjp", "linalg.svd", 5e-4, 5e-4, 2033), ("vmapjvpvjp", "linalg.householder_product", 5e-3, 5e-3, 2034),
    ("vmapjvpvjp", "linalg.multi_dot", 5e-4, 5e-4, 2038), ("vmapjvpvjp", "linalg.pinv.hermitian", 5e-4, 5e-4, 2039),
    ("vmapjvpvjp", "svd", 5e-4, 5e-4, 2042), ("vmapjvpvjp", "matrix_exp", 5e-4, 5e-4, 2043),
    ("vmapvjpvjp", ALL, 1e-4, 1e-4, 1027), ("vmapvjp", ALL, 1e-4, 1e-4, 1164),
    ("vmapjvpall", ALL, 1e-4, 1e-4, 1293), ("vmapjvpvjp", ALL, 1e-4, 1e-4, 2028),
]

#: Reviewed loosenings, most specific first (the first that covers a cell wins).
LOOSENINGS: list[Loosening] = [
    Loosening(ALL if op == ALL else (op,), (comp,), (torch.float32,), atol, rtol,
              _UPSTREAM.format(comp, "" if op == ALL else f", {op}", line))
    for comp, op, atol, rtol, line in _UPSTREAM_FLOAT32]


def tolerance(dtype: torch.dtype, op: str | None = None, scenario: str | None = None,
              loosenings: Iterable[Loosening] | None = None) -> Tolerance:
    """The tolerance for an output of ``dtype`` in ``op``'s ``scenario`` cell."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return Tolerance(*EXACT, "exact: integer/bool output")
    for entry in (LOOSENINGS if loosenings is None else loosenings):
        if entry.covers(op, scenario, dtype):
            return Tolerance(entry.atol, entry.rtol, f"loosened: {entry.why}")
    atol, rtol = DTYPE_DEFAULTS[dtype]
    return Tolerance(atol, rtol, f"{str(dtype).removeprefix('torch.')} default")
