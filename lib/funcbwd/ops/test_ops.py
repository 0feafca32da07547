"""The 8 test ops of the design discussion (functorch#241), registered on import.

masked_select, clamp, diag, index_select, topk, prod, mode, sort: each ties the modern torch op to
its historical in-place backward formula (:mod:`funcbwd.ops.legacy_formulas`) and samples that
exercise every branch of that formula.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from funcbwd.ops import legacy_formulas as L
from funcbwd.ops.helpers import gather_tangent, mask, randn, shape, zero_if_none
from funcbwd.ops.registry import Args, OpSpec, Sample, register


register(OpSpec(
    name="diag",
    torch_op=torch.diag,
    formula=L.diag_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1]),
    grad_positions=(0,),
    source="TensorShape.cpp diag_backward: zeros(input_sizes).diagonal(diagonal).copy_(grad)",
    fixed_by="functorch diagonal_backward batch rule; core pytorch#87180",
    schema="(Tensor grad, SymInt[] input_sizes, int diagonal) -> Tensor",
    make_samples=lambda: [
        Sample("3x5 k=0", (randn(3, 5, seed=1), 0)),
        Sample("3x5 k=1", (randn(3, 5, seed=2), 1)),
        Sample("5x3 k=-1", (randn(5, 3, seed=3), -1)),
        Sample("vector k=0", (randn(4, seed=4), 0)),
        Sample("vector k=1", (randn(3, seed=5), 1)),
        Sample("square 3x3 k=0", (randn(3, 3, seed=6), 0)),
    ],
    jvp=lambda a, o, t: (torch.diag(zero_if_none(t[0], a[0]), a[1]),),
    notes="Only the non-square matrix branch writes in place; 1-D and square inputs use grad.diag().",
))

register(OpSpec(
    name="index_select",
    torch_op=torch.index_select,
    formula=L.index_select_backward,
    formula_args=lambda a, o, g: (g[0], shape(a[0]), a[1], a[2]),
    grad_positions=(0,),
    source="TensorAdvancedIndexing.cpp index_select_backward: zeros(self_sizes).index_add_(dim, index, grad)",
    fixed_by="core pytorch#77578",
    schema="(Tensor grad, SymInt[] self_sizes, int dim, Tensor index) -> Tensor",
    make_samples=lambda: [
        Sample("dim0 repeated", (randn(4, 3, seed=11), 0, torch.tensor([0, 2, 2, 1, 0]))),
        Sample("dim1 repeated", (randn(4, 3, seed=12), 1, torch.tensor([2, 2, 0]))),
    ],
    jvp=lambda a, o, t: (torch.index_select(zero_if_none(t[0], a[0]), a[1], a[2]),),
))


register(OpSpec(
    name="topk",
    torch_op=lambda x, k, dim=-1, largest=True, sorted=True: tuple(torch.topk(x, k, dim, largest, sorted)),
    formula=L.value_selecting_reduction_backward,
    formula_args=lambda a, o, g: (g[0], a[2], o[1], shape(a[0]), True),
    grad_positions=(0,),
    source="ReduceOps.cpp value_selecting_reduction_backward (keepdim=true): zeros(sizes).scatter_(dim, indices, grad)",
    fixed_by="functorch f7ad909b; core pytorch#76731",
    schema="(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("k=2 dim=-1 largest", (randn(4, 5, seed=21), 2, -1, True, True)),
        Sample("k=2 dim=-1 smallest", (randn(4, 5, seed=22), 2, -1, False, True)),
        Sample("k=3 dim=0 largest", (randn(4, 5, seed=23), 3, 0, True, True)),
    ],
    jvp=lambda a, o, t: (gather_tangent(zero_if_none(t[0], a[0]), a[2], o[1], True), None),
))

register(OpSpec(
    name="sort",
    torch_op=lambda x, dim=-1, descending=False: tuple(torch.sort(x, dim=dim, descending=descending)),
    formula=L.value_selecting_reduction_backward,
    formula_args=lambda a, o, g: (g[0], a[1], o[1], shape(a[0]), True),
    grad_positions=(0,),
    source="ReduceOps.cpp value_selecting_reduction_backward (keepdim=true): zeros(sizes).scatter_(dim, indices, grad)",
    fixed_by="functorch f7ad909b; core pytorch#76731",
    schema="(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("dim=0 ascending", (randn(4, 5, seed=31), 0, False)),
        Sample("dim=0 descending", (randn(4, 5, seed=32), 0, True)),
        Sample("dim=-1 ascending", (randn(4, 5, seed=33), -1, False)),
        Sample("dim=-1 descending", (randn(4, 5, seed=34), -1, True)),
    ],
    jvp=lambda a, o, t: (gather_tangent(zero_if_none(t[0], a[0]), a[1], o[1], True), None),
))


def _mode_input(seed: int) -> torch.Tensor:
    # Small integer values so every row has a repeated value (a real mode) and ties.
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 3, (4, 5), generator=g).float()


register(OpSpec(
    name="mode",
    torch_op=lambda x, dim=-1, keepdim=False: tuple(torch.mode(x, dim, keepdim)),
    formula=L.value_selecting_reduction_backward,
    formula_args=lambda a, o, g: (g[0], a[1], o[1], shape(a[0]), a[2]),
    grad_positions=(0,),
    source="ReduceOps.cpp value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim): zeros(sizes).scatter_(dim, indices, grad)",
    fixed_by="functorch f7ad909b; core pytorch#76731",
    schema="(Tensor grad, int dim, Tensor indices, SymInt[] sizes, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("dim=-1 keepdim=False", (_mode_input(41), -1, False)),
        Sample("dim=-1 keepdim=True", (_mode_input(42), -1, True)),
        Sample("dim=0 keepdim=False", (_mode_input(43), 0, False)),
    ],
    jvp=lambda a, o, t: (gather_tangent(zero_if_none(t[0], a[0]), a[1], o[1], a[2]), None),
))


register(OpSpec(
    name="masked_select",
    torch_op=torch.masked_select,
    formula=L.masked_select_backward,
    formula_args=lambda a, o, g: (g[0], a[0], a[1]),
    grad_positions=(0,),
    source="TensorAdvancedIndexing.cpp masked_select_backward: zeros_like(input.expand(...)).masked_scatter_(mask, grad)",
    fixed_by="core pytorch#76794",
    schema="(Tensor grad, Tensor input, Tensor mask) -> Tensor",
    make_samples=lambda: [
        Sample("3x4 mask broadcast (4,)", (randn(3, 4, seed=51), mask(4, seed=52))),
        Sample("input (4,) broadcast to mask 3x4", (randn(4, seed=53), mask(3, 4, seed=54))),
    ],
    jvp=lambda a, o, t: (torch.masked_select(zero_if_none(t[0], a[0]), a[1]),),
    notes="The forward's output shape depends on the mask's values: only cotangent batching can "
    "ever work (functorch lists it as 'not possible due to dynamic shapes').",
))


def _as_tensor(v: Any, like: torch.Tensor) -> torch.Tensor | None:
    if v is None or isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype)


def _clamp_args(a: Args, o: tuple, g: tuple) -> Args:
    x = a[0]
    lo, hi = (a[1] if len(a) > 1 else None), (a[2] if len(a) > 2 else None)
    tensors = isinstance(lo, torch.Tensor) and isinstance(hi, torch.Tensor)
    return (g[0], x, _as_tensor(lo, x), _as_tensor(hi, x), tensors)


def _clamp_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    x, lo, hi = a[0], _as_tensor(a[1], a[0]), _as_tensor(a[2], a[0])
    zero = torch.zeros((), dtype=x.dtype)
    out = torch.where((x >= lo) & (x <= hi), zero_if_none(t[0], x), zero)
    if isinstance(a[1], torch.Tensor):
        out = out + torch.where((x < lo) & (lo < hi), zero_if_none(t[1], lo), zero)
        out = out + torch.where((x > hi) | (hi < lo), zero_if_none(t[2], hi), zero)
    return (out,)


register(OpSpec(
    name="clamp",
    torch_op=torch.clamp,
    formula=L.clamp_backward,
    formula_args=_clamp_args,
    grad_positions=(0, 1, 2),
    source="FunctionsManual.cpp clamp_backward / clamp_backward_min_max: (self >= min).logical_and_(self <= max)",
    fixed_by="core pytorch#69534",
    schema="(Tensor grad, Tensor self, Tensor? min, Tensor? max, bool min_max_grads) -> (Tensor, Tensor?, Tensor?)",
    make_samples=lambda: [
        Sample("Tensor min/max (max broadcast)",
               (randn(3, 4, seed=61), randn(3, 4, seed=62) - 0.5, randn(4, seed=63) + 0.5), (0, 1, 2)),
        Sample("scalar min/max", (randn(3, 4, seed=64), -0.5, 0.5)),
    ],
    jvp=_clamp_jvp,
    notes="Fails only under mixed batching: an unbatched in-place target (self >= min) receiving a "
    "batched operand (self <= max when only max is batched).",
))


def _prod_op(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> torch.Tensor:
    return torch.prod(x) if dim is None else torch.prod(x, dim, keepdim)


def _prod_input(zeros: Sequence[int], seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    for i in zeros:
        x.view(-1)[i] = 0.0
    return x


def _prod_jvp(a: Args, o: tuple, t: tuple) -> tuple:
    # The directional derivative through the legacy formula: as data-dependent as the formula.
    x, dim = a[0], (a[1] if len(a) > 1 else None)
    keepdim = a[2] if len(a) > 2 else False
    g = L.prod_legacy_backward(torch.ones_like(o[0]), x, o[0], dim, keepdim)
    tx = zero_if_none(t[0], x)
    return ((g * tx).sum() if dim is None else (g * tx).sum(dim, keepdim),)


def _prod_entry(position: int, entry: torch.Tensor, b: int) -> torch.Tensor:
    """Batch entry ``b`` of prod's input with ``(zeros + b) % 3`` zeros (``zeros``: the entry's
    own count), so a batch of 3 holds a no-zero, a one-zero and a two-zeros entry: each takes a
    different branch of the legacy formula. The zeros go where ``|x|`` is smallest."""
    if position != 0:
        return entry
    flat = entry.reshape(-1).clone()
    want = (int((flat == 0).sum()) + b) % 3
    flat[flat == 0] = 0.5 * (1.0 + b / 4.0)
    flat[torch.argsort(flat.abs(), stable=True)[:want]] = 0.0
    return flat.reshape(entry.shape)


register(OpSpec(
    name="prod",
    torch_op=_prod_op,
    formula=L.prod_legacy_backward,
    formula_args=lambda a, o, g: (g[0], a[0], o[0], a[1] if len(a) > 1 else None, a[2] if len(a) > 2 else False),
    grad_positions=(0,),
    source="FunctionsManual.cpp prod_backward / prod_safe_zeros_backward: (input == 0).nonzero(), .item() drive control flow",
    fixed_by="core pytorch#81969",
    schema="(Tensor grad, Tensor input, Tensor result, int? dim, bool keepdim) -> Tensor",
    make_samples=lambda: [
        Sample("full, no zeros", (_prod_input([], 71),)),
        Sample("full, one zero", (_prod_input([5], 72),)),
        Sample("full, two zeros", (_prod_input([1, 6], 73),)),
        Sample("dim=1, no zeros", (_prod_input([], 74), 1, False)),
        Sample("dim=1, one zero", (_prod_input([5], 75), 1, False)),
        Sample("dim=1, two zeros", (_prod_input([4, 5], 76), 1, True)),
    ],
    jvp=_prod_jvp,
    batch_entry=_prod_entry,
    group="test",
    notes="A negative control: no in-place op, but data-dependent control flow (.item(), nonzero) "
    "that functionalization cannot remove.",
))
