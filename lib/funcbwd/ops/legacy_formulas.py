"""Python re-creations of the historical (PyTorch ~1.10/1.11, early 2022) in-place backward formulas.

Each function follows the C++ line for line, including the in-place op that made it fail under
``vmap(vjp(f))``: a factory makes an *unbatched* tensor and an in-place op writes the batched
``grad`` into it. The comment above each formula names the C++ file/helper and the PR that later
fixed it in core (see docs/legacy-formulas.md).

Formulas are plain functions of tensors and Python scalars, returning a tensor or a tuple of
tensors: the unit every strategy runs, functionalizes, traces or registers as an operator.
"""

from __future__ import annotations

from typing import Sequence

import torch


def _zeros(sizes: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    # at::zeros(sizes, grad.options()): the unbatched factory behind every failure.
    return torch.zeros(tuple(sizes), dtype=like.dtype, device=like.device)


# ReduceOps.cpp value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim)
# (topk, sort and mode; kthvalue and max/min/median with dim use it too).
# Fixed by functorch f7ad909b (out-of-place scatter) and core pytorch#76731.
def value_selecting_reduction_backward(
    grad: torch.Tensor, dim: int, indices: torch.Tensor, sizes: Sequence[int], keepdim: bool
) -> torch.Tensor:
    if not keepdim and len(sizes) > 0:
        grad = grad.unsqueeze(dim)
        indices = indices.unsqueeze(dim)
    return _zeros(sizes, grad).scatter_(dim, indices, grad)


# TensorAdvancedIndexing.cpp index_select_backward(grad, self_sizes, dim, index).
# Fixed by core pytorch#77578 (grad.new_zeros, out-of-place index_add for subclass-like index).
def index_select_backward(
    grad: torch.Tensor, self_sizes: Sequence[int], dim: int, index: torch.Tensor
) -> torch.Tensor:
    return _zeros(self_sizes, grad).index_add_(dim, index, grad)


# TensorShape.cpp diag_backward(grad, input_sizes, diagonal).
# Fixed by functorch's diagonal_backward batch rule; core pytorch#87180 made diag composite.
def diag_backward(grad: torch.Tensor, input_sizes: Sequence[int], diagonal: int) -> torch.Tensor:
    if len(input_sizes) == 1 or input_sizes[0] == input_sizes[1]:
        return grad.diag(diagonal)
    # Input was a matrix but was not square
    grad_input = _zeros(input_sizes, grad)
    diag = grad_input.diagonal(diagonal)
    diag.copy_(grad)
    return grad_input


# TensorAdvancedIndexing.cpp masked_select_backward(grad, input, mask).
# Fixed by core pytorch#76794 (out-of-place masked_scatter branch). The final sum_to_size stands
# for the autograd engine's reduction of a broadcast grad to the input's shape.
def masked_select_backward(
    grad: torch.Tensor, input: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    # "as an optimization, we call the in-place variant of masked_scatter", which does not
    # broadcast its LHS, so broadcast explicitly first.
    result = torch.zeros_like(
        input.expand(torch.broadcast_shapes(input.shape, mask.shape)),
        memory_format=torch.preserve_format,
    )
    return result.masked_scatter_(mask, grad).sum_to_size(input.shape)


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


# FunctionsManual.cpp prod_safe_zeros_backward(grad, inp, dim): exclusive cumprods from both
# ends; safe with zeros in the input.
def prod_safe_zeros_backward(grad: torch.Tensor, inp: torch.Tensor, dim: int) -> torch.Tensor:
    if inp.numel() == 0:
        return grad.expand_as(inp)
    ones_size = list(inp.shape)
    ones_size[dim] = 1
    ones = torch.ones(ones_size, dtype=grad.dtype, device=grad.device)
    exclusive_normal_nocp = torch.cat([ones, inp.narrow(dim, 0, inp.size(dim) - 1)], dim)
    exclusive_normal = exclusive_normal_nocp.cumprod(dim)
    narrow_reverse = inp.narrow(dim, 1, inp.size(dim) - 1).flip(dim)
    exclusive_reverse_nocp = torch.cat([ones, narrow_reverse], dim)
    exclusive_reverse = exclusive_reverse_nocp.cumprod(dim).flip(dim)
    return grad * (exclusive_normal * exclusive_reverse).conj()


# FunctionsManual.cpp prod_backward(grad, input, result) (full reduction). No in-place op:
# (input == 0).nonzero() and .item() drive control flow, so it is a *negative control* that
# functionalization cannot fix. Fixed by core pytorch#81969 (always the safe path for
# subclass-like input).
def prod_backward(grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if input.dim() == 0:
        return grad
    zero_idx = (input == 0).nonzero()
    if zero_idx.numel() == 0:
        return grad * (result / input).conj()
    elif zero_idx.size(0) > 1:
        return torch.zeros_like(input)
    else:
        return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)


# FunctionsManual.cpp prod_backward(grad, input, result, dim, keepdim) (reduction over a dim).
def prod_dim_backward(
    grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int, keepdim: bool
) -> torch.Tensor:
    if input.dim() == 0:
        return grad
    dim = dim % input.dim()
    if not keepdim and input.dim() != 1:
        grad = grad.unsqueeze(dim)
        result = result.unsqueeze(dim)
    zero_mask = input == 0
    slice_zero_count = zero_mask.sum(dim, True)
    total_zeros = slice_zero_count.sum().item()
    if total_zeros == 0:
        return grad * (result / input).conj()
    else:
        return prod_safe_zeros_backward(grad, input, dim)


# One entry point for both prod overloads (the registry wants one formula per op).
def prod_legacy_backward(
    grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int | None, keepdim: bool
) -> torch.Tensor:
    if dim is None:
        return prod_backward(grad, input, result)
    return prod_dim_backward(grad, input, result, dim, keepdim)
