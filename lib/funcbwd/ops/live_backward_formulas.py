"""Backward helpers of today's core with an in-place fast path, re-created from C++ (part 1:
elementwise, loss, indexing and reduction helpers; linear algebra is
:mod:`funcbwd.ops.live_backward_linalg`). Registered as live ops by
:mod:`funcbwd.ops.live_backward`; the inventory is docs/live-sites.md.

Every function follows ``torch/csrc/autograd/FunctionsManual.cpp`` at pytorch/pytorch commit
002ca6715ba1ab4d2369262b487eeb30bf249911 line for line; "site k" comments mark the
isTensorSubclassLike/areAnyTensorSubclassLike decisions. The keyword-only ``fast`` argument lists
the sites (1-based, in source order within the helper) that take the in-place branch; every other
site takes its out-of-place branch. ``fast=ALL`` reproduces what core runs on plain tensors.
Only the branch of each helper that contains its site is re-created, and only real dtypes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# prod_safe_zeros_backward has no in-place site: it is the out-of-place core helper the hand-fixed
# formulas already re-create line for line, so both use that one copy.
from funcbwd.ops.handfixed import prod_safe_zeros_backward

MEAN = 1  # at::Reduction::Mean (None=0, Mean=1, Sum=2)
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


class _All:
    """A ``fast`` value containing every site: core's behaviour on plain tensors."""

    def __contains__(self, site: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL"


ALL = _All()

# Module-level so a test can swap it for a broken variant (it is not a Tensor method).
_index_put_impl_ = torch.ops.aten._index_put_impl_


def clamp_backward(grad, self, min, max, *, fast=()):
    """clamp_backward(grad, self, Tensor min, Tensor max), branch with both bounds defined."""
    zero = torch.scalar_tensor(0.0, dtype=grad.dtype, device=grad.device)
    self_ge_min = self >= min
    self_le_max = self <= max
    # site 1: areAnyTensorSubclassLike({self, min, max})
    pred = self_ge_min.logical_and_(self_le_max) if 1 in fast else self_ge_min.logical_and(self_le_max)
    return torch.where(pred, grad, zero)


def clamp_backward_min_max(grad, self, min, max, *, fast=()):
    """clamp_backward_min_max(grad, self, min, max, grad_input_mask={true, true})."""
    zero = torch.scalar_tensor(0.0, dtype=grad.dtype, device=grad.device)
    self_lt_min = self < min
    min_lt_max = min < max
    # site 1: areAnyTensorSubclassLike({self, min, max})
    pred = self_lt_min.logical_and_(min_lt_max) if 1 in fast else self_lt_min.logical_and(min_lt_max)
    grad_min = torch.where(pred, grad, zero)
    self_gt_max = self > max
    max_lt_min = max < min
    # site 2: areAnyTensorSubclassLike({self, min, max})
    pred = self_gt_max.logical_or_(max_lt_min) if 2 in fast else self_gt_max.logical_or(max_lt_min)
    grad_max = torch.where(pred, grad, zero)
    return grad_min, grad_max


def evenly_distribute_backward(grad, input, value, *, fast=()):
    """evenly_distribute_backward(grad, input, value): backward of full-reduction max/min/median.

    One areAnyTensorSubclassLike call, two decisions: site 1 picks the CPU plain-tensor branch
    (``.item()`` + ``masked_fill_``, a data-dependent control); site 2 is the in-place
    ``logical_and_`` that plain tensors reach on CUDA only (it runs here on CPU, same maths)."""
    if 1 in fast:  # site 1: !(any_tensor_subclass_like || input.is_cuda())
        mask = input.isnan() if value.isnan().item() else input == value
        return grad.new_zeros(input.shape).masked_fill_(mask, grad / mask.sum())
    input_isnan = input.isnan()
    value_isnan = value.isnan()
    # site 2: any_tensor_subclass_like
    both = input_isnan.logical_and_(value_isnan) if 2 in fast else input_isnan.logical_and(value_isnan)
    mask = (input == value).logical_or_(both)
    return mask * (grad / mask.sum())


def binary_cross_entropy_target_backward(grad, self, target, weight, reduction, *, fast=()):
    """binary_cross_entropy_target_backward(grad, self, target, weight, reduction)."""
    grad_target = torch.logit(self).neg_()
    # site 1: !areAnyTensorSubclassLike({grad})
    grad_target = grad_target.mul_(grad) if 1 in fast else grad_target * grad
    if weight is not None:
        # site 2: !isTensorSubclassLike(weight)
        grad_target = grad_target.mul_(weight) if 2 in fast else grad_target * weight
    if reduction == MEAN:
        grad_target.div_(target.numel())
    return grad_target


def binary_cross_entropy_double_backward_target(grad, grad_output, self, target, weight, reduction,
                                                *, fast=()):
    """binary_cross_entropy_double_backward_target(grad, grad_output, self, target, weight, reduction)."""
    res = -grad * grad_output
    if weight is not None:
        # site 1: isTensorSubclassLike(weight)
        res = res.mul_(weight) if 1 in fast else res.mul(weight)
    neg_self = 1 - self
    # site 2: isTensorSubclassLike(self)
    denom = neg_self.mul_(self) if 2 in fast else neg_self.mul(self)
    with torch.no_grad():  # at::NoGradGuard; default eps of binary_cross_entropy for all dtypes
        denom.clamp_min_(1e-12)
    # site 3: isTensorSubclassLike(denom)
    res = res.div_(denom) if 3 in fast else res.div(denom)
    if reduction == MEAN:
        res.div_(target.numel())
    return res


def binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight, reduction,
                                              *, fast=()):
    """binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight, reduction).

    Core also takes the out-of-place branch whenever GradMode is enabled (as under
    ``torch.func.vjp``, which differentiates with create_graph=True); ``fast`` ignores that."""
    if pos_weight is not None:
        t = pos_weight.mul(target)
        # site 1: areAnyTensorSubclassLike({input, target}) || GradMode::is_enabled()
        if 1 in fast:
            grad_input = t.add(1).sub_(target).mul_(input.sigmoid()).sub_(t)
        else:
            grad_input = t.add(1).sub(target).mul(input.sigmoid()).sub(t)
    else:
        # site 2: areAnyTensorSubclassLike({input, target}) || GradMode::is_enabled()
        grad_input = input.sigmoid().sub_(target) if 2 in fast else input.sigmoid().sub(target)
    # site 3: isTensorSubclassLike(grad) || GradMode::is_enabled()
    grad_input = grad_input.mul_(grad) if 3 in fast else grad_input.mul(grad)
    if weight is not None:
        # site 4: isTensorSubclassLike(weight) || GradMode::is_enabled()
        grad_input = grad_input.mul_(weight) if 4 in fast else grad_input.mul(weight)
    if reduction == MEAN:
        grad_input.div_(input.numel())
    return grad_input


def binary_cross_entropy_with_logits_target_backward(grad_output, self, target, weight, pos_weight,
                                                     reduction, *, fast=()):
    """binary_cross_entropy_with_logits_target_backward(grad_output, self, target, weight, pos_weight, reduction)."""
    if pos_weight is not None:
        # site 1: areAnyTensorSubclassLike({pos_weight, grad_output})
        if 1 in fast:
            grad_target = (F.logsigmoid(-self).sub_(F.logsigmoid(self).mul_(pos_weight))
                           .mul_(grad_output))
        else:
            grad_target = F.logsigmoid(-self).sub(F.logsigmoid(self).mul(pos_weight)).mul(grad_output)
    else:
        grad_target = -self * grad_output
    if weight is not None:
        # site 2: isTensorSubclassLike(weight)
        grad_target = grad_target.mul_(weight) if 2 in fast else grad_target.mul(weight)
    if reduction == MEAN:
        grad_target.div_(target.numel())
    return grad_target


def binary_cross_entropy_double_backward(grad_output, grad, input, target, weight, reduction,
                                         *, fast=()):
    """binary_cross_entropy_double_backward(grad_output, grad, input, target, weight, reduction)."""
    eps = 1e-12
    inp_pl_eps = input + eps
    one_m_inp_pl_eps = 1 - input + eps
    gI = (input * input - 2 * input * target + target) / (inp_pl_eps.pow(2) * one_m_inp_pl_eps.pow(2))
    # site 1: !areAnyTensorSubclassLike({gI, grad}) -> gI *= grad * grad_output
    gI = gI.mul_(grad * grad_output) if 1 in fast else gI * (grad * grad_output)
    if weight is not None:
        # site 2: !isTensorSubclassLike(weight) -> gI *= weight
        gI = gI.mul_(weight) if 2 in fast else gI.mul(weight)
    if reduction == MEAN:
        return gI / input.numel()
    return gI


def binary_cross_entropy_double_backward_grad_output(grad, input, target, weight, reduction, *, fast=()):
    """binary_cross_entropy_double_backward_grad_output(grad, input, target, weight, reduction)."""
    eps = 1e-12
    ggO = (input - target) / ((input + eps) * (1 - input + eps))
    # site 1: !areAnyTensorSubclassLike({ggO, grad}) -> ggO *= grad
    ggO = ggO.mul_(grad) if 1 in fast else ggO * grad
    if weight is not None:
        # site 2: !isTensorSubclassLike(weight) -> ggO *= weight
        ggO = ggO.mul_(weight) if 2 in fast else ggO.mul(weight)
    if reduction == MEAN:
        return ggO / input.numel()
    return ggO


def index_backward(zeros_like_self, grad, *indices, fast=()):
    """index_backward(zeros_like_self, indices, grad); Python needs the indices last."""
    # site 1: areAnyTensorSubclassLike({zeros_like_self, grad}) || areAnyOptionalTensorSubclassLike(indices)
    if 1 in fast:
        return _index_put_impl_(zeros_like_self, list(indices), grad, True, True)
    return zeros_like_self.index_put(indices, grad, True)



def take_backward(grad, self, indices, *, fast=()):
    """take_backward(grad, self, indices)."""
    grad_self = torch.zeros_like(self)
    # site 1: areAnyTensorSubclassLike({grad, indices})
    if 1 not in fast:
        return grad_self.put(indices, grad, True)
    return grad_self.put_(indices, grad, True)


# ------------------------------------------------------------------ data-dependent controls
def masked_fill_backward(grad, mask, *, fast=()):
    """masked_fill_backward(grad, mask): the grad of masked_fill's Tensor ``value``."""
    # site 1: areAnyTensorSubclassLike({grad, mask}); masked_select's shape is data-dependent
    if 1 in fast:
        return grad.masked_select(mask).sum()
    return torch.where(mask, grad, 0).sum()


def prod_backward(grad, input, result, *, fast=()):
    """prod_backward(grad, input, result): full reduction (site 1: ``nonzero``)."""
    if input.dim() == 0:
        return grad
    # site 1: input.is_meta() || isTensorSubclassLike(input)
    if 1 not in fast:
        return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)
    zero_idx = (input == 0).nonzero()
    if zero_idx.numel() == 0:
        return grad * (result / input).conj()
    elif not torch.is_grad_enabled() and zero_idx.size(0) > 1:
        return torch.zeros_like(input)
    return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)


def prod_backward_dim(grad, input, result, dim, keepdim, *, fast=()):
    """prod_backward(grad, input, result, dim, keepdim): the second overload (site 2: ``.item()``)."""
    if input.dim() == 0:
        return grad
    dim = dim % input.dim()
    if not keepdim:
        grad = grad.unsqueeze(dim)
        result = result.unsqueeze(dim)
    # site 2: input.is_meta() || isTensorSubclassLike(input)
    if 2 not in fast:
        return prod_safe_zeros_backward(grad, input, dim)
    zero_mask = input == 0
    slice_zero_count = zero_mask.sum(dim, True)
    total_zeros = slice_zero_count.sum().item()
    if total_zeros == 0:
        return grad * (result / input).conj()
    return prod_safe_zeros_backward(grad, input, dim)


