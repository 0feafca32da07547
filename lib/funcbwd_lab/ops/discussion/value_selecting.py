"""topk, sort and mode: one shared legacy backward, the modern one right below it, and the three
registrations.

* **Legacy** (PyTorch ~1.10/1.11): ``aten/src/ATen/native/ReduceOps.cpp``
  ``value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim)``, shared by topk, sort
  and mode (kthvalue and max/min/median with a dim use it too; topk and sort pass
  ``keepdim=true``): when ``!keepdim``, unsqueeze ``grad`` and ``indices`` at ``dim``, then
  ``at::zeros(sizes, grad.options()).scatter_(dim, indices, grad)``.
* **Fixed** by functorch f7ad909b (out-of-place scatter) and core pytorch#76731.
* **Modern**: ``value_selecting_reduction_backward_symint``'s subclass-like branch,
  ``at::zeros_symint(sizes, grad.options()).scatter(dim, indices, grad)``.

The lesson on one screen: one character, ``scatter_`` becomes ``scatter``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import gather_tangent, randn, shape, zero_if_none, zeros_like_grad
from funcbwd_lab.ops.registry import OpSpec, Sample, register


# ReduceOps.cpp value_selecting_reduction_backward(grad, dim, indices, sizes, keepdim)
# (topk, sort and mode; kthvalue and max/min/median with dim use it too).
# Fixed by functorch f7ad909b (out-of-place scatter) and core pytorch#76731.
def value_selecting_reduction_backward(
    grad: torch.Tensor, dim: int, indices: torch.Tensor, sizes: Sequence[int], keepdim: bool
) -> torch.Tensor:
    if not keepdim and len(sizes) > 0:
        grad = grad.unsqueeze(dim)
        indices = indices.unsqueeze(dim)
    return zeros_like_grad(sizes, grad).scatter_(dim, indices, grad)


# aten/src/ATen/native/ReduceOps.cpp value_selecting_reduction_backward_symint: the
# subclass-like branch, at::zeros_symint(sizes, grad.options()).scatter(dim, indices, grad)
# (out of place; core uses scatter_ only for plain tensors). Fixed in core by pytorch#76731.
def value_selecting_reduction_backward_modern(
    grad: torch.Tensor, dim: int, indices: torch.Tensor, sizes: Sequence[int], keepdim: bool
) -> torch.Tensor:
    if not keepdim and len(sizes) > 0:
        grad = grad.unsqueeze(dim)
        indices = indices.unsqueeze(dim)
    return zeros_like_grad(sizes, grad).scatter(dim, indices, grad)


register(OpSpec(
    name="topk",
    torch_op=lambda x, k, dim=-1, largest=True, sorted=True: tuple(torch.topk(x, k, dim, largest, sorted)),
    formula=value_selecting_reduction_backward,
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
    handfixed=value_selecting_reduction_backward_modern,
))

register(OpSpec(
    name="sort",
    torch_op=lambda x, dim=-1, descending=False: tuple(torch.sort(x, dim=dim, descending=descending)),
    formula=value_selecting_reduction_backward,
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
    handfixed=value_selecting_reduction_backward_modern,
))


def _mode_input(seed: int) -> torch.Tensor:
    # Small integer values so every row has a repeated value (a real mode) and ties.
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 3, (4, 5), generator=g).float()


register(OpSpec(
    name="mode",
    torch_op=lambda x, dim=-1, keepdim=False: tuple(torch.mode(x, dim, keepdim)),
    formula=value_selecting_reduction_backward,
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
    handfixed=value_selecting_reduction_backward_modern,
))
