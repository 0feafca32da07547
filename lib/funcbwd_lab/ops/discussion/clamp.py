"""clamp with Tensor min/max: its legacy backward, the modern one right below it, and its
registration.

* **Legacy** (PyTorch ~1.10/1.11): ``torch/csrc/autograd/FunctionsManual.cpp``
  ``clamp_backward(grad, self, min, max)`` and ``clamp_backward_min_max``:
  ``where((self >= min).logical_and_(self <= max), grad, 0)``; the min/max grads used
  ``(self < min).logical_and_(min < max)`` and ``(self > max).logical_or_(max < min)`` (those lines
  are reconstructed; functorch#247 shows the ``logical_or_`` error). It fails only under mixed
  batching: an unbatched in-place target receiving a batched operand (only ``max`` batched).
* **Fixed** by core pytorch#69534 (which introduced ``isTensorSubclassLike``).
* **Modern**: the subclass-like branches, ``self_ge_min.logical_and(self_le_max)``,
  ``self_lt_min.logical_and(min_lt_max)``, ``self_gt_max.logical_or(max_lt_min)``, each fed to
  ``where(pred, grad, zero)``.

The lesson on one screen: ``logical_and_`` / ``logical_or_`` become ``logical_and`` /
``logical_or``. Scalar min/max arrive as 0-dim tensors; ``min_max_grads`` says whether min/max
need grads.
"""

from __future__ import annotations

from typing import Any

import torch

from funcbwd_lab.ops.helpers import randn, zero_if_none
from funcbwd_lab.ops.registry import Args, OpSpec, Sample, register


# FunctionsManual.cpp clamp_backward(grad, self, min, max) and clamp_backward_min_max (the
# min/max lines are reconstructed; functorch#247 shows the logical_or_ error). Fixed by core
# pytorch#69534. Fails only when the in-place target is unbatched and its operand batched.
# Scalar min/max arrive as 0-dim tensors; ``min_max_grads`` says whether min/max need grads.
def clamp_backward(
    grad: torch.Tensor,
    self: torch.Tensor,
    min: torch.Tensor | None,
    max: torch.Tensor | None,
    min_max_grads: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    zero = torch.zeros((), dtype=grad.dtype, device=grad.device)  # at::scalar_tensor(0., ...)
    if max is not None and min is not None:
        grad_self = torch.where((self >= min).logical_and_(self <= max), grad, zero)
    elif min is not None:
        grad_self = torch.where(self >= min, grad, zero)
    elif max is not None:
        grad_self = torch.where(self <= max, grad, zero)
    else:
        grad_self = grad
    grad_min = grad_max = None
    if min_max_grads and min is not None and max is not None:
        # "If min > max, min has no gradient"
        self_lt_min = self < min
        min_lt_max = min < max
        grad_min = torch.where(self_lt_min.logical_and_(min_lt_max), grad, zero)
        self_gt_max = self > max
        max_lt_min = max < min
        grad_max = torch.where(self_gt_max.logical_or_(max_lt_min), grad, zero)
        grad_min = grad_min.sum_to_size(min.shape)
        grad_max = grad_max.sum_to_size(max.shape)
    return grad_self, grad_min, grad_max


# torch/csrc/autograd/FunctionsManual.cpp clamp_backward (Tensor min/max overload) and
# clamp_backward_min_max: the subclass-like branches, self_ge_min.logical_and(self_le_max),
# self_lt_min.logical_and(min_lt_max), self_gt_max.logical_or(max_lt_min), each fed to
# where(pred, grad, zero) (pytorch#69534). The Scalar overload still calls logical_and_, which is
# safe there (a Scalar is never batched); scalar min/max arrive here as 0-dim tensors and take the
# same out-of-place path. sum_to_size stands for the engine's reduction, as in the legacy formula.
def clamp_backward_modern(
    grad: torch.Tensor,
    self: torch.Tensor,
    min: torch.Tensor | None,
    max: torch.Tensor | None,
    min_max_grads: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    zero = torch.zeros((), dtype=grad.dtype, device=grad.device)  # at::scalar_tensor(0., ...)
    if max is not None and min is not None:
        grad_self = torch.where((self >= min).logical_and(self <= max), grad, zero)
    elif min is not None:
        grad_self = torch.where(self >= min, grad, zero)
    elif max is not None:
        grad_self = torch.where(self <= max, grad, zero)
    else:
        grad_self = grad
    grad_min = grad_max = None
    if min_max_grads and min is not None and max is not None:
        # "If min > max, min has no gradient"
        grad_min = torch.where((self < min).logical_and(min < max), grad, zero)
        grad_max = torch.where((self > max).logical_or(max < min), grad, zero)
        grad_min = grad_min.sum_to_size(min.shape)
        grad_max = grad_max.sum_to_size(max.shape)
    return grad_self, grad_min, grad_max


def _as_tensor(v: Any, like: torch.Tensor) -> torch.Tensor | None:
    if v is None or isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype)


def _clamp_args(a: Args, o: tuple, g: tuple) -> Args:
    x = a[0]
    lo, hi = (a[1] if len(a) > 1 else None), (a[2] if len(a) > 2 else None)
    tensors = isinstance(lo, torch.Tensor) and isinstance(hi, torch.Tensor)
    return (g[0], x, _as_tensor(lo, x), _as_tensor(hi, x), tensors)


def _clamp_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    x, lo, hi = a[0], _as_tensor(a[1], a[0]), _as_tensor(a[2], a[0])
    zero = torch.zeros((), dtype=x.dtype)
    out = torch.where((x >= lo) & (x <= hi), zero_if_none(t[0], x), zero)
    if isinstance(a[1], torch.Tensor):
        out = out + torch.where((x < lo) & (lo < hi), zero_if_none(t[1], lo), zero)
        out = out + torch.where((x > hi) | (hi < lo), zero_if_none(t[2], hi), zero)
    return (out,)


register(OpSpec(
    name="clamp",
    torch_op=torch.clamp,
    formula=clamp_backward,
    formula_args=_clamp_args,
    grad_positions=(0, 1, 2),
    source="FunctionsManual.cpp clamp_backward / clamp_backward_min_max: (self >= min).logical_and_(self <= max)",
    fixed_by="core pytorch#69534",
    schema="(Tensor grad, Tensor self, Tensor? min, Tensor? max, bool min_max_grads) -> (Tensor, Tensor?, Tensor?)",
    make_samples=lambda: [
        Sample("Tensor min/max (max broadcast)",
               (randn(3, 4, seed=61), randn(3, 4, seed=62) - 0.5, randn(4, seed=63) + 0.5), (0, 1, 2)),
        Sample("scalar min/max", (randn(3, 4, seed=64), -0.5, 0.5)),
    ],
    jvp=_clamp_jvp,
    notes="Fails only under mixed batching: an unbatched in-place target (self >= min) receiving a "
    "batched operand (self <= max when only max is batched).",
    handfixed=clamp_backward_modern,
))
