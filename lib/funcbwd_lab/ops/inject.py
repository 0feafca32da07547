"""Error injection: copies of a catalog op whose legacy formula raises at a chosen point.

Used by the reliability tests (and the hardening notebook table) to prove that every strategy
leaves torch's transform state and its own bookkeeping exactly as it found them when the
backward formula raises. The copies are registered under their own names so strategies that
cache per op (composite, traced) never confuse them with the real op.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch

from funcbwd_lab.ops import registry

#: where the formula raises: before any op, after the factory + view, inside the last op itself
#: (torch's own error from copy_), or after the last op has written its result
POINTS = ("before_first_op", "mid_formula", "in_last_op", "after_last_op")


class InjectedError(RuntimeError):
    """The exception the injected formulas raise (distinguishable from real failures)."""


class InjectedInterrupt(KeyboardInterrupt):
    """A BaseException (not an Exception), like Ctrl-C arriving inside the backward."""


def _diag_raising(point: str, exc: type[BaseException]) -> Callable[..., Any]:
    # Same shape as funcbwd_lab.ops.discussion.diag.diag_backward's non-square branch, with a failure placed at ``point``.
    def formula(grad: torch.Tensor, input_sizes, diagonal: int) -> torch.Tensor:
        if point == "before_first_op":
            raise exc("injected before the first op")
        grad_input = torch.zeros(tuple(input_sizes), dtype=grad.dtype, device=grad.device)
        diag = grad_input.diagonal(diagonal)
        if point == "mid_formula":
            raise exc("injected mid-formula")
        if point == "in_last_op":
            if exc is InjectedError:
                # A real op failure raised by the dispatcher inside copy_ (shape mismatch).
                diag.copy_(torch.cat([grad, grad], -1))
            raise exc("injected in the last op")
        diag.copy_(grad)
        raise exc("injected after the last op")

    return formula


@functools.cache
def raising_op(point: str, base_exception: bool = False) -> registry.OpSpec:
    """A copy of ``diag`` whose formula raises at ``point`` (an OpSpec not in the registry)."""
    if point not in POINTS:
        from funcbwd.errors import UnknownNameError

        raise UnknownNameError("injection point", point, POINTS)
    exc = InjectedInterrupt if base_exception else InjectedError
    spec = registry.get_op("diag")
    name = f"diag_inject_{point}{'_interrupt' if base_exception else ''}"
    raising = _diag_raising(point, exc)
    return dataclasses.replace(spec, name=name, formula=raising, handfixed=raising, group="injection")


def non_square_sample() -> registry.Sample:
    return registry.get_op("diag").sample("3x5 k=1")

