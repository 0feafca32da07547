"""A boolean-mask write (``t[mask] = v``) as ``where``: vmap batches it, with a batched mask too.

Functionalized, ``t[mask] = v`` is ``aten.index_put(t, [mask], v)``. Under vmap with a batched
mask functorch's index_put rule turns the mask into indices with ``nonzero``, a value-dependent
shape it cannot batch ("We do not support batching operators that can output dynamic shape",
functorch#207's ``grad_input[input < 0] = 0`` under ``vmap(jacrev)``). When the mask covers the
leading dims of ``t`` and ``v`` has one element, the write is ``where(mask, v, t)``: the same
values, computed elementwise. The rewrite runs on the graph that is checked against the
un-rewritten one (values and strides, :func:`funcbwd.fx.formula_graphs.check_elision`), so a
``where`` that changed the layout is refused like a bad elision.
"""

from __future__ import annotations

import torch
import torch.fx

from funcbwd.fx.elide import _emit, _meta, rewritten

aten = torch.ops.aten


def _maskable(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.index_put.default:
        return False
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if accumulate:
        return False  # accumulate=True adds: not a plain write
    base, indices, values = node.args[:3]
    if len(indices) != 1 or not isinstance(indices[0], torch.fx.Node):
        return False
    mask, t, v = _meta(indices[0]), _meta(base), _meta(values)
    return (mask.dtype == torch.bool and tuple(mask.shape) == tuple(t.shape[:mask.dim()])
            and v.numel() == 1)


def rewrite_mask_writes(gm: torch.fx.GraphModule) -> int:
    """Replace every maskable ``index_put`` of ``gm`` by ``where``, in place; returns how many."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if not _maskable(node):
            continue
        base, (mask,), values = node.args[:3]
        t, m = _meta(base), _meta(mask)
        with graph.inserting_before(node):
            if m.dim() < t.dim():
                mask = _emit(graph, aten.view.default, (mask, list(m.shape) + [1] * (t.dim() - m.dim())))
            if _meta(values).dtype != t.dtype:
                values = _emit(graph, aten._to_copy.default, (values,), {"dtype": t.dtype})
            if _meta(values).dim():
                values = _emit(graph, aten.view.default, (values, []))
            new = _emit(graph, aten.where.self, (mask, values, base))
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        count += 1
    return rewritten(gm, count)
