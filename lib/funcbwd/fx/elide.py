"""Copy elision: an FX pass removing the ``aten.copy`` that functionalization emits.

Functionalizing ``view.copy_(src)`` gives ``copy(view, src)`` followed by a ``*_scatter`` back into
the base. ``aten::copy`` has no batching rule (its ``FuncTorchBatched`` entry is the backend
fallback), so under vmap every such formula runs the per-sample slow loop. Its value is just
``src`` broadcast to ``dst``'s shape and cast to ``dst``'s dtype, so the pass rewrites
``copy(dst, src)`` to exactly that (``_to_copy`` / ``expand``, both batched), cloning when the
result would otherwise alias a graph input (or be a stride-0 expand) in the graph's output.
This is the "FX pass on a traced, functionalized formula" option of the torch-2.13 notes.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.fx
from torch.utils import _pytree as pytree

aten = torch.ops.aten

#: Ops the pass rewrites: the out-of-place copy functionalization emits for ``copy_``.
ELIDED_TARGETS = (aten.copy.default,)


@dataclasses.dataclass
class ElisionReport:
    """What :func:`elide_copies` did, node by node (for the graph views and the tests)."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    casts: int = 0
    expands: int = 0
    clones: int = 0

    @property
    def count(self) -> int:
        return len(self.replaced)


def _meta(node: torch.fx.Node):
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise ValueError(f"node {node.name} has no tensor meta['val']; trace with make_fx first")
    return val


def _is_view(node: torch.fx.Node) -> bool:
    """True if ``node`` returns an alias of its first argument (a view op, by its schema)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    return info is not None and not info.is_write


def alias_root(node: torch.fx.Node) -> torch.fx.Node:
    """The node whose storage ``node`` views (itself if it is not a view)."""
    while _is_view(node) and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def output_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    out = next(n for n in graph.nodes if n.op == "output")
    return [a for a in pytree.tree_leaves(out.args) if isinstance(a, torch.fx.Node)]


def elide_copies(gm: torch.fx.GraphModule) -> ElisionReport:
    """Rewrite every ``aten.copy(dst, src)`` in ``gm`` in place; returns what was done."""
    graph = gm.graph
    report = ElisionReport()
    outputs = set(output_nodes(graph))
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in ELIDED_TARGETS:
            continue
        dst, src = node.args[0], node.args[1]
        dval, sval = _meta(dst), _meta(src)
        with graph.inserting_before(node):
            new = src
            if sval.dtype != dval.dtype or sval.device != dval.device:
                # Cast the (smaller) source before broadcasting it.
                new = graph.call_function(aten._to_copy.default, (new,),
                                          {"dtype": dval.dtype, "device": dval.device})
                new.meta["val"] = sval.to(dtype=dval.dtype, device=dval.device)
                report.casts += 1
            if tuple(sval.shape) != tuple(dval.shape):
                new = graph.call_function(aten.expand.default, (new, list(dval.shape)))
                new.meta["val"] = dval.new_empty(dval.shape)
                report.expands += 1
            if node in outputs and (alias_root(new).op == "placeholder" or _is_view(new)
                                    or alias_root(new) in outputs):
                # copy returns fresh memory; an output must not alias an input or another output.
                new = graph.call_function(aten.clone.default, (new,))
                new.meta["val"] = dval.new_empty(dval.shape)
                report.clones += 1
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        report.replaced.append(node.name)
    if report.count:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return report


def count_targets(gm: torch.fx.GraphModule, targets=ELIDED_TARGETS) -> int:
    """How many call_function nodes of ``gm`` call one of ``targets``."""
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in targets)
