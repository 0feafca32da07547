"""Copy elision: an FX pass removing the ``aten.copy`` that functionalization emits.

Functionalizing ``view.copy_(src)`` gives ``copy(view, src)`` followed by a ``*_scatter`` back into
the base. ``aten::copy`` has no batching rule (its ``FuncTorchBatched`` entry is the backend
fallback), so under vmap every such formula runs the per-sample slow loop. This is the "FX pass on
a traced, functionalized formula" option of the torch-2.13 notes.

What ``copy(dst, src)`` returns, and what the rewrite must preserve: fresh memory holding ``src``
broadcast to ``dst``'s shape and cast to ``dst``'s dtype, **with dst's strides** (aten's
``copy`` is ``clone_preserve_strides(dst).copy_(src)``, aten/src/ATen/native/Copy.cpp). The values
are ``expand(_to_copy(src))`` (both batched). The strides are another matter: an expand has
stride 0, a transposed ``dst`` has transposed strides, and later ops can observe the difference:
``view`` fails on an expand, ``as_strided`` reads other elements, an output's strides change.
So each copy is rewritten in one of three ways:

* ``src`` (cast/broadcast) as is, when no later op can observe the layout: the copy's only
  consumers take it as the ``src`` of a view-inverse ``*_scatter`` (which reads values only; the
  scatter's result has its base's layout), or the replacement already has the copy's exact strides
  and nothing reads storage through an alias of it (``as_strided``) or returns it aliased;
* the replacement **materialized with dst's strides** (``clone(contiguous_format)``, wrapped in a
  ``permute`` and its inverse for a permuted dense layout) when the layout is observable and
  dst's layout is dense and non-overlapping: a clone vmap batches, no ``aten.copy``;
* the ``copy`` **kept** otherwise (a non-dense dst, e.g. a diagonal view, whose layout is
  observable): correct, and vmap falls back for it.

Every inserted node gets a fake-tensor ``meta["val"]`` computed by running its op on the inputs'
metas, so the strides the pass compares are the real ones. ``tests/test_elide.py`` checks values
and strides against the un-elided graph on every catalog op's samples and on counter-examples,
and shows a pass without the stride handling failing them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

aten = torch.ops.aten

#: Ops the pass rewrites: the out-of-place copy functionalization emits for ``copy_``.
ELIDED_TARGETS = (aten.copy.default,)
#: View-inverse scatters functionalization emits: ``op(base, src, ...)`` reads ``src``'s values
#: only; the result has ``base``'s layout.
VALUE_ONLY_SRC = (aten.slice_scatter.default, aten.select_scatter.default,
                  aten.diagonal_scatter.default, aten.as_strided_scatter.default)
#: Ops that read a tensor's storage through its strides and offset, not its logical values.
STORAGE_READERS = (aten.as_strided.default, aten.as_strided_copy.default,
                   aten.as_strided_scatter.default, aten._reshape_alias.default)


@dataclasses.dataclass
class ElisionReport:
    """What :func:`elide_copies` did, node by node (for the graph views and the tests)."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    #: copies left in place: their dst layout is observable and cannot be rebuilt by a clone
    kept: list[str] = dataclasses.field(default_factory=list)
    casts: int = 0
    expands: int = 0
    #: clones inserted: to give the replacement dst's strides, or fresh memory for an output
    clones: int = 0

    @property
    def count(self) -> int:
        return len(self.replaced)


def _meta(node: Any):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise ValueError(f"node {node} has no tensor meta['val']; trace with make_fx first")
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


# ------------------------------------------------------------------------------ layout analysis
def same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.stride() == b.stride()


def is_dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: some permutation of the dims makes it contiguous."""
    perm = _dense_order(t)
    expected = 1
    for d in reversed(perm):
        if t.shape[d] != 1 and t.stride(d) != expected:
            return False
        expected *= t.shape[d]
    return True


def _dense_order(t: torch.Tensor) -> list[int]:
    # outermost first: larger strides first, ties by dim index (stable)
    return sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))


def layout_observable(node: torch.fx.Node) -> bool:
    """Can a later op observe ``node``'s strides (as opposed to only its values)?

    False only when every consumer takes ``node`` as the ``src`` of a view-inverse scatter.
    Anything else (a view that may fail, an elementwise op propagating strides, an output) counts
    as observing: conservative, it costs at most a clone."""
    for user in node.users:
        if user.op == "call_function" and user.target in VALUE_ONLY_SRC:
            if user.args[0] is not node and all(a is not node for a in user.args[2:]) \
                    and node not in user.kwargs.values():
                continue
        return True
    return False


def reads_storage(node: torch.fx.Node) -> bool:
    """True if ``node`` or a view of it (transitively) is read by an ``as_strided``-like op."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for user in n.users:
            if user.op == "call_function" and user.target in STORAGE_READERS and user.args[0] is n:
                return True
            if _is_view(user) and user.args[0] is n:
                todo.append(user)
    return False


# ------------------------------------------------------------------------------ the pass
def rewritten(gm: torch.fx.GraphModule, count: int, dead: bool = False) -> int:
    """``count``, after a pass that rewrote ``gm`` in place: if it replaced anything, the nodes
    left dead dropped (``dead``), the graph linted and recompiled (every pass's last step)."""
    if count:
        if dead:
            gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return count


def _emit(graph: torch.fx.Graph, target, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
    """Insert ``target(*args)`` with its fake-tensor meta computed from the inputs' metas."""
    kwargs = kwargs or {}
    node = graph.call_function(target, args, kwargs)
    vals = pytree.tree_map(lambda a: _meta(a) if isinstance(a, torch.fx.Node) else a, (args, kwargs))
    node.meta["val"] = target(*vals[0], **vals[1])
    return node


def _materialize(graph: torch.fx.Graph, new: torch.fx.Node, like: torch.Tensor) -> torch.fx.Node:
    """Fresh memory with ``new``'s values and ``like``'s (dense) strides: a clone vmap batches."""
    contiguous = {"memory_format": torch.contiguous_format}
    perm = _dense_order(like)
    if perm == list(range(like.dim())):
        return _emit(graph, aten.clone.default, (new,), contiguous)
    inverse = sorted(range(len(perm)), key=perm.__getitem__)
    moved = _emit(graph, aten.permute.default, (new, perm))
    cloned = _emit(graph, aten.clone.default, (moved,), contiguous)
    return _emit(graph, aten.permute.default, (cloned, inverse))


def _needs_dst_layout(node: torch.fx.Node, new: torch.fx.Node, outputs: set) -> bool:
    """Must the replacement of copy ``node`` by ``new`` be fresh memory with the copy's strides?"""
    if not layout_observable(node):
        return False
    aliases = alias_root(new).op == "placeholder" or _is_view(new) or alias_root(new) in outputs
    return (not same_layout(_meta(new), _meta(node)) or reads_storage(node)
            or (node in outputs and aliases))


def elide_copies(gm: torch.fx.GraphModule) -> ElisionReport:
    """Rewrite every ``aten.copy(dst, src)`` in ``gm`` in place (see the module docstring)."""
    graph = gm.graph
    report = ElisionReport()
    outputs = set(output_nodes(graph))
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in ELIDED_TARGETS:
            continue
        dst, src = node.args[0], node.args[1]
        cval, dval, sval = _meta(node), _meta(dst), _meta(src)
        with graph.inserting_before(node):
            new, casts, expands = src, 0, 0
            if sval.dtype != dval.dtype or sval.device != dval.device:
                # Cast the (smaller) source before broadcasting it.
                new = _emit(graph, aten._to_copy.default, (new,),
                            {"dtype": dval.dtype, "device": dval.device})
                casts = 1
            if tuple(sval.shape) != tuple(dval.shape):
                new = _emit(graph, aten.expand.default, (new, list(dval.shape)))
                expands = 1
            if _needs_dst_layout(node, new, outputs):
                if not is_dense(cval):
                    report.kept.append(node.name)  # the inserted nodes are dead code now
                    continue
                new = _materialize(graph, new, cval)
                if not same_layout(_meta(new), cval):  # pragma: no cover - _materialize's contract
                    raise AssertionError(f"{node.name}: materialized strides {_meta(new).stride()} "
                                         f"!= copy strides {cval.stride()}")
                report.clones += 1
        report.casts += casts
        report.expands += expands
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        report.replaced.append(node.name)
    if report.count or report.kept:
        graph.eliminate_dead_code()
        graph.lint()
        gm.recompile()
    return report


def count_targets(gm: torch.fx.GraphModule, targets=ELIDED_TARGETS) -> int:
    """How many call_function nodes of ``gm`` call one of ``targets``."""
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in targets)
