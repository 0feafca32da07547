"""Common subexpressions merged: an op called twice on the same arguments runs once.

User code recomputes (functorch#105 writes ``(w @ x)[:3]`` and ``(w @ x)[3:]``: two ``mv`` of the
same tensors); functionalization repeats views (``mat[0, 0] = mat[0, 1] + ...`` selects row 0
twice). In a functionalized graph no op writes its inputs, so two calls of a deterministic op on
the same nodes with equal constants compute the same values: the later one is replaced by the
earlier one. Not merged: ops that draw random numbers (``nondeterministic_seeded``) or write
(mutable schemas), and a node whose result (or a view of it) is a graph output (two outputs that
were distinct tensors must not become one). Constants compare by type and ``repr`` (``0.0`` and
``-0.0``, ``1`` and ``True`` hash alike but are different arguments).

The merged graph is checked against the unmerged one like the copy elision
(:mod:`funcbwd.fx.passes`); ``tests/test_passes.py`` shows a CSE that merges different ops failing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from funcbwd.fx.elide import _is_view, output_nodes, rewritten


def _key(a: Any) -> Any:
    if isinstance(a, torch.fx.Node):
        return ("node", a)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(_key(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _key(v)) for k, v in a.items()))
    return (type(a).__name__, repr(a))


def mergeable(node: torch.fx.Node) -> bool:
    """Is ``node`` a call whose result depends on its arguments only?"""
    if node.op != "call_function":
        return False
    schema = getattr(node.target, "_schema", None)
    if schema is None:  # operator.getitem: a pure function of its node and index
        return node.target.__module__ == "_operator"
    return not schema.is_mutable and torch.Tag.nondeterministic_seeded not in node.target.tags


def reaches_output(node: torch.fx.Node, outputs: set) -> bool:
    """Is ``node``, or a view of it (transitively), a graph output?"""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in outputs:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(u for u in n.users if _is_view(u) and u.args[0] is n)
    return False


def merge_common_subexpressions(gm: torch.fx.GraphModule) -> int:
    """Replace every repeated call of ``gm`` by its first occurrence, in place; returns how many."""
    graph = gm.graph
    outputs = set(output_nodes(graph))
    first: dict[Any, torch.fx.Node] = {}
    count = 0
    for node in list(graph.nodes):
        if not mergeable(node):
            continue
        key = (node.target, _key(tuple(node.args)), _key(dict(node.kwargs)))
        kept = first.setdefault(key, node)
        if kept is node or (reaches_output(node, outputs) and reaches_output(kept, outputs)):
            continue
        if node in outputs:
            outputs.add(kept)
        node.replace_all_uses_with(kept)
        graph.erase_node(node)
        count += 1
    return rewritten(gm, count)
