"""The one comparison every computed cell uses: actual results against the per-sample loop.

One tolerance (:data:`ATOL`, :data:`RTOL`) for the whole workbench; :func:`check_close` raises
:class:`Mismatch` (carrying the max abs error) on the first output that differs in shape or value.
"""

from __future__ import annotations

from typing import Sequence

import torch

ATOL = RTOL = 1e-4


class Mismatch(AssertionError):
    """A result differs from the per-sample loop; ``max_abs_err`` is inf for a shape mismatch."""

    def __init__(self, max_abs_err: float, where: str):
        self.max_abs_err = max_abs_err
        super().__init__(f"max abs error {max_abs_err:.3g} vs the per-sample loop ({where})")


def max_abs_error(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference over paired outputs (inf if any pair differs in shape)."""
    worst = 0.0
    for a, e in zip(actual, expected):
        a, e = torch.as_tensor(a).detach(), torch.as_tensor(e).detach()
        if a.shape != e.shape:
            return float("inf")
        if a.numel():
            worst = max(worst, (a.double() - e.double()).abs().max().item())
    return worst


def close(a: torch.Tensor, e: torch.Tensor) -> bool:
    """Same shape and allclose at the workbench tolerance (NaN equals NaN)."""
    a, e = torch.as_tensor(a).detach(), torch.as_tensor(e).detach()
    return a.shape == e.shape and torch.allclose(a.double(), e.double(), atol=ATOL, rtol=RTOL,
                                                 equal_nan=True)


def check_close(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor],
                where: str = "") -> None:
    """Raise :class:`Mismatch` unless every output is :func:`close` to its expected value;
    ``where`` (e.g. the in_dims choice) goes into the message."""
    if len(actual) != len(expected):
        raise Mismatch(float("inf"), f"{len(actual)} outputs vs {len(expected)}")
    for a, e in zip(actual, expected):
        if not close(a, e):
            raise Mismatch(max_abs_error([a], [e]), where or "shape/values")
