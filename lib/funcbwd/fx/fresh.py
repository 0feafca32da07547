"""Fresh factories: tensors whose every element is one known value, and reads of them folded.

A tensor made by ``zeros``, ``ones``, ``full`` (or their ``*_like`` / ``new_*`` forms) holds its
fill value everywhere, and so does every view of it (a view selects elements of its base): in a
functionalized graph nothing writes it afterwards. :func:`fill_of` says which value a node holds
(``EMPTY`` for ``empty``: unknown values), for this pass and :mod:`funcbwd.fx.fresh_scatter`.

:func:`fold_fresh_reads` replaces a view of a fresh factory that an op reads (pytorch#103329:
``mat[0, 1]`` of a fresh ``zeros`` is read before anything is written) by a ``full`` of the view's
shape: one factory call instead of the chain of views, and the big factory may become dead. Only
where the ``full`` has the view's strides, nothing reads the view's storage (``as_strided``) and
the view is not (an alias of) a graph output. Checked against the unfolded graph like the copy
elision (:mod:`funcbwd.fx.passes`).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from funcbwd.fx.cse import reaches_output
from funcbwd.fx.elide import _emit, _is_view, _meta, output_nodes, reads_storage, rewritten

aten = torch.ops.aten

#: the fill of a factory whose values are unknown
EMPTY = object()
#: factory -> its fill value (an int/float), or the position of the fill argument
_FILLS: dict[Any, Any] = {
    aten.zeros.default: 0, aten.zeros_like.default: 0, aten.new_zeros.default: 0,
    aten.ones.default: 1, aten.ones_like.default: 1, aten.new_ones.default: 1,
    aten.full.default: ("arg", 1), aten.full_like.default: ("arg", 1),
    aten.new_full.default: ("arg", 2),
    aten.empty.memory_format: EMPTY, aten.empty_like.default: EMPTY,
    aten.new_empty.default: EMPTY, aten.empty_strided.default: EMPTY,
}
#: views that reinterpret the bits or the dtype: their elements are not the base's fill
_REINTERPRET = (aten.view.dtype, aten.view_as_real.default, aten.view_as_complex.default)


def _viewed(node: torch.fx.Node) -> torch.fx.Node | None:
    """The tensor ``node`` is a view of (through an item of ``unbind``/``split``), or None."""
    if node.op == "call_function" and node.target is operator.getitem:
        node = node.args[0]  # an item of a multi-output op: a view if the op returns views
    if not _is_view(node) or not isinstance(node.args[0], torch.fx.Node):
        return None
    return node.args[0]


def _root(node: torch.fx.Node) -> torch.fx.Node | None:
    """The factory ``node`` views (itself for a factory), or None if a view reinterprets."""
    while (base := _viewed(node)) is not None:
        if node.target in _REINTERPRET:
            return None
        node = base
    return node


def fill_of(node: Any) -> Any:
    """The one value every element of ``node`` holds (``EMPTY``: a fresh ``empty``), or None if
    ``node`` is not a fresh factory or a view of one."""
    root = _root(node) if isinstance(node, torch.fx.Node) else None
    if root is None or root.op != "call_function" or root.target not in _FILLS:
        return None
    fill = _FILLS[root.target]
    if isinstance(fill, tuple):
        at = fill[1]
        fill = root.args[at] if len(root.args) > at else root.kwargs.get("fill_value")
        if not isinstance(fill, (bool, int, float)):
            return None
    return fill


def full_like_meta(graph: torch.fx.Graph, like: torch.Tensor, shape, fill: Any) -> torch.fx.Node:
    """A ``full`` node of ``shape`` holding ``fill``, with ``like``'s dtype and device."""
    return _emit(graph, aten.full.default, (list(shape), fill),
                 {"dtype": like.dtype, "layout": torch.strided, "device": like.device,
                  "pin_memory": False})


def _read(node: torch.fx.Node) -> bool:
    """Does an op other than a view of it take ``node`` as an argument?"""
    return any(not (_is_view(u) and u.args[0] is node) for u in node.users)


def fold_fresh_reads(gm: torch.fx.GraphModule) -> int:
    """Replace each read view of a fresh factory by a ``full`` (see the module docstring), in
    place; returns how many."""
    graph = gm.graph
    outputs = set(output_nodes(graph))
    count = 0
    for node in list(graph.nodes):
        if not (_is_view(node) and isinstance(node.meta.get("val"), torch.Tensor) and _read(node)):
            continue
        fill = fill_of(node)
        if fill is None or fill is EMPTY or reaches_output(node, outputs) or reads_storage(node):
            continue
        val = _meta(node)
        with graph.inserting_before(node):
            new = full_like_meta(graph, val, val.shape, fill)
        if _meta(new).stride() != val.stride():
            graph.erase_node(new)
            continue
        node.replace_all_uses_with(new)
        count += 1
    return rewritten(gm, count, dead=True)
