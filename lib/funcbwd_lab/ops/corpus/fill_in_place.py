"""Extended corpus, in-place fills: trace, full-reduction max / min / median, and the self grads
of index_fill, index_copy and masked_fill.

Each legacy formula (PyTorch ~1.10/1.11) ``index_fill_`` / ``masked_fill_`` a tensor vmap may not
be able to batch in place (zeros, ``grad.new_zeros`` or a clone of ``grad``); core's modern formula,
right below each, fills out of place (or, for trace, ``index_put`` as functorch's override does).
Registered in group ``extended``, in this order, right after :mod:`funcbwd_lab.ops.corpus.copy_into_view`.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import arg_tangent as _t
from funcbwd_lab.ops.helpers import mask, randn, shape, zeros_like_grad
from funcbwd_lab.ops.registry import Args, OpSpec, Sample, register


# ------------------------------------------------------------------------------ trace
# trace_backward(grad, sizes): zeros(numel), index_fill_ the diagonal's flat indices with the
# (0-dim) grad, then view. Fixed by core pytorch#77578.
def trace_backward(grad: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    if len(sizes) != 2:
        raise RuntimeError("expected matrix input")
    grad_input = torch.zeros(sizes[0] * sizes[1], dtype=grad.dtype, device=grad.device)
    indices = torch.arange(0, grad_input.numel(), sizes[1] + 1, device=grad.device)
    grad_input.index_fill_(0, indices, grad)
    return grad_input.view(tuple(sizes))


# What torch runs for trace under functorch transforms: aten/src/ATen/functorch/
# PyTorchOperatorHacks.cpp trace_backward_decomp (registered on FuncTorchDynamicLayerFrontMode),
# zeros(rows * cols).index_put({indices}, grad).view(sizes) ("workaround using index_put instead of
# yet unsupported index_fill_"), with min(rows, cols) diagonal indices as in the current version.
# Core's own aten/src/ATen/native/TriangularOps.cpp trace_backward_symint subclass-like branch,
# zeros(..).index_fill(0, indices, grad), gives WRONG numbers under vmap on torch 2.13 (the
# index_fill.int_Tensor batch rule with an unbatched self and a batched 0-dim value), which is why
# functorch overrides it.
def trace_backward_modern(grad: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    if len(sizes) != 2:
        raise RuntimeError("expected matrix input")
    step = sizes[1] + 1
    indices = torch.arange(0, min(sizes[0], sizes[1]) * step, step, device=grad.device)
    grad_input = zeros_like_grad([sizes[0] * sizes[1]], grad).index_put((indices,), grad)
    return grad_input.view(tuple(sizes))


register(OpSpec(
    name="trace",
    torch_op=torch.trace,
    formula=trace_backward,
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
    handfixed=trace_backward_modern,
))


# ------------------------------------------------------------------------------ max() / min() / median()
# FunctionsManual.cpp evenly_distribute_backward(grad, input, value) (full-reduction max, min,
# median), CPU branch: ".item()" on value.isnan() picks the mask, then grad.new_zeros(...)
# .masked_fill_(mask, grad / mask.sum()). Fixed by core pytorch#69534.
def evenly_distribute_backward(grad: torch.Tensor, input: torch.Tensor,
                               value: torch.Tensor) -> torch.Tensor:
    mask = input.isnan() if value.isnan().item() else input == value
    return grad.new_zeros(input.shape).masked_fill_(mask, grad / mask.sum())


# torch/csrc/autograd/FunctionsManual.cpp evenly_distribute_backward (full max/min/median): the
# subclass-like (and CUDA) branch, no .item(): mask = (input == value) | (isnan(input) &
# isnan(value)); mask * (grad / mask.sum()). Core's logical_or_ writes into the fresh
# (input == value), batched whenever its operands are; written out of place here.
def evenly_distribute_backward_modern(grad: torch.Tensor, input: torch.Tensor,
                                      value: torch.Tensor) -> torch.Tensor:
    input_and_value_isnan = input.isnan().logical_and(value.isnan())
    mask = (input == value).logical_or(input_and_value_isnan)
    return mask * (grad / mask.sum())


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
        formula=evenly_distribute_backward,
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
        handfixed=evenly_distribute_backward_modern,
    ))


# ------------------------------------------------------------------------------ index_fill (self)
# derivatives.yaml index_fill.int_Scalar / index_copy (self): "grad.clone().index_fill_(dim,
# index, 0)". In place into a clone of grad: fails only when the index is batched and grad is not.
# Fixed by core pytorch#71751 / #71765 (out-of-place index_fill for subclass-like tensors).
def index_fill_self_backward(grad: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    return grad.clone().index_fill_(dim, index, 0)


# derivatives.yaml index_fill.int_Scalar "self: grad.index_fill(dim, index, 0)" (pytorch#71751).
def index_fill_self_backward_modern(grad: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    return grad.index_fill(dim, index, 0)


register(OpSpec(
    name="index_fill",
    torch_op=torch.index_fill,
    formula=index_fill_self_backward,
    formula_args=lambda a, o, g: (g[0], a[1], a[2]),
    grad_positions=(0,),
    source="derivatives.yaml index_fill.int_Scalar: self: grad.clone().index_fill_(dim, index, 0)",
    fixed_by="core pytorch#71751 / #71765",
    schema="(Tensor grad, int dim, Tensor index) -> Tensor",
    make_samples=lambda: [Sample("4x3 dim=0", (randn(4, 3, seed=221), 0, torch.tensor([1, 3]), -1.5))],
    jvp=lambda a, o, t: (torch.index_fill(_t(a, t), a[1], a[2], 0.0),),
    group="extended",
    notes="Self grad only. In place into a clone of grad: fails only when index is batched and grad is not.",
    handfixed=index_fill_self_backward_modern,
))


# ------------------------------------------------------------------------------ index_copy
# derivatives.yaml index_copy: self as index_fill; source: grad.index_select(dim, index).
# Fixed like index_fill by core pytorch#71751 / #71765.
def index_copy_backward(grad: torch.Tensor, dim: int, index: torch.Tensor,
                        source_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    grad_self = grad.clone().index_fill_(dim, index, 0)
    grad_source = grad.index_select(dim, index)
    return grad_self, (grad_source if source_dim > 0 else grad_source.squeeze(dim))


# derivatives.yaml index_copy "self: grad.index_fill(dim, index, 0)"; "source: source.dim() > 0 ?
# grad.index_select(dim, index).expand_as(source) : grad.index_select(dim, index.squeeze(0))"
# (the legacy signature carries source.dim(), not source, so the 0-dim case squeezes instead).
def index_copy_backward_modern(grad: torch.Tensor, dim: int, index: torch.Tensor,
                               source_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    grad_self = grad.index_fill(dim, index, 0)
    grad_source = grad.index_select(dim, index)
    return grad_self, (grad_source if source_dim > 0 else grad_source.squeeze(dim))


register(OpSpec(
    name="index_copy",
    torch_op=torch.index_copy,
    formula=index_copy_backward,
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
    handfixed=index_copy_backward_modern,
))


# ------------------------------------------------------------------------------ masked_fill (self)
# derivatives.yaml masked_fill.Scalar (self): "grad.clone().masked_fill_(mask, 0)".
# Fixed with index_fill (pytorch#71751 series). Sums over broadcast dims like the engine does.
def masked_fill_self_backward(grad: torch.Tensor, mask: torch.Tensor,
                              self_sizes: Sequence[int]) -> torch.Tensor:
    return grad.clone().masked_fill_(mask, 0).sum_to_size(tuple(self_sizes))


# derivatives.yaml masked_fill.Scalar "self: grad.masked_fill(mask, 0)"; sum_to_size stands for
# the engine's reduction over broadcast dims, as in the legacy formula.
def masked_fill_self_backward_modern(grad: torch.Tensor, mask: torch.Tensor,
                                     self_sizes: Sequence[int]) -> torch.Tensor:
    return grad.masked_fill(mask, 0).sum_to_size(tuple(self_sizes))


register(OpSpec(
    name="masked_fill",
    torch_op=torch.masked_fill,
    formula=masked_fill_self_backward,
    formula_args=lambda a, o, g: (g[0], a[1], shape(a[0])),
    grad_positions=(0,),
    source="derivatives.yaml masked_fill.Scalar: self: grad.clone().masked_fill_(mask, 0)",
    fixed_by="core pytorch#71751 series (out-of-place for subclass-like tensors)",
    schema="(Tensor grad, Tensor mask, SymInt[] self_sizes) -> Tensor",
    make_samples=lambda: [Sample("3x4 mask (4,)", (randn(3, 4, seed=241), mask(4, seed=242), 2.0))],
    jvp=lambda a, o, t: (torch.masked_fill(_t(a, t), a[1], 0.0),),
    group="extended",
    notes="Self grad only. Fails only when the mask is batched and grad is not.",
    handfixed=masked_fill_self_backward_modern,
))
