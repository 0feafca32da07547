"""PyTorch Geometric (pyg-team/pytorch_geometric, torch_geometric/utils/_scatter.py at 0955c65):
``scatter``, the aggregation under message passing, which reduces into
``src.new_zeros(size).scatter_add_(dim, index, src)`` (and counts with ``new_zeros``/``new_ones``
for the mean), sizing the output from ``int(index.max()) + 1`` when no ``dim_size`` is given.

Re-created from the upstream function and trimmed to its torch >= 1.12 branch for the sum and mean
reductions (the min/max/mul paths and the torch_scatter dispatch left out); the in-place lines are
upstream's as written.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from funcbwd_lab.studies.yourcode.case import Case, randn

_NODES, _EDGES = 4, 7


# pyg-team/pytorch_geometric torch_geometric/utils/_scatter.py, broadcast (0955c65)
def broadcast(src: Tensor, ref: Tensor, dim: int) -> Tensor:
    size = ((1, ) * dim) + (-1, ) + ((1, ) * (ref.dim() - dim - 1))
    return src.view(size).expand_as(ref)


# same file, scatter (the WITH_PT112 branch; argument checks and the 'any', min/max and mul
# reductions trimmed)
def scatter(
    src: Tensor,
    index: Tensor,
    dim: int = 0,
    dim_size: Optional[int] = None,
    reduce: str = 'sum',
) -> Tensor:
    dim = src.dim() + dim if dim < 0 else dim

    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0

    size = src.size()[:dim] + (dim_size, ) + src.size()[dim + 1:]

    # For "sum" and "mean" reduction, we make use of `scatter_add_`:
    if reduce == 'sum' or reduce == 'add':
        index = broadcast(index, src, dim)
        return src.new_zeros(size).scatter_add_(dim, index, src)

    if reduce == 'mean':
        count = src.new_zeros(dim_size)
        count.scatter_add_(0, index, src.new_ones(src.size(dim)))
        count = count.clamp(min=1)

        index = broadcast(index, src, dim)
        out = src.new_zeros(size).scatter_add_(dim, index, src)

        return out / broadcast(count, out, dim)

    raise ValueError(f"Encountered invalid `reduce` argument '{reduce}'")


def scatter_mean(src, index):
    return scatter(src, index, dim=0, reduce='mean')


def scatter_mean_rewrite(src, index):
    one_hot = (index[:, None] == torch.arange(_NODES)).to(src.dtype)  # [E, N]
    count = one_hot.sum(0).clamp(min=1)
    return (one_hot.t() @ src) / count[:, None]


def scatter_sum(src, index):
    return scatter(src, index, dim=0, reduce='sum')


def scatter_sum_rewrite(src, index):
    # dim_size is int(index.max()) + 1 = _NODES for every sample (each index holds every node)
    return torch.zeros(_NODES, *src.shape[1:], dtype=src.dtype).index_add(0, index, src)


def _index(gen):
    # every node receives at least one edge, so index.max() + 1 == _NODES in every sample
    rest = torch.randint(0, _NODES, (_EDGES - _NODES,), generator=gen)
    idx = torch.cat([torch.arange(_NODES), rest])
    return idx[torch.randperm(_EDGES, generator=gen)]


def _args(gen):
    return (randn(gen, _EDGES, 3), _index(gen))


CASES = [
    Case("torch_geometric:scatter-mean", "torch_geometric",
         "pyg-team/pytorch_geometric torch_geometric/utils/_scatter.py: scatter, reduce='mean' "
         "(0955c65)",
         "messages batched, one graph: count via new_zeros(...).scatter_add_ of new_ones, "
         "out = src.new_zeros(size).scatter_add_(dim, index, src); dim_size from index.max()",
         ("scatter", "like", "value_read"), lambda decorate: decorate(scatter_mean),
         scatter_mean_rewrite, _args, batched=(0,), diff=0),
    Case("torch_geometric:scatter-sum-per-graph", "torch_geometric",
         "pyg-team/pytorch_geometric torch_geometric/utils/_scatter.py: scatter, reduce='sum' "
         "(0955c65)",
         "messages and edge index both batched (a graph per sample): int(index.max()) + 1 reads "
         "a batched value, then src.new_zeros(size).scatter_add_",
         ("scatter", "like", "value_read"), lambda decorate: decorate(scatter_sum),
         scatter_sum_rewrite, _args, batched=(0, 1), diff=0),
]
