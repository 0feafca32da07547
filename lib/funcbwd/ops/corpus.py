"""The extended legacy-formula corpus, part one: zeros + scatter/put and zeros + view + copy_.

The extended corpus beyond the 8 test ops, registered on import: one
:func:`funcbwd.ops.registry.register` call per op, exactly like the 8 test ops in ``test_ops.py``;
the formulas live in :mod:`funcbwd.ops.legacy_formulas_extended` with a comment citing the C++
helper and the fixing PR. This module holds the indexing family (gather, take, cummax/cummin,
index: a zeros tensor written by scatter/put) and the view family (select, slice, diagonal,
diag_embed, block_diag, matrix_exp: a zeros tensor written through a view by ``copy_``), all in
group ``extended``. Two entries, ``diag_embed`` and ``block_diag``, were in-place *forwards*; they
are registered through their adjoint op, whose backward is that legacy forward (see their
``notes``). The in-place fills, the in-place multiply and the negative controls are in
:mod:`funcbwd.ops.corpus_fill_and_controls`, registered right after this module.
"""

from __future__ import annotations

import torch

from funcbwd.ops import legacy_formulas_extended as X
from funcbwd.ops.registry import OpSpec, Sample, register
from funcbwd.ops.helpers import arg_tangent as _t
from funcbwd.ops.helpers import gather_tangent, randn, shape


# ------------------------------------------------------------------------------ zeros + scatter/put
register(OpSpec(
    name="gather",
    torch_op=torch.gather,
    formula=X.gather_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1], a[2]),
    grad_positions=(0,),
    source="TensorAdvancedIndexing.cpp gather_backward: zeros(self.sizes()).scatter_add_(dim, index, grad)",
    fixed_by="core pytorch#93164",
    schema="(Tensor grad, SymInt[] self_sizes, int dim, Tensor index) -> Tensor",
    make_samples=lambda: [
        Sample("dim=1 repeated index", (randn(3, 4, seed=101), 1, torch.tensor([[0, 0], [3, 1], [2, 2]]))),
        Sample("dim=0", (randn(3, 4, seed=102), 0, torch.tensor([[2, 0, 1, 1]]))),
    ],
    jvp=lambda a, o, t: (torch.gather(_t(a, t), a[1], a[2]),),
    group="extended",
))

register(OpSpec(
    name="take",
    torch_op=torch.take,
    formula=X.take_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1]),
    grad_positions=(0,),
    source="derivatives.yaml take: zeros_like(self).put_(index, grad, true)",
    fixed_by="core pytorch#81094 (reported through jacrev in pytorch#95738)",
    schema="(Tensor grad, Tensor self, Tensor index) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 repeated flat index", (randn(3, 4, seed=111), torch.tensor([[0, 5], [5, 11]]))),
    ],
    jvp=lambda a, o, t: (torch.take(_t(a, t), a[1]),),
    group="extended",
))


def _cum_op(fn):
    return lambda x, dim: tuple(fn(x, dim))


for _name, _fn in (("cummax", torch.cummax), ("cummin", torch.cummin)):
    register(OpSpec(
        name=_name,
        torch_op=_cum_op(_fn),
        formula=X.cummaxmin_backward,
        formula_args=lambda a, o, g: (g[0], a[0], o[1], a[1]),
        grad_positions=(0,),
        source="ReduceOps.cpp cummaxmin_backward: zeros(input.sizes()).scatter_add_(dim, indices, grad)",
        fixed_by="core pytorch#77872",
        schema="(Tensor grad, Tensor input, Tensor indices, int dim) -> Tensor",
        make_samples=lambda: [
            Sample("3x4 dim=1", (randn(3, 4, seed=121), 1)),
            Sample("3x4 dim=0", (randn(3, 4, seed=122), 0)),
        ],
        jvp=lambda a, o, t: (gather_tangent(_t(a, t), a[1], o[1], True), None),
        group="extended",
    ))


register(OpSpec(
    name="index",
    torch_op=lambda x, *indices: x[indices],
    formula=X.index_backward,
    formula_args=lambda a, o, g: (g[0], a[0], *a[1:]),
    grad_positions=(0,),
    source="FunctionsManual.cpp index_backward(zeros_like(self), indices, grad): _index_put_impl_(.., accumulate=true)",
    fixed_by="core: out-of-place index_put branch for subclass-like tensors in index_backward",
    schema="(Tensor grad, Tensor self, Tensor[] indices) -> Tensor",
    make_samples=lambda: [
        Sample("x[i] repeated rows", (randn(4, 3, seed=131), torch.tensor([1, 3, 1]))),
        Sample("x[i, j]", (randn(4, 3, seed=132), torch.tensor([0, 2, 2]), torch.tensor([1, 0, 1]))),
    ],
    jvp=lambda a, o, t: (_t(a, t)[a[1:]],),
    group="extended",
    notes="Advanced indexing x[idx] with integer index tensors (aten::index).",
))


# ------------------------------------------------------------------------------ zeros + view + copy_
register(OpSpec(
    name="select",
    torch_op=torch.select,
    formula=X.select_backward,
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
))

register(OpSpec(
    name="slice",
    torch_op=X.slice_view,
    formula=X.slice_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), *a[1:5]),
    grad_positions=(0,),
    source="TensorShape.cpp slice_backward: zeros(input_sizes); gi.slice(dim, start, end, step).copy_(grad)",
    fixed_by="slice_scatter / batch rule (user report functorch#105)",
    schema="(Tensor grad, SymInt[] input_sizes, int dim, SymInt start, SymInt end, SymInt step) -> Tensor",
    make_samples=lambda: [
        Sample("4x5 dim=1 1:5:2", (randn(4, 5, seed=151), 1, 1, 5, 2)),
        Sample("6 dim=0 0:4", (randn(6, seed=152), 0, 0, 4, 1)),
    ],
    jvp=lambda a, o, t: (X.slice_view(_t(a, t), *a[1:5]),),
    group="extended",
    notes="x[start:end:step] along one dim (aten::slice).",
))

register(OpSpec(
    name="diagonal",
    torch_op=torch.diagonal,
    formula=X.diagonal_backward,
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
))

register(OpSpec(
    name="diag_embed",
    # The adjoint of diag_embed (square inputs): its backward *is* diag_embed(grad, offset, -2, -1).
    torch_op=lambda x, offset: torch.diagonal(x, offset, -2, -1),
    formula=X.diag_embed_legacy,
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
))


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
    formula=X.block_diag_legacy,
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

register(OpSpec(
    name="matrix_exp",
    torch_op=torch.matrix_exp,
    formula=X.matrix_exp_backward,
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
))
