"""Python re-creations of more historical (PyTorch ~1.10/1.11) backward formulas: the extended corpus.

Same rules as :mod:`funcbwd.ops.legacy_formulas`: each function follows the C++ line by line, keeping the
in-place op (or the ``.item()``) that broke ``vmap(vjp(f))``; the comment above each names the C++
helper (or the derivatives.yaml entry) and the PR that later fixed it in core, as listed in
docs/legacy-formulas.md ("More candidates"). Three entries are *negative controls*:
``norm_inf_backward`` and ``copysign_self_backward`` write in place into a tensor derived from
``grad`` (already batched, so safe), and ``cumprod_backward`` / ``narrow_tensor_backward`` depend
on ``.item()`` (data-dependent control flow that no functionalization can remove).
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd.ops.legacy_formulas import _zeros


# --------------------------------------------------------------------- zeros + scatter/put/index_put
# TensorAdvancedIndexing.cpp gather_backward(grad, self, dim, index, sparse_grad=false).
# Fixed by core pytorch#93164.
def gather_backward(grad: torch.Tensor, self_sizes: Sequence[int], dim: int,
                    index: torch.Tensor) -> torch.Tensor:
    return _zeros(self_sizes, grad).scatter_add_(dim, index, grad)


# derivatives.yaml take: "self: zeros_like(self).put_(index, grad, true)".
# Fixed by core pytorch#81094 (users hit it through jacrev, pytorch#95738).
def take_backward(grad: torch.Tensor, self: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(self).put_(index, grad, accumulate=True)


# ReduceOps.cpp cummaxmin_backward(grad, input, indices, dim) (cummax and cummin).
# Fixed by core pytorch#77872.
def cummaxmin_backward(grad: torch.Tensor, input: torch.Tensor, indices: torch.Tensor,
                       dim: int) -> torch.Tensor:
    if input.numel() == 0:
        return input
    result = torch.zeros(input.shape, dtype=input.dtype, device=input.device)
    return result.scatter_add_(dim, indices, grad)


# FunctionsManual.cpp index_backward(zeros_like_self, indices, grad) with derivatives.yaml
# "self: index_backward(zeros_like(self), indices, grad)": _index_put_impl_(zeros, indices, grad,
# accumulate=true, unsafe=true). Fixed by the subclass-like out-of-place branch in index_backward.
def index_backward(grad: torch.Tensor, self: torch.Tensor, *indices: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(self).index_put_(tuple(indices), grad, accumulate=True)


# --------------------------------------------------------------------- zeros + view + copy_
# TensorShape.cpp select_backward(grad, input_sizes, dim, index).
# Fixed by making select an autograd primitive with a batch rule (select_scatter).
def select_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                    index: int) -> torch.Tensor:
    grad_input = _zeros(input_sizes, grad)
    grad_input.select(dim, index).copy_(grad)
    return grad_input


def slice_view(x: torch.Tensor, dim: int, start: int, end: int, step: int) -> torch.Tensor:
    """``x.slice(dim, start, end, step)`` from Python (what ``x[..., start:end:step]`` calls)."""
    return x[(slice(None),) * (dim % x.dim()) + (slice(start, end, step),)]


# TensorShape.cpp slice_backward(grad, input_sizes, dim, start, end, step).
# Fixed like select (slice_scatter); user report functorch#105.
def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int,
                   end: int, step: int) -> torch.Tensor:
    grad_input = _zeros(input_sizes, grad)
    slice_view(grad_input, dim, start, end, step).copy_(grad)
    return grad_input


# TensorShape.cpp diagonal_backward(grad, input_sizes, offset, dim1, dim2).
# Fixed by functorch's diagonal_backward batch rule; diagonal_scatter in core.
def diagonal_backward(grad: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int,
                      dim2: int) -> torch.Tensor:
    grad_input = _zeros(input_sizes, grad)
    diag = grad_input.diagonal(offset, dim1, dim2)
    diag.copy_(grad)
    return grad_input


# TensorShape.cpp diag_embed(self, offset, dim1, dim2): the legacy *forward*, in place into zeros.
# functorch applied conditional functionalization (DECOMPOSE_FUNCTIONAL) to it Dec 2021 - Apr 2022;
# core pytorch#71750. Used here as the backward of its adjoint (the batched-matrix diagonal).
def diag_embed_legacy(self: torch.Tensor, offset: int = 0, dim1: int = -2,
                      dim2: int = -1) -> torch.Tensor:
    n_dims = self.dim() + 1
    dim1, dim2 = dim1 % n_dims, dim2 % n_dims
    new_dim_len = abs(offset) + self.size(-1)
    sizes = list(self.shape[:-1])
    sizes.insert(min(dim1, dim2), new_dim_len)
    sizes.insert(max(dim1, dim2), new_dim_len)
    result = _zeros(sizes, self)
    diag = result.diagonal(offset, dim1, dim2)
    diag.copy_(self)
    return result


# TensorShape.cpp block_diag(tensors) (2-D inputs): the legacy *forward*, each block copied into
# slices of zeros. functorch used conditional functionalization, then a batch rule (functorch#814).
# Used here as the backward of its adjoint (cutting the diagonal blocks out of a matrix).
def block_diag_legacy(*tensors: torch.Tensor) -> torch.Tensor:
    rows = sum(t.size(0) for t in tensors)
    cols = sum(t.size(1) for t in tensors)
    result = _zeros((rows, cols), tensors[0])
    r = c = 0
    for t in tensors:
        result[r:r + t.size(0), c:c + t.size(1)].copy_(t)  # .slice(0, ...).slice(1, ...).copy_(t)
        r, c = r + t.size(0), c + t.size(1)
    return result


# LinearAlgebra.cpp backward_analytic_function_of_a_matrix(self, grad, matrix_exp) via
# matrix_exp_backward: a 2n x 2n "meta_grad" of zeros filled block by block with copy_.
# Fixed by core pytorch#81225.
def matrix_exp_backward(self: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    self_transposed = self.transpose(-2, -1).conj()
    sizes = list(self_transposed.shape)
    sizes[-2] <<= 1
    sizes[-1] <<= 1
    n = self_transposed.size(-1)
    meta_grad = _zeros(sizes, grad)
    meta_grad.narrow(-2, 0, n).narrow(-1, 0, n).copy_(self_transposed)
    meta_grad.narrow(-2, n, n).narrow(-1, n, n).copy_(self_transposed)
    meta_grad.narrow(-2, 0, n).narrow(-1, n, n).copy_(grad)
    return meta_grad.matrix_exp().narrow(-2, 0, n).narrow(-1, n, n)


# --------------------------------------------------------------------- zeros + index_fill_/masked_fill_
# trace_backward(grad, sizes): zeros(numel), index_fill_ the diagonal's flat indices with the
# (0-dim) grad, then view. Fixed by core pytorch#77578.
def trace_backward(grad: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    if len(sizes) != 2:
        raise RuntimeError("expected matrix input")
    grad_input = torch.zeros(sizes[0] * sizes[1], dtype=grad.dtype, device=grad.device)
    indices = torch.arange(0, grad_input.numel(), sizes[1] + 1, device=grad.device)
    grad_input.index_fill_(0, indices, grad)
    return grad_input.view(tuple(sizes))


# FunctionsManual.cpp evenly_distribute_backward(grad, input, value) (full-reduction max, min,
# median), CPU branch: ".item()" on value.isnan() picks the mask, then grad.new_zeros(...)
# .masked_fill_(mask, grad / mask.sum()). Fixed by core pytorch#69534.
def evenly_distribute_backward(grad: torch.Tensor, input: torch.Tensor,
                               value: torch.Tensor) -> torch.Tensor:
    mask = input.isnan() if value.isnan().item() else input == value
    return grad.new_zeros(input.shape).masked_fill_(mask, grad / mask.sum())


# derivatives.yaml index_fill.int_Scalar / index_copy (self): "grad.clone().index_fill_(dim,
# index, 0)". In place into a clone of grad: fails only when the index is batched and grad is not.
# Fixed by core pytorch#71751 / #71765 (out-of-place index_fill for subclass-like tensors).
def index_fill_self_backward(grad: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    return grad.clone().index_fill_(dim, index, 0)


# derivatives.yaml index_copy: self as index_fill; source: grad.index_select(dim, index).
def index_copy_backward(grad: torch.Tensor, dim: int, index: torch.Tensor,
                        source_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    grad_self = grad.clone().index_fill_(dim, index, 0)
    grad_source = grad.index_select(dim, index)
    return grad_self, (grad_source if source_dim > 0 else grad_source.squeeze(dim))


# derivatives.yaml masked_fill.Scalar (self): "grad.clone().masked_fill_(mask, 0)".
# Fixed with index_fill (pytorch#71751 series). Sums over broadcast dims like the engine does.
def masked_fill_self_backward(grad: torch.Tensor, mask: torch.Tensor,
                              self_sizes: Sequence[int]) -> torch.Tensor:
    return grad.clone().masked_fill_(mask, 0).sum_to_size(tuple(self_sizes))


# --------------------------------------------------------------------- multiply in place
# Loss.cpp binary_cross_entropy_with_logits_backward(grad, input, target, weight, pos_weight,
# reduction): "(input.sigmoid() - target).mul_(grad)" and "grad_input.mul_(weight)".
# Fixed by a functorch hack, then core (out-of-place for subclass-like tensors).
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction::{None, Mean, Sum}


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


# --------------------------------------------------------------------- negative controls
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


# FunctionsManual.cpp copysign_tensor_self_backward(grad, self, result): "ratio.masked_fill_(self
# == 0, 0)" on result / self (batched whenever self or other is): safe. other's grad is zeros_like.
def copysign_backward(grad: torch.Tensor, self: torch.Tensor, other: torch.Tensor,
                      result: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ratio = result / self
    ratio.masked_fill_(self == 0, 0)
    return grad * ratio, torch.zeros_like(other)


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
    grad_input = _zeros(input.shape, grad)
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


# narrow.Tensor(self, dim, Tensor start, length) is CompositeImplicit: "start.item()", then
# slice, whose legacy backward is slice_backward (zeros + slice().copy_). Negative control: the
# .item() on a batched start fails in any strategy (vmap: no rule for narrow.Tensor).
def narrow_tensor_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                           start: torch.Tensor, length: int) -> torch.Tensor:
    s = int(start.item())
    return slice_backward(grad, input_sizes, dim, s, s + length, 1)
