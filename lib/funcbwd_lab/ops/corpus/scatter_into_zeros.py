"""Extended corpus, zeros + scatter / put / index_put: gather, take, cummax / cummin, index.

Each legacy backward (PyTorch ~1.10/1.11) makes an unbatched zeros tensor and accumulates the
batched grad into it in place (``scatter_add_``, ``put_``, ``index_put_``); core's modern formula,
right below each, is the same accumulation out of place (the subclass-like branch core added),
mostly on ``grad.new_zeros`` so the target inherits the grad's batching. Registered in group
``extended``, in this order.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import arg_tangent as _t
from funcbwd_lab.ops.helpers import gather_tangent, randn, shape, zeros_like_grad
from funcbwd_lab.ops.registry import OpSpec, Sample, register


# ------------------------------------------------------------------------------ gather
# TensorAdvancedIndexing.cpp gather_backward(grad, self, dim, index, sparse_grad=false).
# Fixed by core pytorch#93164.
def gather_backward(grad: torch.Tensor, self_sizes: Sequence[int], dim: int,
                    index: torch.Tensor) -> torch.Tensor:
    return zeros_like_grad(self_sizes, grad).scatter_add_(dim, index, grad)


# aten/src/ATen/native/TensorAdvancedIndexing.cpp gather_backward: the subclass-like branch,
# grad.new_zeros(self.sizes()).scatter_add(dim, index, grad) (pytorch#93164).
def gather_backward_modern(grad: torch.Tensor, self_sizes: Sequence[int], dim: int,
                           index: torch.Tensor) -> torch.Tensor:
    return grad.new_zeros(tuple(self_sizes)).scatter_add(dim, index, grad)


register(OpSpec(
    name="gather",
    torch_op=torch.gather,
    formula=gather_backward,
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
    handfixed=gather_backward_modern,
))


# ------------------------------------------------------------------------------ take
# derivatives.yaml take: "self: zeros_like(self).put_(index, grad, true)".
# Fixed by core pytorch#81094 (users hit it through jacrev, pytorch#95738).
def take_backward(grad: torch.Tensor, self: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(self).put_(index, grad, accumulate=True)


# torch/csrc/autograd/FunctionsManual.cpp take_backward: the subclass-like branch,
# zeros_like(self).put(indices, grad, /*accumulate=*/true) (pytorch#81094).
def take_backward_modern(grad: torch.Tensor, self: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(self).put(index, grad, accumulate=True)


register(OpSpec(
    name="take",
    torch_op=torch.take,
    formula=take_backward,
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
    handfixed=take_backward_modern,
))


# ------------------------------------------------------------------------------ cummax / cummin
# ReduceOps.cpp cummaxmin_backward(grad, input, indices, dim) (cummax and cummin).
# Fixed by core pytorch#77872.
def cummaxmin_backward(grad: torch.Tensor, input: torch.Tensor, indices: torch.Tensor,
                       dim: int) -> torch.Tensor:
    if input.numel() == 0:
        return input
    result = torch.zeros(input.shape, dtype=input.dtype, device=input.device)
    return result.scatter_add_(dim, indices, grad)


# aten/src/ATen/native/ReduceOps.cpp cummaxmin_backward: the subclass-like branch,
# at::zeros(input.sizes(), input.options()).scatter_add(dim, indices, grad) (pytorch#77872).
def cummaxmin_backward_modern(grad: torch.Tensor, input: torch.Tensor, indices: torch.Tensor,
                              dim: int) -> torch.Tensor:
    if input.numel() == 0:
        return input
    return zeros_like_grad(input.shape, input).scatter_add(dim, indices, grad)


def _cum_op(fn):
    return lambda x, dim: tuple(fn(x, dim))


for _name, _fn in (("cummax", torch.cummax), ("cummin", torch.cummin)):
    register(OpSpec(
        name=_name,
        torch_op=_cum_op(_fn),
        formula=cummaxmin_backward,
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
        handfixed=cummaxmin_backward_modern,
    ))


# ------------------------------------------------------------------------------ index (x[idx])
# FunctionsManual.cpp index_backward(zeros_like_self, indices, grad) with derivatives.yaml
# "self: index_backward(zeros_like(self), indices, grad)": _index_put_impl_(zeros, indices, grad,
# accumulate=true, unsafe=true). Fixed by the subclass-like out-of-place branch in index_backward.
def index_backward(grad: torch.Tensor, self: torch.Tensor, *indices: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(self).index_put_(tuple(indices), grad, accumulate=True)


# derivatives.yaml index.Tensor "index_backward(grad.new_zeros_symint(self.sym_sizes(),
# self.options()), indices, grad)" with torch/csrc/autograd/FunctionsManual.cpp index_backward's
# subclass-like branch, zeros_like_self.index_put(indices, grad, /*accumulate=*/true).
def index_backward_modern(grad: torch.Tensor, self: torch.Tensor, *indices: torch.Tensor) -> torch.Tensor:
    return grad.new_zeros(self.shape).index_put(tuple(indices), grad, accumulate=True)


register(OpSpec(
    name="index",
    torch_op=lambda x, *indices: x[indices],
    formula=index_backward,
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
    handfixed=index_backward_modern,
))
