"""The extended legacy-formula corpus, part two: in-place fills, in-place multiply, negative controls.

Registered on import, right after :mod:`funcbwd.ops.corpus` (``funcbwd.ops`` imports the two in
that order, so the registry's op order is the corpus order): one
:func:`funcbwd.ops.registry.register` call per op, the formulas in
:mod:`funcbwd.ops.legacy_formulas_extended`. Group ``extended``: formulas that ``index_fill_``,
``masked_fill_`` or ``mul_`` a tensor that vmap cannot batch in place (trace, the evenly
distributed reductions, index_fill, index_copy, masked_fill, binary_cross_entropy_with_logits).
Group ``negative_control``: safe in-place writes, or ``.item()`` that functionalization cannot
remove (norm_inf, copysign, cumprod, narrow).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from funcbwd.ops import legacy_formulas_extended as X
from funcbwd.ops.registry import OpSpec, Sample, register
from funcbwd.ops.helpers import arg_tangent as _t
from funcbwd.ops.helpers import mask, randn, shape

Args = tuple[Any, ...]


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
