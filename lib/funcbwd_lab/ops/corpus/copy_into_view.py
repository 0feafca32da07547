"""Extended corpus, zeros + view + ``copy_``: select, slice, diagonal, diag_embed, block_diag,
matrix_exp.

Each legacy formula (PyTorch ~1.10/1.11) makes an unbatched zeros tensor, takes a view of it and
``copy_``-s the batched grad into the view. Core's modern formula, right below each, is the
out-of-place ``*_scatter`` form (``torch/_decomp/decompositions.py``) or a ``cat``. Two entries,
``diag_embed`` and ``block_diag``, were in-place *forwards*: registered through their adjoint op,
whose backward is that legacy forward (see their ``notes``). ``block_diag`` has no modern formula:
core's forward still writes slices of zeros in place and relies on functorch's batch rule.
Registered in group ``extended``, in this order.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import arg_tangent as _t
from funcbwd_lab.ops.helpers import randn, shape, zeros_like_grad
from funcbwd_lab.ops.registry import OpSpec, Sample, register


# ------------------------------------------------------------------------------ select (x[i])
# TensorShape.cpp select_backward(grad, input_sizes, dim, index).
# Fixed by making select an autograd primitive with a batch rule (select_scatter).
def select_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                    index: int) -> torch.Tensor:
    grad_input = zeros_like_grad(input_sizes, grad)
    grad_input.select(dim, index).copy_(grad)
    return grad_input


# aten/src/ATen/native/TensorShape.cpp select_backward_symint still copies into a zeros
# select (functorch batches the op as a whole); its out-of-place form is
# torch/_decomp/decompositions.py select_backward: select_scatter(grad.new_zeros(sizes), grad, ..).
def select_backward_modern(grad: torch.Tensor, input_sizes: Sequence[int], dim: int,
                           index: int) -> torch.Tensor:
    return torch.select_scatter(grad.new_zeros(tuple(input_sizes)), grad, dim, index)


register(OpSpec(
    name="select",
    torch_op=torch.select,
    formula=select_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1], a[2]),
    grad_positions=(0,),
    source="TensorShape.cpp select_backward: zeros(input_sizes); gi.select(dim, index).copy_(grad)",
    fixed_by="select made an autograd primitive with a batch rule; select_scatter",
    schema="(Tensor grad, SymInt[] input_sizes, int dim, SymInt index) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 dim=0 index=1", (randn(3, 4, seed=141), 0, 1)),
        Sample("2x3x4 dim=-1 index=2", (randn(2, 3, 4, seed=142), -1, 2)),
    ],
    jvp=lambda a, o, t: (torch.select(_t(a, t), a[1], a[2]),),
    group="extended",
    notes="x[i] with an int index.",
    handfixed=select_backward_modern,
))


# ------------------------------------------------------------------------------ slice (x[a:b:c])
def slice_view(x: torch.Tensor, dim: int, start: int, end: int, step: int) -> torch.Tensor:
    """``x.slice(dim, start, end, step)`` from Python (what ``x[..., start:end:step]`` calls)."""
    return x[(slice(None),) * (dim % x.dim()) + (slice(start, end, step),)]


# TensorShape.cpp slice_backward(grad, input_sizes, dim, start, end, step).
# Fixed like select (slice_scatter); user report functorch#105.
def slice_backward(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int,
                   end: int, step: int) -> torch.Tensor:
    grad_input = zeros_like_grad(input_sizes, grad)
    slice_view(grad_input, dim, start, end, step).copy_(grad)
    return grad_input


# aten/src/ATen/native/TensorShape.cpp slice_backward (same situation as select); out of place as
# torch/_decomp/decompositions.py slice_backward: slice_scatter(grad.new_zeros(sizes), grad, ...).
def slice_backward_modern(grad: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int,
                          end: int, step: int) -> torch.Tensor:
    return torch.slice_scatter(grad.new_zeros(tuple(input_sizes)), grad, dim, start, end, step)


register(OpSpec(
    name="slice",
    torch_op=slice_view,
    formula=slice_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), *a[1:5]),
    grad_positions=(0,),
    source="TensorShape.cpp slice_backward: zeros(input_sizes); gi.slice(dim, start, end, step).copy_(grad)",
    fixed_by="slice_scatter / batch rule (user report functorch#105)",
    schema="(Tensor grad, SymInt[] input_sizes, int dim, SymInt start, SymInt end, SymInt step) -> Tensor",
    make_samples=lambda: [
        Sample("4x5 dim=1 1:5:2", (randn(4, 5, seed=151), 1, 1, 5, 2)),
        Sample("6 dim=0 0:4", (randn(6, seed=152), 0, 0, 4, 1)),
    ],
    jvp=lambda a, o, t: (slice_view(_t(a, t), *a[1:5]),),
    group="extended",
    notes="x[start:end:step] along one dim (aten::slice).",
    handfixed=slice_backward_modern,
))


# ------------------------------------------------------------------------------ diagonal
# TensorShape.cpp diagonal_backward(grad, input_sizes, offset, dim1, dim2).
# Fixed by functorch's diagonal_backward batch rule; diagonal_scatter in core.
def diagonal_backward(grad: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int,
                      dim2: int) -> torch.Tensor:
    grad_input = zeros_like_grad(input_sizes, grad)
    diag = grad_input.diagonal(offset, dim1, dim2)
    diag.copy_(grad)
    return grad_input


# aten/src/ATen/native/TensorShape.cpp diagonal_backward_symint (same situation as select); out of
# place as torch/_decomp/decompositions.py diagonal_backward: diagonal_scatter on grad.new_zeros.
def diagonal_backward_modern(grad: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int,
                             dim2: int) -> torch.Tensor:
    return torch.diagonal_scatter(grad.new_zeros(tuple(input_sizes)), grad, offset, dim1, dim2)


register(OpSpec(
    name="diagonal",
    torch_op=torch.diagonal,
    formula=diagonal_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), *a[1:4]),
    grad_positions=(0,),
    source="TensorShape.cpp diagonal_backward: zeros(input_sizes).diagonal(offset, dim1, dim2).copy_(grad)",
    fixed_by="functorch diagonal_backward batch rule; diagonal_scatter",
    schema="(Tensor grad, SymInt[] input_sizes, int offset, int dim1, int dim2) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 offset=1", (randn(3, 4, seed=161), 1, 0, 1)),
        Sample("2x3x4 offset=-1 dims 1,2", (randn(2, 3, 4, seed=162), -1, 1, 2)),
    ],
    jvp=lambda a, o, t: (torch.diagonal(_t(a, t), *a[1:4]),),
    group="extended",
    handfixed=diagonal_backward_modern,
))


# ------------------------------------------------------------------------------ diag_embed (a forward)
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
    result = zeros_like_grad(sizes, self)
    diag = result.diagonal(offset, dim1, dim2)
    diag.copy_(self)
    return result


# The legacy diag_embed *forward* (the corpus's diag_embed op runs it as the backward of its
# adjoint). Core's diag_embed kernel (TensorShape.cpp) still copies into a zeros diagonal and
# functorch batches the op as a whole; written out of place here in the torch/_decomp
# diagonal_backward form, diagonal_scatter(self.new_zeros(sizes), self, offset, dim1, dim2),
# with diag_embed's output sizes.
def diag_embed_modern(self: torch.Tensor, offset: int = 0, dim1: int = -2,
                      dim2: int = -1) -> torch.Tensor:
    n_dims = self.dim() + 1
    dim1, dim2 = dim1 % n_dims, dim2 % n_dims
    new_dim_len = abs(offset) + self.size(-1)
    sizes = list(self.shape[:-1])
    sizes.insert(min(dim1, dim2), new_dim_len)
    sizes.insert(max(dim1, dim2), new_dim_len)
    return torch.diagonal_scatter(self.new_zeros(sizes), self, offset, dim1, dim2)


register(OpSpec(
    name="diag_embed",
    # The adjoint of diag_embed (square inputs): its backward *is* diag_embed(grad, offset, -2, -1).
    torch_op=lambda x, offset: torch.diagonal(x, offset, -2, -1),
    formula=diag_embed_legacy,
    formula_args=lambda a, o, g: (g[0], a[1], -2, -1),
    grad_positions=(0,),
    source="TensorShape.cpp diag_embed (legacy forward): zeros(sizes).diagonal(offset, dim1, dim2).copy_(self)",
    fixed_by="core pytorch#71750; functorch DECOMPOSE_FUNCTIONAL (Dec 2021 - Apr 2022)",
    schema="(Tensor self, int offset, int dim1, int dim2) -> Tensor",
    make_samples=lambda: [
        Sample("3x3 offset=0", (randn(3, 3, seed=171), 0)),
        Sample("2x3x3 offset=1", (randn(2, 3, 3, seed=172), 1)),
    ],
    jvp=lambda a, o, t: (torch.diagonal(_t(a, t), a[1], -2, -1),),
    group="extended",
    notes="The in-place code was diag_embed's *forward*. Represented through its adjoint: the op is "
    "the batched-matrix diagonal x.diagonal(offset, -2, -1) of a square matrix, whose backward is "
    "exactly diag_embed(grad, offset, -2, -1); the formula is the legacy diag_embed forward, so "
    "vmap(vjp) runs that forward under the batched grad, as functorch#235's conditional "
    "functionalization had to handle.",
    handfixed=diag_embed_modern,
))


# ------------------------------------------------------------------------------ block_diag (a forward)
# TensorShape.cpp block_diag(tensors) (2-D inputs): the legacy *forward*, each block copied into
# slices of zeros. functorch used conditional functionalization, then a batch rule (functorch#814).
# Used here as the backward of its adjoint (cutting the diagonal blocks out of a matrix).
# No modern formula: core's forward still writes slices of zeros in place (functorch's batch rule
# covers it), so the handfixed strategy reports this op not applicable.
def block_diag_legacy(*tensors: torch.Tensor) -> torch.Tensor:
    rows = sum(t.size(0) for t in tensors)
    cols = sum(t.size(1) for t in tensors)
    result = zeros_like_grad((rows, cols), tensors[0])
    r = c = 0
    for t in tensors:
        result[r:r + t.size(0), c:c + t.size(1)].copy_(t)  # .slice(0, ...).slice(1, ...).copy_(t)
        r, c = r + t.size(0), c + t.size(1)
    return result


def diag_blocks(m: torch.Tensor, shapes: tuple[tuple[int, int], ...]) -> tuple[torch.Tensor, ...]:
    """The diagonal blocks of ``m`` (the adjoint of block_diag when the blocks tile ``m``)."""
    out, r, c = [], 0, 0
    for h, w in shapes:
        out.append(m[r:r + h, c:c + w])
        r, c = r + h, c + w
    return tuple(out)


register(OpSpec(
    name="block_diag",
    torch_op=diag_blocks,
    formula=block_diag_legacy,
    formula_args=lambda a, o, g: tuple(g),
    grad_positions=(0,),
    source="TensorShape.cpp block_diag (legacy forward): zeros(rows, cols); result.slice(0, ..).slice(1, ..).copy_(t) per block",
    fixed_by="functorch#814 batch rule (conditional functionalization before it)",
    schema="(Tensor[] tensors) -> Tensor",
    make_samples=lambda: [
        Sample("5x5 blocks 2x3, 3x2", (randn(5, 5, seed=181), ((2, 3), (3, 2)))),
        Sample("3x4 blocks 1x1, 2x3", (randn(3, 4, seed=182), ((1, 1), (2, 3)))),
    ],
    diff_outputs=(0, 1),
    jvp=lambda a, o, t: diag_blocks(_t(a, t), a[1]),
    group="extended",
    notes="The in-place code was block_diag's *forward*. Represented through its adjoint: the op cuts "
    "the diagonal blocks out of a matrix they tile, whose backward is exactly block_diag(*grads); the "
    "formula is the legacy block_diag forward run on the (batched) grads.",
))


# ------------------------------------------------------------------------------ matrix_exp
# LinearAlgebra.cpp backward_analytic_function_of_a_matrix(self, grad, matrix_exp) via
# matrix_exp_backward: a 2n x 2n "meta_grad" of zeros filled block by block with copy_.
# Fixed by core pytorch#81225.
def matrix_exp_backward(self: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    self_transposed = self.transpose(-2, -1).conj()
    sizes = list(self_transposed.shape)
    sizes[-2] <<= 1
    sizes[-1] <<= 1
    n = self_transposed.size(-1)
    meta_grad = zeros_like_grad(sizes, grad)
    meta_grad.narrow(-2, 0, n).narrow(-1, 0, n).copy_(self_transposed)
    meta_grad.narrow(-2, n, n).narrow(-1, n, n).copy_(self_transposed)
    meta_grad.narrow(-2, 0, n).narrow(-1, n, n).copy_(grad)
    return meta_grad.matrix_exp().narrow(-2, 0, n).narrow(-1, n, n)


# torch/csrc/autograd/FunctionsManual.cpp differential_analytic_matrix_function (behind
# linalg_matrix_exp_differential, adjoint=true): the subclass-like branch builds the 2n x 2n
# meta-gradient [[A^H, grad], [0, A^H]] with cat instead of copying into zeros (pytorch#81225).
def matrix_exp_backward_modern(self: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    a = self.transpose(-2, -1).conj()
    n = a.size(-1)
    meta_grad = torch.cat([torch.cat([a, grad], -1), torch.cat([torch.zeros_like(a), a], -1)], -2)
    return torch.linalg.matrix_exp(meta_grad).narrow(-2, 0, n).narrow(-1, n, n)


register(OpSpec(
    name="matrix_exp",
    torch_op=torch.matrix_exp,
    formula=matrix_exp_backward,
    formula_args=lambda a, o, g: (a[0], g[0]),
    grad_positions=(0,),
    source="LinearAlgebra.cpp backward_analytic_function_of_a_matrix: meta_grad.narrow(-2, 0, n).narrow(-1, n, n).copy_(grad)",
    fixed_by="core pytorch#81225",
    schema="(Tensor self, Tensor grad) -> Tensor",
    make_samples=lambda: [Sample("3x3", (0.5 * randn(3, 3, seed=191),))],
    # The Frechet derivative: the top-right block of exp([[A, E], [0, A]]).
    jvp=lambda a, o, t: (torch.matrix_exp(torch.cat([
        torch.cat([a[0], _t(a, t)], -1),
        torch.cat([torch.zeros_like(a[0]), a[0]], -1)], -2))[..., :a[0].size(-2), a[0].size(-1):],),
    group="extended",
    handfixed=matrix_exp_backward_modern,
))
