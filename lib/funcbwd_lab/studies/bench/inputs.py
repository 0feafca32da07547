"""The bench's inputs: each op's first catalog sample scaled to a named size, and cotangents.

``resize(spec, "large")`` scales every dim of the op's first sample by ``SIZES["large"]`` (index,
``k`` and mask scaled with it) and runs the op once, so a resize that breaks the op raises here
rather than inside a timing. Every tensor comes from a seeded generator: two runs time the same
numbers.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from funcbwd.errors import parse_names
from funcbwd_lab.studies.bench.config import SIZES
from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.run.scenario import output_shapes


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(shape: Sequence[int], seed: int) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=generator(seed))


def _scaled(t: torch.Tensor, f: int) -> list[int]:
    return [s * f for s in t.shape]


def _resize_index_select(a: tuple, f: int, seed: int) -> tuple:
    x, dim, index = a
    big = _randn(_scaled(x, f), seed)
    idx = torch.randint(0, big.shape[dim], (index.numel() * f,), generator=generator(seed + 1))
    return (big, dim, idx)


def _resize_masked_select(a: tuple, f: int, seed: int) -> tuple:
    x, mask = a
    m = torch.rand(_scaled(mask, f), generator=generator(seed + 1)) > 0.5
    m.view(-1)[0] = True
    return (_randn(_scaled(x, f), seed), m)


def _resize_clamp(a: tuple, f: int, seed: int) -> tuple:
    x, lo, hi = a
    big = _randn(_scaled(x, f), seed)
    if isinstance(lo, torch.Tensor):
        lo = _randn(_scaled(lo, f), seed + 1) - 0.5
    if isinstance(hi, torch.Tensor):
        hi = _randn(_scaled(hi, f), seed + 2) + 0.5
    return (big, lo, hi)


def _resize_mode(a: tuple, f: int, seed: int) -> tuple:
    # small integer values, as the catalog's sample: every row keeps a real mode and ties
    x = torch.randint(0, 3, _scaled(a[0], f), generator=generator(seed)).float()
    return (x, *a[1:])


def _resize_prod(a: tuple, f: int, seed: int) -> tuple:
    # values near 1 and no zeros: the product of thousands of entries stays finite
    return (1.0 + 0.01 * _randn(_scaled(a[0], f), seed), *a[1:])


def _resize_topk(a: tuple, f: int, seed: int) -> tuple:
    x, k, *rest = a
    return (_randn(_scaled(x, f), seed), k * f, *rest)


def _resize_generic(a: tuple, f: int, seed: int) -> tuple:
    """Every floating tensor regenerated at ``f`` times each dim; everything else unchanged
    (the size check in :func:`resize` rejects the result when that breaks the op)."""
    return tuple(_randn(_scaled(t, f), seed + i) if isinstance(t, torch.Tensor) and t.is_floating_point()
                 else t for i, t in enumerate(a))


_RESIZERS: dict[str, Callable[[tuple, int, int], tuple]] = {
    "index_select": _resize_index_select,
    "masked_select": _resize_masked_select,
    "clamp": _resize_clamp,
    "mode": _resize_mode,
    "prod": _resize_prod,
    "topk": _resize_topk,
}


def resize(spec: OpSpec, size: str) -> Sample:
    """The op's first sample with every dim scaled by ``SIZES[size]`` (index/k/mask scaled too)."""
    factor = SIZES[parse_names("size", [size], SIZES)[0]]
    base = spec.samples()[0]
    if factor == 1:
        return base
    seed = 1000 + sum(map(ord, spec.name)) + factor
    args = _RESIZERS.get(spec.name, _resize_generic)(base.args, factor, seed)
    smp = Sample(f"{base.name} x{factor}", args, base.diff)
    with torch.no_grad():
        spec.torch_op(*smp.args)  # raises if the resize broke the op
    return smp


def shape_text(sample: Sample) -> str:
    return "x".join(str(s) for s in sample.args[sample.diff[0]].shape)


def cotangents(spec: OpSpec, smp: Sample, batch: int, seed: int) -> tuple[torch.Tensor, ...]:
    """A batch of ``batch`` seeded cotangents per differentiable output of ``spec`` on ``smp``."""
    dtype = smp.args[smp.diff[0]].dtype
    return tuple(torch.randn((batch, *sh), generator=generator(seed + i), dtype=dtype)
                 for i, sh in enumerate(output_shapes(spec, smp)))
