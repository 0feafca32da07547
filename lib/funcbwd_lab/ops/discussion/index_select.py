"""index_select: its legacy backward, the modern one right below it, and its registration.

* **Legacy** (PyTorch ~1.10/1.11): ``aten/src/ATen/native/TensorAdvancedIndexing.cpp``
  ``index_select_backward(grad, self_sizes, dim, index)``:
  ``at::zeros(self_sizes, grad.options()).index_add_(dim, index, grad)``, the batched grad added
  in place into an unbatched zeros.
* **Fixed** by core pytorch#77578 (``grad.new_zeros``, out-of-place ``index_add`` for a
  subclass-like index).
* **Modern**: that subclass-like branch, ``grad.new_zeros(self_sizes).index_add(dim, index,
  grad)``; under functorch transforms torch runs ``aten/src/ATen/functorch/
  PyTorchOperatorHacks.cpp`` ``index_select_backward_hack`` instead (``at::zeros(..).index_add``).

The lesson on one screen: ``index_add_`` becomes ``index_add`` on ``grad.new_zeros``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from funcbwd_lab.ops.helpers import randn, shape, zero_if_none, zeros_like_grad
from funcbwd_lab.ops.registry import OpSpec, Sample, register


# TensorAdvancedIndexing.cpp index_select_backward(grad, self_sizes, dim, index).
# Fixed by core pytorch#77578 (grad.new_zeros, out-of-place index_add for subclass-like index).
def index_select_backward(
    grad: torch.Tensor, self_sizes: Sequence[int], dim: int, index: torch.Tensor
) -> torch.Tensor:
    return zeros_like_grad(self_sizes, grad).index_add_(dim, index, grad)


# aten/src/ATen/native/TensorAdvancedIndexing.cpp index_select_backward_symint: the branch taken
# for a subclass-like index, grad.new_zeros(self_sizes).index_add(dim, index, grad)
# (pytorch#77578). Under functorch transforms torch runs aten/src/ATen/functorch/
# PyTorchOperatorHacks.cpp index_select_backward_hack instead: at::zeros(..).index_add(..).
def index_select_backward_modern(
    grad: torch.Tensor, self_sizes: Sequence[int], dim: int, index: torch.Tensor
) -> torch.Tensor:
    return grad.new_zeros(tuple(self_sizes)).index_add(dim, index, grad)


register(OpSpec(
    name="index_select",
    torch_op=torch.index_select,
    formula=index_select_backward,
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
    handfixed=index_select_backward_modern,
))
