"""The modern backward formulas, as PyTorch core has them today, written in Python.

Each function here has exactly the signature of the legacy formula it replaces (in
:mod:`funcbwd.ops.legacy_formulas` or :mod:`funcbwd.ops.legacy_formulas_extended`) and computes
the same gradient, but follows today's core code: the branch core takes for
"tensor-subclass-like" inputs (BatchedTensor, FunctionalTensor, fake tensors ...), which is out of
place, the out-of-place decomposition core registers for the op (torch/_decomp), or the override
functorch installs for it under transforms (aten/src/ATen/functorch/PyTorchOperatorHacks.cpp).
The ``handfixed`` strategy runs them through the same legacy-op machinery (one
``torch.autograd.Function`` per op, ``generate_vmap_rule=True``) as every other strategy, so
comparing a strategy with ``handfixed`` isolates the cost of functionalizing from the cost of
running a backward formula in Python at all.

Contract: no function mutates a tensor (``tests/test_handfixed.py`` traces each one with
``make_fx`` and checks that no in-place ATen op appears) and none reads tensor data into Python
(no ``.item()``, no ``nonzero``): every formula is one graph for every input of its shapes. The
comment above each function names the core file and function it follows (pytorch/pytorch, main
branch) and any deliberate difference.

Not covered (``HANDFIXED`` has no entry): ``block_diag`` (core's forward still writes slices of
zeros in place and relies on functorch's batch rule), ``cumprod`` (core's formula branches on
``(input == 0).any().item()`` for plain tensors and is long), ``narrow`` with a tensor start
(``start.item()`` is inherent to ``narrow.Tensor``).

This module imports only torch, so the op catalog can import it without a cycle.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch


def _zeros(sizes: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    # at::zeros(sizes, grad.options()): unbatched under vmap, so only out-of-place ops may
    # combine it with a batched grad.
    return torch.zeros(tuple(sizes), dtype=like.dtype, device=like.device)


# ================================================================== the 8 test ops
# aten/src/ATen/native/ReduceOps.cpp value_selecting_reduction_backward_symint: the
# subclass-like branch, at::zeros_symint(sizes, grad.options()).scatter(dim, indices, grad)
# (out of place; core uses scatter_ only for plain tensors). Fixed in core by pytorch#76731.
def value_selecting_reduction_backward(
    grad: torch.Tensor, dim: int, indices: torch.Tensor, sizes: Sequence[int], keepdim: bool
) -> torch.Tensor:
    if not keepdim and len(sizes) > 0:
        grad = grad.unsqueeze(dim)
        indices = indices.unsqueeze(dim)
    return _zeros(sizes, grad).scatter(dim, indices, grad)


# aten/src/ATen/native/TensorAdvancedIndexing.cpp index_select_backward_symint: the branch taken
# for a subclass-like index, grad.new_zeros(self_sizes).index_add(dim, index, grad)
# (pytorch#77578). Under functorch transforms torch runs aten/src/ATen/functorch/
# PyTorchOperatorHacks.cpp index_select_backward_hack instead: at::zeros(..).index_add(..).
def index_select_backward(
    grad: torch.Tensor, self_sizes: Sequence[int], dim: int, index: torch.Tensor
) -> torch.Tensor:
    return grad.new_zeros(tuple(self_sizes)).index_add(dim, index, grad)


# aten/src/ATen/native/TensorShape.cpp diag: since pytorch#87180 diag is composite,
# diag_embed(self, offset) for a vector and diagonal_copy(self, offset) for a matrix, so its
# gradient is that of those ops: derivatives.yaml diag_embed "grad.diagonal(offset, dim1, dim2)"
# and diagonal "diagonal_backward_symint(grad, sizes, offset, dim1, dim2)". diagonal_backward's
# C++ kernel still copies into a zeros diagonal (functorch batches the op as a whole); its
# out-of-place form is torch/_decomp/decompositions.py diagonal_backward:
# diagonal_scatter(grad.new_zeros(sizes), grad, offset, dim1, dim2).
def diag_backward(grad: torch.Tensor, input_sizes: Sequence[int], diagonal: int) -> torch.Tensor:
    if len(input_sizes) == 1:
        return grad.diagonal(diagonal, -2, -1)
    return torch.diagonal_scatter(grad.new_zeros(tuple(input_sizes)), grad, diagonal, 0, 1)


# aten/src/ATen/native/TensorAdvancedIndexing.cpp masked_select_backward: the subclass-like
# branch, zeros_like(input.expand(infer_size(input, mask))).masked_scatter(mask, grad)
# (pytorch#76794). The final sum_to_size stands for the autograd engine's reduction of the
# broadcast grad to the input's shape, as in the legacy formula.
def masked_select_backward(
    grad: torch.Tensor, input: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    result = torch.zeros_like(
        input.expand(torch.broadcast_shapes(input.shape, mask.shape)),
        memory_format=torch.preserve_format,
    )
    return result.masked_scatter(mask, grad).sum_to_size(input.shape)


# torch/csrc/autograd/FunctionsManual.cpp clamp_backward (Tensor min/max overload) and
# clamp_backward_min_max: the subclass-like branches, self_ge_min.logical_and(self_le_max),
# self_lt_min.logical_and(min_lt_max), self_gt_max.logical_or(max_lt_min), each fed to
# where(pred, grad, zero) (pytorch#69534). The Scalar overload still calls logical_and_, which is
# safe there (a Scalar is never batched); scalar min/max arrive here as 0-dim tensors and take the
# same out-of-place path. sum_to_size stands for the engine's reduction, as in the legacy formula.
def clamp_backward(
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


# torch/csrc/autograd/FunctionsManual.cpp prod_safe_zeros_backward (current: with the
# size-1 shortcut): exclusive cumprods from both ends, safe with zeros in the input.
def prod_safe_zeros_backward(grad: torch.Tensor, inp: torch.Tensor, dim: int) -> torch.Tensor:
    if inp.numel() == 0:
        return grad.expand_as(inp)
    if inp.size(dim) == 1:
        return grad
    ones_size = list(inp.shape)
    ones_size[dim] = 1
    ones = torch.ones(ones_size, dtype=grad.dtype, device=grad.device)
    exclusive_normal = torch.cat([ones, inp.narrow(dim, 0, inp.size(dim) - 1)], dim).cumprod(dim)
    narrow_reverse = inp.narrow(dim, 1, inp.size(dim) - 1).flip(dim)
    exclusive_reverse = torch.cat([ones, narrow_reverse], dim).cumprod(dim).flip(dim)
    return grad * (exclusive_normal * exclusive_reverse).conj()


# torch/csrc/autograd/FunctionsManual.cpp prod_backward (both overloads): the branch core takes
# when ``input.is_meta() || isTensorSubclassLike(input)`` ("for Composite Compliance, always take
# the safer (and slower) path", pytorch#81969), made unconditional. Core is STILL data dependent
# for plain inputs: the full reduction branches on (input == 0).nonzero() and its row count, the
# dim reduction on (input == 0).sum(dim, true).sum().item(). That works under vmap over cotangents
# only because the saved input is then a plain tensor; this version never reads data, so it is
# one graph for every input, at the price of two cumprods even when there are no zeros. (Core
# returns zeros_like(input) for more than one zero only with grad mode off; the legacy formula
# always does, so its second derivative there is zero, which is wrong.)
def prod_legacy_backward(
    grad: torch.Tensor, input: torch.Tensor, result: torch.Tensor, dim: int | None, keepdim: bool
) -> torch.Tensor:
    if input.dim() == 0:
        return grad
    if dim is None:
        return prod_safe_zeros_backward(grad, input.contiguous().view(-1), 0).view_as(input)
    dim = dim % input.dim()
    if not keepdim:
        grad = grad.unsqueeze(dim)
    return prod_safe_zeros_backward(grad, input, dim)


# ================================================================== the extended corpus
# aten/src/ATen/native/TensorAdvancedIndexing.cpp gather_backward: the subclass-like branch,
# grad.new_zeros(self.sizes()).scatter_add(dim, index, grad) (pytorch#93164).
def gather_backward(grad: torch.Tensor, self_sizes: Sequence[int], dim: int,
                    index: torch.Tensor) -> torch.Tensor:
    return grad.new_zeros(tuple(self_sizes)).scatter_add(dim, index, grad)


# torch/csrc/autograd/FunctionsManual.cpp take_backward: the subclass-like branch,
# zeros_like(self).put(indices, grad, /*accumulate=*/true) (pytorch#81094).
def take_backward(grad: torch.Tensor, self: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(self).put(index, grad, accumulate=True)


# aten/src/ATen/native/ReduceOps.cpp cummaxmin_backward: the subclass-like branch,
# at::zeros(input.sizes(), input.options()).scatter_add(dim, indices, grad) (pytorch#77872).
def cummaxmin_backward(grad: torch.Tensor, input: torch.Tensor, indices: torch.Tensor,
                       dim: int) -> torch.Tensor:
    if input.numel() == 0:
        return input
    return _zeros(input.shape, input).scatter_add(dim, indices, grad)


# derivatives.yaml index.Tensor "index_backward(grad.new_zeros_symint(self.sym_sizes(),
# self.options()), indices, grad)" with torch/csrc/autograd/FunctionsManual.cpp index_backward's
# subclass-like branch, zeros_like_self.index_put(indices, grad, /*accumulate=*/true).
def index_backward(grad: torch.Tensor, self: torch.Tensor, *indices: torch.Tensor) -> torch.Tensor:
    return grad.new_zeros(self.shape).index_put(tuple(indices), grad, accumulate=True)


# aten/src/ATen/native/TensorShape.cpp select_backward_symint still copies into a zeros
# select (functorch batches the op as a whole); its out-of-place form is
# torch/_decomp/decompositions.py select_backward: select_scatter(grad.new_zeros(sizes), grad, ..).
def select_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                    index: int) -> torch.Tensor:
    return torch.select_scatter(grad.new_zeros(tuple(input_sizes)), grad, dim, index)


# aten/src/ATen/native/TensorShape.cpp slice_backward (same situation as select); out of place as
# torch/_decomp/decompositions.py slice_backward: slice_scatter(grad.new_zeros(sizes), grad, ...).
def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int,
                   end: int, step: int) -> torch.Tensor:
    return torch.slice_scatter(grad.new_zeros(tuple(input_sizes)), grad, dim, start, end, step)


# aten/src/ATen/native/TensorShape.cpp diagonal_backward_symint (same situation as select); out of
# place as torch/_decomp/decompositions.py diagonal_backward: diagonal_scatter on grad.new_zeros.
def diagonal_backward(grad: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int,
                      dim2: int) -> torch.Tensor:
    return torch.diagonal_scatter(grad.new_zeros(tuple(input_sizes)), grad, offset, dim1, dim2)


# The legacy diag_embed *forward* (the corpus's diag_embed op runs it as the backward of its
# adjoint). Core's diag_embed kernel (TensorShape.cpp) still copies into a zeros diagonal and
# functorch batches the op as a whole; written out of place here in the torch/_decomp
# diagonal_backward form, diagonal_scatter(self.new_zeros(sizes), self, offset, dim1, dim2),
# with diag_embed's output sizes.
def diag_embed_legacy(self: torch.Tensor, offset: int = 0, dim1: int = -2,
                      dim2: int = -1) -> torch.Tensor:
    n_dims = self.dim() + 1
    dim1, dim2 = dim1 % n_dims, dim2 % n_dims
    new_dim_len = abs(offset) + self.size(-1)
    sizes = list(self.shape[:-1])
    sizes.insert(min(dim1, dim2), new_dim_len)
    sizes.insert(max(dim1, dim2), new_dim_len)
    return torch.diagonal_scatter(self.new_zeros(sizes), self, offset, dim1, dim2)


# torch/csrc/autograd/FunctionsManual.cpp differential_analytic_matrix_function (behind
# linalg_matrix_exp_differential, adjoint=true): the subclass-like branch builds the 2n x 2n
# meta-gradient [[A^H, grad], [0, A^H]] with cat instead of copying into zeros (pytorch#81225).
def matrix_exp_backward(self: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    a = self.transpose(-2, -1).conj()
    n = a.size(-1)
    meta_grad = torch.cat([torch.cat([a, grad], -1), torch.cat([torch.zeros_like(a), a], -1)], -2)
    return torch.linalg.matrix_exp(meta_grad).narrow(-2, 0, n).narrow(-1, n, n)


# What torch runs for trace under functorch transforms: aten/src/ATen/functorch/
# PyTorchOperatorHacks.cpp trace_backward_decomp (registered on FuncTorchDynamicLayerFrontMode),
# zeros(rows * cols).index_put({indices}, grad).view(sizes) ("workaround using index_put instead of
# yet unsupported index_fill_"), with min(rows, cols) diagonal indices as in the current version.
# Core's own aten/src/ATen/native/TriangularOps.cpp trace_backward_symint subclass-like branch,
# zeros(..).index_fill(0, indices, grad), gives WRONG numbers under vmap on torch 2.13 (the
# index_fill.int_Tensor batch rule with an unbatched self and a batched 0-dim value), which is why
# functorch overrides it.
def trace_backward(grad: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    if len(sizes) != 2:
        raise RuntimeError("expected matrix input")
    step = sizes[1] + 1
    indices = torch.arange(0, min(sizes[0], sizes[1]) * step, step, device=grad.device)
    grad_input = _zeros([sizes[0] * sizes[1]], grad).index_put((indices,), grad)
    return grad_input.view(tuple(sizes))


# torch/csrc/autograd/FunctionsManual.cpp evenly_distribute_backward (full max/min/median): the
# subclass-like (and CUDA) branch, no .item(): mask = (input == value) | (isnan(input) &
# isnan(value)); mask * (grad / mask.sum()). Core's logical_or_ writes into the fresh
# (input == value), batched whenever its operands are; written out of place here.
def evenly_distribute_backward(grad: torch.Tensor, input: torch.Tensor,
                               value: torch.Tensor) -> torch.Tensor:
    input_and_value_isnan = input.isnan().logical_and(value.isnan())
    mask = (input == value).logical_or(input_and_value_isnan)
    return mask * (grad / mask.sum())


# derivatives.yaml index_fill.int_Scalar "self: grad.index_fill(dim, index, 0)" (pytorch#71751).
def index_fill_self_backward(grad: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    return grad.index_fill(dim, index, 0)


# derivatives.yaml index_copy "self: grad.index_fill(dim, index, 0)"; "source: source.dim() > 0 ?
# grad.index_select(dim, index).expand_as(source) : grad.index_select(dim, index.squeeze(0))"
# (the legacy signature carries source.dim(), not source, so the 0-dim case squeezes instead).
def index_copy_backward(grad: torch.Tensor, dim: int, index: torch.Tensor,
                        source_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    grad_self = grad.index_fill(dim, index, 0)
    grad_source = grad.index_select(dim, index)
    return grad_self, (grad_source if source_dim > 0 else grad_source.squeeze(dim))


# derivatives.yaml masked_fill.Scalar "self: grad.masked_fill(mask, 0)"; sum_to_size stands for
# the engine's reduction over broadcast dims, as in the legacy formula.
def masked_fill_self_backward(grad: torch.Tensor, mask: torch.Tensor,
                              self_sizes: Sequence[int]) -> torch.Tensor:
    return grad.masked_fill(mask, 0).sum_to_size(tuple(self_sizes))


# torch/csrc/autograd/FunctionsManual.cpp binary_cross_entropy_with_logits_backward: the branch
# taken for subclass-like tensors or with grad mode on, all out of place. Core's final
# grad_input.div_(numel) (reduction Mean) writes into a tensor derived from grad; out of place here.
_MEAN = 1  # at::Reduction::Mean


def bce_with_logits_backward(grad: torch.Tensor, input: torch.Tensor, target: torch.Tensor,
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
    if reduction == _MEAN:
        grad_input = grad_input.div(input.numel())
    return grad_input


# torch/csrc/autograd/FunctionsManual.cpp norm_backward, p = inf: "Derivative of
# amax(abs(self), dim, keepdim) but respecting nans": mask = self.abs() == norm | isnan(self.abs());
# self.sgn() * ((grad / mask.sum(dim, true)) * mask); full reduction here, so mask.sum().
def norm_inf_backward(grad: torch.Tensor, self: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    self_abs = self.abs()
    mask = self_abs.eq(norm).logical_or(self_abs.isnan())
    return self.sgn() * ((grad / mask.sum()) * mask)


# torch/csrc/autograd/FunctionsManual.cpp copysign_tensor_self_backward ("ratio.masked_fill_(self
# == 0, 0)" on the fresh result / self, safe in place in core); out of place here. derivatives.yaml
# copysign.Tensor "other: zeros_like(other)".
def copysign_backward(grad: torch.Tensor, self: torch.Tensor, other: torch.Tensor,
                      result: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ratio = (result / self).masked_fill(self == 0, 0)
    return grad * ratio, torch.zeros_like(other)


# ================================================================== the table
#: op name (as registered in the catalog) -> its handfixed formula.
HANDFIXED: dict[str, Callable[..., Any]] = {
    # the 8 test ops
    "diag": diag_backward,
    "index_select": index_select_backward,
    "topk": value_selecting_reduction_backward,
    "sort": value_selecting_reduction_backward,
    "mode": value_selecting_reduction_backward,
    "masked_select": masked_select_backward,
    "clamp": clamp_backward,
    "prod": prod_legacy_backward,
    # the extended corpus
    "gather": gather_backward,
    "take": take_backward,
    "cummax": cummaxmin_backward,
    "cummin": cummaxmin_backward,
    "index": index_backward,
    "select": select_backward,
    "slice": slice_backward,
    "diagonal": diagonal_backward,
    "diag_embed": diag_embed_legacy,
    "matrix_exp": matrix_exp_backward,
    "trace": trace_backward,
    "max": evenly_distribute_backward,
    "min": evenly_distribute_backward,
    "median": evenly_distribute_backward,
    "index_fill": index_fill_self_backward,
    "index_copy": index_copy_backward,
    "masked_fill": masked_fill_self_backward,
    "binary_cross_entropy_with_logits": bce_with_logits_backward,
    "norm_inf": norm_inf_backward,
    "copysign": copysign_backward,
}


def handfixed_formula(spec: Any) -> Callable[..., Any] | None:
    """The handfixed formula for ``spec`` (an :class:`funcbwd.OpSpec`): ``spec.handfixed`` when the
    spec carries one, else the entry of :data:`HANDFIXED` for ``spec.name``, else None."""
    own = spec.handfixed
    if own is not None:
        return own
    return HANDFIXED.get(spec.name)
