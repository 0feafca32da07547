"""Helpers a formula author needs: seeded inputs, shapes, tangents and masks.

Public on purpose (``funcbwd.ops.helpers``): a registration of a simple op is a few lines with them.
"""

from __future__ import annotations

import torch


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



def mask(*shape: int, seed: int) -> torch.Tensor:
    """A seeded random boolean mask that is never all False."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) > 0.5
    m.view(-1)[0] = True  # never empty
    return m
