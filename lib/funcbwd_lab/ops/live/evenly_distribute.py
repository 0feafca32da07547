"""Live backward sites of ``evenly_distribute_backward`` (full-reduction ``max()``, pytorch#69534):
site #1, a control (``.item()`` + ``masked_fill_`` on CPU plain tensors), and site #2, the
in-place ``logical_and_`` plain tensors reach on CUDA.

Conventions (``fast``, site comments, registration): :mod:`funcbwd_lab.ops.live.backward`.
"""

from __future__ import annotations

import torch

from funcbwd_lab.ops.live.common import randn, register_site
from funcbwd_lab.ops.registry import Sample


def evenly_distribute_backward(grad, input, value, *, fast=()):
    """evenly_distribute_backward(grad, input, value): backward of full-reduction max/min/median.

    One areAnyTensorSubclassLike call, two decisions: site 1 picks the CPU plain-tensor branch
    (``.item()`` + ``masked_fill_``, a data-dependent control); site 2 is the in-place
    ``logical_and_`` that plain tensors reach on CUDA only (it runs here on CPU, same maths)."""
    if 1 in fast:  # site 1: !(any_tensor_subclass_like || input.is_cuda())
        mask = input.isnan() if value.isnan().item() else input == value
        return grad.new_zeros(input.shape).masked_fill_(mask, grad / mask.sum())
    input_isnan = input.isnan()
    value_isnan = value.isnan()
    # site 2: any_tensor_subclass_like
    both = input_isnan.logical_and_(value_isnan) if 2 in fast else input_isnan.logical_and(value_isnan)
    mask = (input == value).logical_or_(both)
    return mask * (grad / mask.sum())


def _max_ties(seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed).clamp(-1.5, 1.5)
    x.view(-1)[[1, 6, 9]] = 2.0
    return x


def _with_nan(seed: int) -> torch.Tensor:
    x = randn(3, 4, seed=seed)
    x.view(-1)[[2, 7]] = float("nan")
    return x


# ------------------------------------------------------------------ max() (pytorch#69534)
_EVEN = dict(torch_op=torch.max, formula_args=lambda a, o, g: (g[0], a[0], o[0]), grad_positions=(0,),
             schema="(Tensor grad, Tensor input, Tensor value) -> Tensor", fixed_by="pytorch#69534",
             samples=lambda: [Sample("max tied x3", (_max_ties(321),), (0,)),
                              Sample("NaN x2 (max is NaN)", (_with_nan(322),), (0,))])
register_site(evenly_distribute_backward, 1, "control", fast_calls=("item", "masked_fill_"),
              fast=".item() on value.isnan(), then new_zeros().masked_fill_(mask, ...)",
              slow="mask * (grad / mask.sum())",
              notes="Core's CPU plain-tensor branch; under cotangent-only vmap .item() reads an "
              "unbatched value, so it fails only when the primal is batched.", **_EVEN)
register_site(evenly_distribute_backward, 2, "backward", fast_calls=("logical_and_",),
              fast="input_isnan.logical_and_(value_isnan)", slow="logical_and",
              notes="Core reaches this in-place branch for plain tensors on CUDA only.", **_EVEN)
