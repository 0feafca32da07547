"""Extended corpus, in-place multiply: binary_cross_entropy_with_logits (its input grad).

* **Legacy** (PyTorch ~1.10/1.11): ``aten/src/ATen/native/Loss.cpp``
  ``binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight,
  reduction)``: ``(input.sigmoid() - target).mul_(grad)`` and ``grad_input.mul_(weight)``; the
  target of ``mul_`` is unbatched when only ``grad`` (or only ``weight``) is batched.
* **Fixed** by a functorch hack, then core (out-of-place branch for subclass-like tensors).
* **Modern**: ``torch/csrc/autograd/FunctionsManual.cpp``
  ``binary_cross_entropy_with_logits_backward``'s branch for subclass-like tensors or grad mode on,
  all out of place.

Registered in group ``extended`` after :mod:`funcbwd_lab.ops.corpus.fill_in_place`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from funcbwd_lab.ops.helpers import arg_tangent as _t
from funcbwd_lab.ops.helpers import randn
from funcbwd_lab.ops.registry import Args, OpSpec, Sample, register

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction::{None, Mean, Sum}


# Loss.cpp binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight,
# reduction): "(input.sigmoid() - target).mul_(grad)" and "grad_input.mul_(weight)".
# Fixed by a functorch hack, then core (out-of-place for subclass-like tensors).
def bce_with_logits_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                             weight: torch.Tensor | None, pos_weight: torch.Tensor | None,
                             reduction: int) -> torch.Tensor:
    if pos_weight is not None:
        t = pos_weight.mul(target)
        grad_input = t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t).mul_(grad)
    else:
        grad_input = (input.sigmoid() - target).mul_(grad)
    if weight is not None:
        grad_input.mul_(weight)
    if reduction == REDUCTIONS["mean"]:
        return grad_input / input.numel()
    return grad_input


# torch/csrc/autograd/FunctionsManual.cpp binary_cross_entropy_with_logits_backward: the branch
# taken for subclass-like tensors or with grad mode on, all out of place. Core's final
# grad_input.div_(numel) (reduction Mean) writes into a tensor derived from grad; out of place here.
def bce_with_logits_backward_modern(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
                                    weight: torch.Tensor | None, pos_weight: torch.Tensor | None,
                                    reduction: int) -> torch.Tensor:
    if pos_weight is not None:
        t = pos_weight.mul(target)
        grad_input = t.add(1).sub(target).mul(input.sigmoid()).sub(t)
    else:
        grad_input = input.sigmoid().sub(target)
    grad_input = grad_input.mul(grad)
    if weight is not None:
        grad_input = grad_input.mul(weight)
    if reduction == REDUCTIONS["mean"]:
        grad_input = grad_input.div(input.numel())
    return grad_input


def _bce(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: str) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(x, target, weight, reduction=reduction)


def _bce_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    x, target, weight, reduction = a
    d = (x.sigmoid() - target) * (1.0 if weight is None else weight) * _t(a, t)
    return (d if reduction == "none" else d.sum() / (x.numel() if reduction == "mean" else 1),)


def _target(seed: int) -> torch.Tensor:
    return torch.rand(3, 4, generator=torch.Generator().manual_seed(seed))


register(OpSpec(
    name="binary_cross_entropy_with_logits",
    torch_op=_bce,
    formula=bce_with_logits_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2], None, REDUCTIONS[a[3]]),
    grad_positions=(0,),
    source="Loss.cpp binary_cross_entropy_with_logits_backward: (input.sigmoid() - target).mul_(grad); grad_input.mul_(weight)",
    fixed_by="functorch hack, then core (out-of-place branch)",
    schema="(Tensor grad, Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, int reduction) -> Tensor",
    make_samples=lambda: [
        Sample("weight (4,), reduction=none", (randn(3, 4, seed=251), _target(252), randn(4, seed=253).abs(), "none")),
        Sample("no weight, reduction=mean", (randn(3, 4, seed=254), _target(255), None, "mean")),
    ],
    jvp=_bce_jvp,
    group="extended",
    notes="Input grad only (the target grad did not exist then).",
    handfixed=bce_with_logits_backward_modern,
))
