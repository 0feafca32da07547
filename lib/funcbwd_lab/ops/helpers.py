"""Helpers a formula author needs: the legacy zeros factory, shapes, seeded inputs, tangents, masks.

Public on purpose (``funcbwd_lab.ops.helpers``, also ``funcbwd_lab.helpers``): with them a formula and
its registration are a few lines (docs/adding-a-formula.md). Every random input is seeded from
its own generator, so samples are the same on every run and never touch the global RNG.
"""

from __future__ import annotations

from typing import Sequence

import torch


def zeros_like_grad(sizes: Sequence[int], grad: torch.Tensor) -> torch.Tensor:
    """``at::zeros(sizes, grad.options())``: zeros of shape ``sizes`` with ``grad``'s dtype and
    device, the unbatched factory behind most legacy formulas. Under vmap the result is *not*
    batched even when ``grad`` is; writing ``grad`` into it in place is the failure funcbwd
    studies, so keep it when transcribing a legacy formula."""
    return torch.zeros(tuple(sizes), dtype=grad.dtype, device=grad.device)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``torch.randn(*shape)`` from its own seeded generator (reproducible, no global RNG)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype)


def shape(t: torch.Tensor) -> list[int]:
    """The sizes of ``t`` as a list (what C++ formulas receive as ``IntArrayRef sizes``)."""
    return list(t.shape)


def gather_tangent(t: torch.Tensor, dim: int, indices: torch.Tensor, keepdim: bool) -> torch.Tensor:
    """The tangent of a value-selecting reduction: ``t`` gathered at the selected ``indices``."""
    if t.dim() == 0:
        return t
    if not keepdim:
        return t.gather(dim, indices.unsqueeze(dim)).squeeze(dim)
    return t.gather(dim, indices)


def zero_if_none(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """A missing (None) tangent or grad as zeros shaped like ``like``."""
    return torch.zeros_like(like) if t is None else t


def arg_tangent(args: Sequence, tangents: Sequence, i: int = 0) -> torch.Tensor:
    """The tangent of argument ``i`` of a jvp rule's ``(args, tangents)``, zeros when it has none."""
    return zero_if_none(tangents[i], args[i])


def mask(*shape: int, seed: int) -> torch.Tensor:
    """A seeded random boolean mask that is never all False."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) > 0.5
    m.view(-1)[0] = True  # never empty
    return m


__all__ = ["zeros_like_grad", "randn", "shape", "gather_tangent", "zero_if_none", "mask"]
