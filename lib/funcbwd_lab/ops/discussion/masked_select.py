"""masked_select: its legacy backward, the modern one right below it, and its registration.

* **Legacy** (PyTorch ~1.10/1.11): ``aten/src/ATen/native/TensorAdvancedIndexing.cpp``
  ``masked_select_backward(grad, input, mask)``: ``zeros_like(input.expand(infer_size(input.sizes(),
  mask.sizes())))``, then ``.masked_scatter_(mask, grad)`` ("as an optimization, we call the
  in-place variant of masked_scatter").
* **Fixed** by core pytorch#76794 (out-of-place ``masked_scatter`` branch). The forward's output
  length depends on the mask's contents, so only cotangent batching can ever work (functorch lists
  it as "not possible due to dynamic shapes").
* **Modern**: that subclass-like branch, ``zeros_like(input.expand(...)).masked_scatter(mask,
  grad)``.

The lesson on one screen: ``masked_scatter_`` becomes ``masked_scatter``. In both, the final
``sum_to_size`` stands for the autograd engine's reduction of a broadcast grad to the input's shape.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.helpers import mask, randn, zero_if_none
from funcbwd_lab.ops.registry import OpSpec, Sample, register


# TensorAdvancedIndexing.cpp masked_select_backward(grad, input, mask).
# Fixed by core pytorch#76794 (out-of-place masked_scatter branch). The final sum_to_size stands
# for the autograd engine's reduction of a broadcast grad to the input's shape.
def masked_select_backward(
    grad: torch.Tensor, input: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    # "as an optimization, we call the in-place variant of masked_scatter", which does not
    # broadcast its LHS, so broadcast explicitly first.
    result = torch.zeros_like(
        input.expand(torch.broadcast_shapes(input.shape, mask.shape)),
        memory_format=torch.preserve_format,
    )
    return result.masked_scatter_(mask, grad).sum_to_size(input.shape)


# aten/src/ATen/native/TensorAdvancedIndexing.cpp masked_select_backward: the subclass-like
# branch, zeros_like(input.expand(infer_size(input, mask))).masked_scatter(mask, grad)
# (pytorch#76794). The final sum_to_size stands for the autograd engine's reduction of the
# broadcast grad to the input's shape, as in the legacy formula.
def masked_select_backward_modern(
    grad: torch.Tensor, input: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    result = torch.zeros_like(
        input.expand(torch.broadcast_shapes(input.shape, mask.shape)),
        memory_format=torch.preserve_format,
    )
    return result.masked_scatter(mask, grad).sum_to_size(input.shape)


register(OpSpec(
    name="masked_select",
    torch_op=torch.masked_select,
    formula=masked_select_backward,
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
    handfixed=masked_select_backward_modern,
))
