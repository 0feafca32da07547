"""The extended legacy-formula corpus beyond the 8 test ops (registered on import).

One :func:`funcbwd.ops.registry.register` call per op, exactly like the 8 test ops in ``catalog.py``;
the formulas live in :mod:`funcbwd.ops.legacy_formulas_extended` with a comment citing the C++ helper and the
fixing PR. Groups: ``extended`` (in-place formulas that broke vmap) and ``negative_control``
(safe in-place writes, or ``.item()`` that functionalization cannot remove). Two entries,
``diag_embed`` and ``block_diag``, were in-place *forwards*; they are registered through their
adjoint op, whose backward is that legacy forward (see their ``notes``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from funcbwd.ops import legacy_formulas_extended as X
from funcbwd.ops.registry import OpSpec, Sample, register
from funcbwd.ops.helpers import gather_tangent, mask, randn, shape, zero_if_none

Args = tuple[Any, ...]


def _t(a: Args, t: tuple, i: int = 0) -> torch.Tensor:
    """The tangent of arg ``i`` (zeros when it has none)."""
    return zero_if_none(t[i], a[i])


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


# ------------------------------------------------------------------------------ index_fill_ / masked_fill_
register(OpSpec(
    name="trace",
    torch_op=torch.trace,
    formula=X.trace_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0])),
    grad_positions=(0,),
    source="trace_backward: zeros(numel).index_fill_(0, arange(0, numel, cols + 1), grad).view(sizes)",
    fixed_by="core pytorch#77578",
    schema="(Tensor grad, SymInt[] sizes) -> Tensor",
    make_samples=lambda: [
        Sample("3x4", (randn(3, 4, seed=201),)),
        Sample("3x3", (randn(3, 3, seed=202),)),
    ],
    jvp=lambda a, o, t: (torch.trace(_t(a, t)),),
    group="extended",
    notes="Functionalizing this formula under vmap gives WRONG numbers on torch 2.13 (no error): the "
    "index_fill.int_Tensor batching rule, for an unbatched self and a batched 0-dim value, fills every "
    "batch entry with the last value: vmap(lambda g: torch.zeros(5).index_fill(0, idx, g))(g).",
))


def _ties(seed: int) -> torch.Tensor:
    # Small integers: the max, min and median each occur more than once (evenly distributed grad).
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 3, (3, 4), generator=g).float()
    x.view(-1)[:2] = torch.tensor([0.0, 2.0])
    x.view(-1)[-2:] = torch.tensor([0.0, 2.0])
    return x


def _evenly_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    mask = a[0] == o[0]
    return ((_t(a, t) * mask).sum() / mask.sum(),)


for _name, _fn in (("max", torch.max), ("min", torch.min), ("median", torch.median)):
    register(OpSpec(
        name=_name,
        torch_op=_fn,
        formula=X.evenly_distribute_backward,
        formula_args=lambda a, o, g: (g[0], a[0], o[0]),
        grad_positions=(0,),
        source="FunctionsManual.cpp evenly_distribute_backward (CPU): value.isnan().item() ? ..; "
        "grad.new_zeros(sizes).masked_fill_(mask, grad / mask.sum())",
        fixed_by="core pytorch#69534",
        schema="(Tensor grad, Tensor input, Tensor value) -> Tensor",
        make_samples=lambda: [
            Sample("3x4 distinct", (randn(3, 4, seed=211),)),
            Sample("3x4 ties", (_ties(212),)),
        ],
        jvp=_evenly_jvp,
        group="extended",
        notes=f"Full reduction torch.{_name}(x). The in-place target comes from grad.new_zeros (batched "
        "like grad), so cotangent batching works; the .item() on value.isnan() fails once the input "
        "is batched.",
    ))


register(OpSpec(
    name="index_fill",
    torch_op=torch.index_fill,
    formula=X.index_fill_self_backward,
    formula_args=lambda a, o, g: (g[0], a[1], a[2]),
    grad_positions=(0,),
    source="derivatives.yaml index_fill.int_Scalar: self: grad.clone().index_fill_(dim, index, 0)",
    fixed_by="core pytorch#71751 / #71765",
    schema="(Tensor grad, int dim, Tensor index) -> Tensor",
    make_samples=lambda: [Sample("4x3 dim=0", (randn(4, 3, seed=221), 0, torch.tensor([1, 3]), -1.5))],
    jvp=lambda a, o, t: (torch.index_fill(_t(a, t), a[1], a[2], 0.0),),
    group="extended",
    notes="Self grad only. In place into a clone of grad: fails only when index is batched and grad is not.",
))

register(OpSpec(
    name="index_copy",
    torch_op=torch.index_copy,
    formula=X.index_copy_backward,
    formula_args=lambda a, o, g: (g[0], a[1], a[2], a[3].dim()),
    grad_positions=(0, 3),
    source="derivatives.yaml index_copy: self: grad.clone().index_fill_(dim, index, 0); source: grad.index_select(dim, index)",
    fixed_by="core pytorch#71751 / #71765",
    schema="(Tensor grad, int dim, Tensor index, int source_dim) -> (Tensor, Tensor)",
    make_samples=lambda: [
        Sample("4x3 dim=0", (randn(4, 3, seed=231), 0, torch.tensor([2, 0]), randn(2, 3, seed=232)), (0, 3)),
    ],
    jvp=lambda a, o, t: (torch.index_copy(_t(a, t), a[1], a[2], _t(a, t, 3)),),
    group="extended",
    notes="Fails only when index is batched and grad is not (the clone of grad is then unbatched).",
))

register(OpSpec(
    name="masked_fill",
    torch_op=torch.masked_fill,
    formula=X.masked_fill_self_backward,
    formula_args=lambda a, o, g: (g[0], a[1], shape(a[0])),
    grad_positions=(0,),
    source="derivatives.yaml masked_fill.Scalar: self: grad.clone().masked_fill_(mask, 0)",
    fixed_by="core pytorch#71751 series (out-of-place for subclass-like tensors)",
    schema="(Tensor grad, Tensor mask, SymInt[] self_sizes) -> Tensor",
    make_samples=lambda: [Sample("3x4 mask (4,)", (randn(3, 4, seed=241), mask(4, seed=242), 2.0))],
    jvp=lambda a, o, t: (torch.masked_fill(_t(a, t), a[1], 0.0),),
    group="extended",
    notes="Self grad only. Fails only when the mask is batched and grad is not.",
))


# ------------------------------------------------------------------------------ multiply in place
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
    formula=X.bce_with_logits_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1], a[2], None, X.REDUCTIONS[a[3]]),
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
))


# ------------------------------------------------------------------------------ negative controls
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
    formula=X.norm_inf_backward,
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
))


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
    formula=X.copysign_backward,
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
))

register(OpSpec(
    name="cumprod",
    torch_op=torch.cumprod,
    formula=X.cumprod_backward,
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

register(OpSpec(
    name="narrow",
    torch_op=torch.narrow,
    formula=X.narrow_tensor_backward,
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
