"""Distinct batch entries: what a scenario stacks when it batches a primal, an index, a mask or a
cotangent.

Each entry of a batch is its own valid value, so a strategy that silently used entry 0's index
(or mask, or ordering) for every entry cannot pass. Entry 0 is the sample's value itself; entry
``b >= 1`` is built from it by a seeded rule that keeps what the sample exists for:

* floating tensors: the flattened values permuted, then scaled by ``1 + b/4`` (ties, zeros and
  signs kept; orderings, hence topk/sort/mode indices, change);
* integer tensors (indices): the distinct values relabelled by a seeded bijection among
  themselves (so every value stays valid and the repeat pattern is kept), then positions permuted;
* bool tensors (masks): positions permuted (the number of True values, hence masked_select's
  output size, is kept).

One permutation per (entry, shape) is shared by all values of that shape, so elementwise
relations between same-shaped args (e.g. a tie ``x == min`` in clamp) survive. Integer and bool
entries are redrawn (up to :data:`ATTEMPTS` times) until each differs from every earlier entry
whenever any other arrangement exists. An op whose samples need more (prod: entries with
different zero COUNTS, so entries take different branches) sets ``OpSpec.batch_entry``, which gets
the generic entry and returns the one to use.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import torch

from funcbwd.errors import BadInputError
from funcbwd_lab.ops.registry import OpSpec

ATTEMPTS = 16


def _generator(*key: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))


def _relabel(a: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """``a`` with its distinct values mapped by a seeded bijection among themselves."""
    values = torch.unique(a)
    shuffled = values[torch.randperm(values.numel(), generator=g)]
    return shuffled[torch.searchsorted(values, a.reshape(-1))].reshape(a.shape)


def _generic(a: torch.Tensor, b: int, perm: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    if a.is_floating_point() or a.is_complex():
        return a.reshape(-1)[perm].reshape(a.shape) * (1.0 + b / 4.0)
    if a.dtype == torch.bool:
        return a.reshape(-1)[perm].reshape(a.shape)
    return _relabel(a, g).reshape(-1)[perm].reshape(a.shape)


def _rearrangeable(a: torch.Tensor) -> bool:
    """True if some other arrangement of ``a``'s values exists (more than one distinct value)."""
    return a.numel() > 1 and torch.unique(a).numel() > 1


def distinct_entries(values: Sequence[torch.Tensor], batch: int, seed: int = 0, *,
                     op: OpSpec | None = None, positions: Sequence[int | None] | None = None
                     ) -> list[list[torch.Tensor]]:
    """``batch`` entries of each value: ``out[i][b]`` is entry ``b`` of ``values[i]``.

    ``positions[i]`` is the sample-arg position of ``values[i]`` (None for a cotangent): it is
    what ``op.batch_entry(position, entry, b)`` receives."""
    positions = list(positions) if positions is not None else [None] * len(values)
    out: list[list[torch.Tensor]] = [[v.detach().clone()] for v in values]
    for b in range(1, batch):
        for attempt in range(ATTEMPTS):
            perms: dict[tuple[int, ...], torch.Tensor] = {}
            cand = []
            for i, v in enumerate(values):
                shape = tuple(v.shape)
                if shape not in perms:
                    perms[shape] = torch.randperm(v.numel(), generator=_generator(seed, b, attempt, shape))
                cand.append(_generic(v, b, perms[shape], _generator(seed, b, attempt, i)))
            fresh = all(v.is_floating_point() or v.is_complex() or not _rearrangeable(v)
                        or all(not torch.equal(c, prev) for prev in out[i])
                        for i, (v, c) in enumerate(zip(values, cand)))
            if fresh:
                break
        for i, c in enumerate(cand):
            if op is not None and op.batch_entry is not None and positions[i] is not None:
                c = _checked(op, positions[i], values[i], op.batch_entry(positions[i], c, b))
            out[i].append(c)
    return out


def _checked(op: OpSpec, position: int, like: torch.Tensor, entry: torch.Tensor) -> torch.Tensor:
    if not isinstance(entry, torch.Tensor) or entry.shape != like.shape or entry.dtype != like.dtype:
        got = f"{type(entry).__name__} {getattr(entry, 'shape', '')} {getattr(entry, 'dtype', '')}"
        raise BadInputError(f"{op.name}.batch_entry must return a tensor shaped and typed like arg "
                            f"{position} ({tuple(like.shape)}, {like.dtype}); got {got.strip()}")
    return entry


def stacked(entries: Sequence[torch.Tensor], in_dim: int) -> torch.Tensor:
    """The entries stacked along ``in_dim`` (0 or -1)."""
    s = torch.stack(list(entries))
    return s if in_dim == 0 else s.movedim(0, -1).contiguous()
