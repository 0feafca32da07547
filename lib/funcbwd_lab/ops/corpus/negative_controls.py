"""Negative controls: norm_inf, copysign, cumprod, narrow (group ``negative_control``).

Formulas functionalization must leave alone or cannot help:

* **safe in-place writes**: ``norm_inf`` and ``copysign`` call ``masked_fill_`` on a tensor derived
  from ``grad`` (or the primal outputs), batched whenever anything is; their modern formulas,
  right below each, are the same writes out of place;
* **data-dependent control flow**: ``cumprod`` and ``narrow`` depend on ``.item()``, which no
  functionalization can remove. Neither has a modern formula: core's ``cumprod_backward`` still
  branches on ``(input == 0).any().item()`` for plain tensors (and is long), and ``start.item()``
  is inherent to ``narrow.Tensor``; the handfixed strategy reports them not applicable.

Registered in this order, last of the corpus.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.corpus.copy_into_view import slice_backward
from funcbwd_lab.ops.helpers import arg_tangent as _t
from funcbwd_lab.ops.helpers import randn, shape, zeros_like_grad
from funcbwd_lab.ops.registry import Args, OpSpec, Sample, register


# ------------------------------------------------------------------------------ norm_inf
# FunctionsManual.cpp norm_backward(grad, self, p, norm) for p = inf (full reduction):
# "scale_v.masked_fill_(norm == 0, 0)" writes into grad / nb_max, which is batched whenever
# anything is: safe (a negative control for the in-place detector).
def norm_inf_backward(grad: torch.Tensor, self: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    is_eq_max = (self.abs() == norm).logical_or_(
        self.isnan().logical_and_(norm.isnan())).type_as(norm)
    self_scaled = self.sign() * is_eq_max
    nb_max = is_eq_max.count_nonzero()
    scale_v = grad / nb_max
    scale_v.masked_fill_(norm == 0, 0)
    return self_scaled * scale_v


# torch/csrc/autograd/FunctionsManual.cpp norm_backward, p = inf: "Derivative of
# amax(abs(self), dim, keepdim) but respecting nans": mask = self.abs() == norm | isnan(self.abs());
# self.sgn() * ((grad / mask.sum(dim, true)) * mask); full reduction here, so mask.sum().
def norm_inf_backward_modern(grad: torch.Tensor, self: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    self_abs = self.abs()
    mask = self_abs.eq(norm).logical_or(self_abs.isnan())
    return self.sgn() * ((grad / mask.sum()) * mask)


def _norm_inf_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    mask = a[0].abs() == o[0]
    return ((a[0].sign() * mask * _t(a, t)).sum() / mask.sum(),)


def _with_max_ties(seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed).clamp(-1.5, 1.5)
    x.view(-1)[[1, 6]] = torch.tensor([2.0, -2.0])
    return x


register(OpSpec(
    name="norm_inf",
    torch_op=lambda x: torch.linalg.vector_norm(x, float("inf")),
    formula=norm_inf_backward,
    formula_args=lambda a, o, g: (g[0], a[0], o[0]),
    grad_positions=(0,),
    source="FunctionsManual.cpp norm_backward (p=inf): scale_v.masked_fill_(norm == 0, 0), scale_v = grad / nb_max",
    fixed_by="none needed (the in-place target derives from grad)",
    schema="(Tensor grad, Tensor self, Tensor norm) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 distinct", (randn(3, 4, seed=261),)),
        Sample("3x4 tied max |x|", (_with_max_ties(262),)),
    ],
    jvp=_norm_inf_jvp,
    group="negative_control",
    notes="Safe in place: masked_fill_ writes into grad / nb_max, batched whenever anything is.",
    handfixed=norm_inf_backward_modern,
))


# ------------------------------------------------------------------------------ copysign
# FunctionsManual.cpp copysign_tensor_self_backward(grad, self, result): "ratio.masked_fill_(self
# == 0, 0)" on result / self (batched whenever self or other is): safe. other's grad is zeros_like.
def copysign_backward(grad: torch.Tensor, self: torch.Tensor, other: torch.Tensor,
                      result: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ratio = result / self
    ratio.masked_fill_(self == 0, 0)
    return grad * ratio, torch.zeros_like(other)


# torch/csrc/autograd/FunctionsManual.cpp copysign_tensor_self_backward ("ratio.masked_fill_(self
# == 0, 0)" on the fresh result / self, safe in place in core); out of place here. derivatives.yaml
# copysign.Tensor "other: zeros_like(other)".
def copysign_backward_modern(grad: torch.Tensor, self: torch.Tensor, other: torch.Tensor,
                             result: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ratio = (result / self).masked_fill(self == 0, 0)
    return grad * ratio, torch.zeros_like(other)


def _with_zero(seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    x.view(-1)[2] = 0.0
    return x


def _copysign_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    ratio = (o[0] / a[0]).masked_fill(a[0] == 0, 0)
    return (_t(a, t) * ratio,)


register(OpSpec(
    name="copysign",
    torch_op=torch.copysign,
    formula=copysign_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1], o[0]),
    grad_positions=(0, 1),
    source="FunctionsManual.cpp copysign_tensor_self_backward: ratio = result / self; ratio.masked_fill_(self == 0, 0)",
    fixed_by="none needed (the in-place target derives from the primal outputs)",
    schema="(Tensor grad, Tensor self, Tensor other, Tensor result) -> (Tensor, Tensor)",
    make_samples=lambda: [Sample("3x4, other (4,)", (randn(3, 4, seed=271), randn(4, seed=272)), (0, 1))],
    jvp=_copysign_jvp,
    group="negative_control",
    notes="Safe in place: ratio is batched whenever self or other is, and the mask only when self is. "
    "The sample has no zero in self: at self == 0 the double backward through result / self is NaN "
    "for every strategy (torch's own included), which the NaN-unequal comparison reports as a mismatch.",
    handfixed=copysign_backward_modern,
))


# ------------------------------------------------------------------------------ cumprod (no modern formula)
def _reversed_cumsum(w: torch.Tensor, dim: int) -> torch.Tensor:
    return w.flip(dim).cumsum(dim).flip(dim)


# FunctionsManual.cpp cumprod_backward(grad, input, dim, output): ".item()" on (input == 0).any()
# picks the branch (data-dependent control flow: a negative control). The zero branch here is the
# legacy O(n^2) one (used when GradMode is on), itself in place: zeros + select(dim, k).copy_.
def cumprod_backward(grad: torch.Tensor, input: torch.Tensor, dim: int,
                     output: torch.Tensor) -> torch.Tensor:
    if input.dim() == 0 or input.numel() == 0:
        return grad
    dim = dim % input.dim()
    dim_size = input.size(dim)
    if dim_size == 1:
        return grad
    w = output * grad
    if not (input == 0).any().item():
        return _reversed_cumsum(w, dim).div(input)
    ones_size = list(input.shape)
    ones_size[dim] = 1
    ones = torch.ones(1, dtype=grad.dtype, device=grad.device).expand(ones_size)
    grad_input = zeros_like_grad(input.shape, grad)
    for k in range(dim_size):
        if k == 0:
            prods_from_k_plus_1 = torch.cumprod(input.narrow(dim, 1, dim_size - 1), dim)
            omitted = torch.cat([ones, prods_from_k_plus_1], dim)
        elif k == dim_size - 1:
            omitted = torch.prod(input.narrow(dim, 0, k), dim, True)
        else:
            prods_until_k = torch.prod(input.narrow(dim, 0, k), dim, True)
            prods_from_k_plus_1 = torch.cumprod(input.narrow(dim, k + 1, dim_size - k - 1), dim)
            omitted = prods_until_k.expand_as(prods_from_k_plus_1) * prods_from_k_plus_1
            omitted = torch.cat([prods_until_k, omitted], dim)
        grad_input.select(dim, k).copy_(torch.sum(grad.narrow(dim, k, dim_size - k) * omitted, dim))
    return grad_input


register(OpSpec(
    name="cumprod",
    torch_op=torch.cumprod,
    formula=cumprod_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1], o[0]),
    grad_positions=(0,),
    source="FunctionsManual.cpp cumprod_backward: (input == 0).any().item() picks the branch; the "
    "O(n^2) zero branch does zeros + select(dim, k).copy_",
    fixed_by="core: subclass-like branches in cumprod_backward",
    schema="(Tensor grad, Tensor input, int dim, Tensor output) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 dim=1 no zeros", (randn(3, 4, seed=281), 1)),
        Sample("3x4 dim=1 one zero", (_with_zero(282), 1)),
    ],
    jvp=None,
    group="negative_control",
    notes=".item() is data-dependent control flow: batching the input fails under every strategy. "
    "The zero branch also writes in place (a fixable failure under cotangent batching).",
))


# ------------------------------------------------------------------------------ narrow.Tensor (no modern formula)
# narrow.Tensor(self, dim, Tensor start, length) is CompositeImplicit: "start.item()", then
# slice, whose legacy backward is slice_backward (zeros + slice().copy_). Negative control: the
# .item() on a batched start fails in any strategy (vmap: no rule for narrow.Tensor).
def narrow_tensor_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                           start: torch.Tensor, length: int) -> torch.Tensor:
    s = int(start.item())
    return slice_backward(grad, input_sizes, dim, s, s + length, 1)


register(OpSpec(
    name="narrow",
    torch_op=torch.narrow,
    formula=narrow_tensor_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1], a[2], a[3]),
    grad_positions=(0,),
    source="narrow.Tensor (CompositeImplicit): start.item(), then slice; slice_backward zeros + slice().copy_",
    fixed_by="none for the .item() (vmap has no rule for narrow.Tensor)",
    schema="(Tensor grad, SymInt[] input_sizes, int dim, Tensor start, int length) -> Tensor",
    make_samples=lambda: [Sample("3x5 dim=1 start=tensor(1) length=3", (randn(3, 5, seed=291), 1, torch.tensor(1), 3))],
    jvp=lambda a, o, t: (torch.narrow(_t(a, t), a[1], a[2], a[3]),),
    group="negative_control",
    notes="A batched start tensor needs .item(): fails under every strategy, builtin included. "
    "Cotangent batching hits the slice_backward copy_ (fixable).",
))
