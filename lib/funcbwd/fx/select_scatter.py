"""``select_scatter`` rewritten as ``slice_scatter``: the batched form's gradient is wrong in torch.

Functionalizing an in-place write into a ``select`` view (``t.select(d, i).copy_(v)``, ``.sub_``,
...) emits ``aten.select_scatter(base, src, d, i)``. Under vmap, functorch runs it through
``select_scatter_decomp`` (aten/src/ATen/functorch/BatchRulesScatterOps.cpp)::

    scatter(self, dim, index.expand_as(self), src.unsqueeze(dim).expand_as(self))

Every position along ``dim`` scatters the same ``src`` element to position ``index``: the values
are right (equal duplicates), but reverse mode recorded *over* that physical call (a grad level
below the vmap, or plain autograd around a ``vmap``) differentiates ``scatter`` w.r.t. its
``src`` as ``grad.gather(dim, index)``: each of the ``self.size(dim)`` duplicates receives the
gradient, and the expand's backward sums them, so ``src``'s gradient comes out multiplied by
``self.size(dim)``. A formula graph with a ``select_scatter`` therefore gives correct first-order
results under vmap but a wrong second-order one under ``jacrev(jacrev(f))`` (the inner backward
runs the graph batched over one-hot cotangents; the outer jacrev differentiates it).

``slice_scatter(base, src.unsqueeze(d), d, i, i + 1)`` writes the same values into the same
layout (its result, like ``select_scatter``'s, has ``base``'s strides), and its vmap rule scatters
with distinct ``arange`` indices, whose gradient is exact. ``tests/test_elide.py`` checks the
rewrite against the un-rewritten graph on every catalog op's samples, runs live
householder_product's jacrev_jacrev cell, and shows the batched gradient error the rewrite removes.
"""

from __future__ import annotations

import torch
import torch.fx

from funcbwd.fx.elide import _emit, _meta, rewritten

aten = torch.ops.aten


def _arguments(node: torch.fx.Node) -> tuple:
    names = ("self", "src", "dim", "index")
    values = list(node.args) + [node.kwargs[n] for n in names[len(node.args):]]
    return tuple(values)


def rewrite_select_scatter(gm: torch.fx.GraphModule) -> int:
    """Replace every ``aten.select_scatter`` of ``gm`` by the equivalent ``slice_scatter`` of the
    unsqueezed source, in place; returns how many were replaced."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.select_scatter.default:
            continue
        base, src, dim, index = _arguments(node)
        shape = _meta(base).shape
        dim = dim + len(shape) if dim < 0 else dim
        index = index + shape[dim] if index < 0 else index
        with graph.inserting_before(node):
            unsqueezed = _emit(graph, aten.unsqueeze.default, (src, dim))
            # step left at its default (1), as make_fx records it: the public-binding variant of
            # the compiled graph then re-traces to the same call (codegen's equivalence check)
            new = _emit(graph, aten.slice_scatter.default, (base, unsqueezed, dim, index, index + 1))
        if _meta(new).stride() != _meta(node).stride():  # pragma: no cover - same layout by contract
            raise AssertionError(f"{node.name}: slice_scatter strides {_meta(new).stride()} != "
                                 f"select_scatter strides {_meta(node).stride()}")
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        count += 1
    return rewritten(gm, count)
