"""Data movement assembled by one gather: a chain of writes at constant positions, read once.

``h = zeros(n, 3, 3); h[:, 0, 1] = -z; h[:, 0, 2] = y; ...`` (pytorch3d ``so3.hat``),
``k[..., 0, 0:1] = fx; ...`` into a repeated ``eye`` (kornia), a filter's state written row by row
and read back (torchaudio ``lfilter``): functionalized, each write is a ``select`` of the whole
tensor so far, a scatter into it and a scatter of that back (the whole tensor copied twice per
write; under vmap each copy is batched). A hand rewrite builds the result with one ``stack``.

Every op here only moves elements (views, scatters at constant positions, ``cat``, ``stack``,
``repeat``, ``flip``, ``clone``: :data:`MOVES`), so which input element lands where is decided by
the shapes and constants alone. The pass computes it at build time by running the same ops on
**index grids** (int64 tensors: the element ``j`` of leaf ``L`` is ``offset(L) + j``, index 0 a
zero: what ``*_backward`` ops fill with), and replaces each tensor read out of such a chain (an
*exit*: a moved tensor an op or the output reads) by

* a slice of one leaf, where its elements are one leaf's run in order (a view: no copy), or
* ``index_select`` from ``cat`` of the leaves it reads, flattened (one element for a leaf holding
  one value: a fresh ``zeros`` / ``full``), viewed as the exit's shape.

An exit is rebuilt only where its chain holds at least two scatters (one scatter is already one
op) or it reads one leaf's run. Index grids follow logical order, never strides (``view`` runs
as ``reshape``: both give the same elements). Skipped: shapes that are not plain ints, leaves of
another dtype than the exit, complex dtypes. The result is checked against the unrebuilt graph
like the copy elision (:mod:`funcbwd.fx.passes`: values exact, shapes, strides).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.fx.elide import _emit, _materialize, _meta, output_nodes, rewritten
from funcbwd.fx.fresh import EMPTY, fill_of

aten = torch.ops.aten

#: ops whose every output element is a copy of an input element, placed by shapes and constants
MOVES = {
    aten.select.int, aten.slice.Tensor, aten.unsqueeze.default, aten.squeeze.dim,
    aten.squeeze.dims, aten.squeeze.default, aten.view.default, aten._unsafe_view.default,
    aten.reshape.default, aten.permute.default, aten.transpose.int, aten.t.default,
    aten.expand.default, aten.alias.default, aten.diagonal.default, aten.clone.default,
    aten.unbind.int, aten.split.Tensor, aten.split_with_sizes.default, aten.unfold.default,
    aten.slice_scatter.default, aten.select_scatter.default, aten.diagonal_scatter.default,
    aten.select_backward.default, aten.slice_backward.default, aten.diagonal_backward.default,
    aten.cat.default, aten.stack.default, aten.repeat.default, aten.flip.default,
}
#: the moves that write: a chain is worth one gather from two of them on
SCATTERS = {
    aten.slice_scatter.default, aten.select_scatter.default, aten.diagonal_scatter.default,
    aten.select_backward.default, aten.slice_backward.default, aten.diagonal_backward.default,
}
#: the moves that copy (weigh two views in the cost of a chain)
COPIES = SCATTERS | {aten.cat.default, aten.stack.default, aten.repeat.default, aten.flip.default,
                     aten.clone.default}
#: views whose index grid is computed with ``reshape`` (a view's elements are reshape's)
_AS_RESHAPE = {aten.view.default: aten.reshape.default, aten._unsafe_view.default: aten.reshape.default}


class _Grids:
    """Index grids of the moved tensors of one graph, and the leaves they index."""

    def __init__(self) -> None:
        self.grid: dict[torch.fx.Node, Any] = {}
        self.scatters: dict[torch.fx.Node, int] = {}
        #: the moves a moved tensor is computed by (itself included)
        self.ops: dict[torch.fx.Node, frozenset] = {}
        #: (first index, node, numel, fill or None) per leaf, in index order
        self.leaves: list[tuple[int, torch.fx.Node, int, Any]] = []
        self._next = 1  # index 0: the zero

    def leaf(self, node: torch.fx.Node) -> torch.Tensor | None:
        if node in self.grid:
            return self.grid[node]
        val = node.meta.get("val")
        if not _plain(val):
            return None
        fill = fill_of(node)
        fill = None if fill is EMPTY else fill
        if fill is not None and fill == 0 and math.copysign(1.0, fill) > 0:  # not -0.0
            g = torch.zeros(tuple(val.shape), dtype=torch.int64)  # index 0: the zero
        else:
            n = 1 if fill is not None else val.numel()
            start = self._next
            self._next += n
            self.leaves.append((start, node, n, fill))
            g = (torch.full(tuple(val.shape), start, dtype=torch.int64) if fill is not None
                 else torch.arange(start, start + n, dtype=torch.int64).reshape(tuple(val.shape)))
        self.grid[node], self.scatters[node], self.ops[node] = g, 0, frozenset()
        return g

    def move(self, node: torch.fx.Node) -> bool:
        """Compute ``node``'s grid if it moves elements of grids (False: it is not a move)."""
        if node.op != "call_function" or node.kwargs and node.target is not aten.clone.default:
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            if src not in self.grid or not isinstance(self.grid[src], (list, tuple)):
                return False
            self.grid[node] = self.grid[src][node.args[1]]
            self.scatters[node] = self.scatters[src]
            self.ops[node] = self.ops[src] | {node}
            return True
        if node.target not in MOVES or not _plain(_out(node)):
            return False
        nodes = [a for a in pytree.tree_leaves(node.args) if isinstance(a, torch.fx.Node)]
        dtype = _dtype(node)
        if any(not _plain(a.meta.get("val")) or a.meta["val"].dtype != dtype for a in nodes):
            return False
        grids = {a: self.leaf(a) if a not in self.grid else self.grid[a] for a in nodes}
        if any(g is None for g in grids.values()):
            return False
        args = pytree.tree_map(lambda a: grids[a] if isinstance(a, torch.fx.Node) else a,
                               node.args)
        try:
            self.grid[node] = _AS_RESHAPE.get(node.target, node.target)(*args)
        except Exception:  # noqa: BLE001 - an op the grids cannot follow: not a move here
            return False
        self.scatters[node] = sum(self.scatters[a] for a in set(nodes)) + (node.target in SCATTERS)
        self.ops[node] = frozenset({node}).union(*(self.ops[a] for a in nodes))
        return True


def _out(node: torch.fx.Node) -> Any:
    val = node.meta.get("val")
    return val[0] if isinstance(val, (list, tuple)) and val else val


def _dtype(node: torch.fx.Node) -> torch.dtype | None:
    val = _out(node)
    return val.dtype if isinstance(val, torch.Tensor) else None


def _plain(val: Any) -> bool:
    """A strided real tensor of int sizes (or a list of them: unbind's items)."""
    if isinstance(val, (list, tuple)):
        return bool(val) and all(_plain(v) for v in val)
    return (isinstance(val, torch.Tensor) and val.layout == torch.strided and not val.is_complex()
            and all(isinstance(s, int) for s in val.shape))


def _run(flat: torch.Tensor, leaves: list) -> tuple[int, int] | None:
    """(first, length) if ``flat`` is one leaf's elements ``first .. first+length`` in order."""
    if flat.numel() == 0:
        return None
    first = int(flat[0])
    if not torch.equal(flat, torch.arange(first, first + flat.numel())):
        return None
    for start, node, n, fill in leaves:
        if fill is None and start <= first and first + flat.numel() <= start + n:
            return first - start, flat.numel()
    return None


def _rebuild(gm: torch.fx.GraphModule, grids: _Grids, exit_: torch.fx.Node, name: str,
             outputs: set) -> torch.fx.Node | None:
    """The nodes that compute ``exit_`` from its leaves (inserted before it), or None where they
    would not be fewer ops than the moves that compute it now."""
    graph, val = gm.graph, _meta(exit_)
    flat = grids.grid[exit_].reshape(-1)
    now = sum(1 + (n.target in COPIES) for n in grids.ops[exit_])  # views 1, copies 2
    if grids.scatters[exit_] < 1:
        return None
    run = _run(flat, grids.leaves)
    if run is not None:  # one leaf's run: a view of it
        at, n = run
        leaf = next(node for start, node, k, fill in grids.leaves
                    if fill is None and start <= int(flat[0]) < start + k)
        whole = not at and n == _meta(leaf).numel()
        if whole and list(_meta(leaf).shape) == list(val.shape) and exit_ not in outputs:
            return leaf  # read back as written
        if (1 if whole else 3) >= now:  # reshape (and slice, reshape)
            return None
        if whole:
            return _emit(graph, aten.reshape.default, (leaf, list(val.shape)))
        piece = _emit(graph, aten.reshape.default, (leaf, [-1]))
        piece = _emit(graph, aten.slice.Tensor, (piece, 0, at, at + n))
        return _emit(graph, aten.reshape.default, (piece, list(val.shape)))
    used = torch.unique(flat)
    zero = bool((used == 0).any())
    read = [leaf for leaf in grids.leaves
            if bool(((used >= leaf[0]) & (used < leaf[0] + leaf[2])).any())]
    pieces = zero + len(read)
    if pieces + 2 * (pieces > 1) + 3 >= now:  # pieces, cat, index_select, view
        return None
    like = {"dtype": val.dtype, "layout": torch.strided, "device": val.device, "pin_memory": False}
    nodes, remap, at = [], torch.zeros(grids._next, dtype=torch.int64), 0
    if zero:
        nodes.append(_emit(graph, aten.full.default, ([1], 0), like))
        at = 1
    for start, node, n, fill in read:
        if fill is not None:
            nodes.append(_emit(graph, aten.full.default, ([1], fill), like))
        else:  # the span of the leaf it reads
            mine = used[(used >= start) & (used < start + n)]
            lo, hi = int(mine.min()) - start, int(mine.max()) - start + 1
            piece = _emit(graph, aten.reshape.default, (node, [-1]))
            if hi - lo < n:
                piece = _emit(graph, aten.slice.Tensor, (piece, 0, lo, hi))
            nodes.append(piece)
            start, n = start + lo, hi - lo
        remap[start:start + n] = torch.arange(at, at + n)
        at += n
    buf = nodes[0] if len(nodes) == 1 else _emit(graph, aten.cat.default, (nodes,))
    index = remap[flat].to(val.device)
    if index.numel() == at and torch.equal(index.cpu(), torch.arange(at)):
        return _emit(graph, aten.view.default, (buf, list(val.shape)))  # the pieces in order
    gm.register_buffer(name, index)
    idx = graph.get_attr(name)
    idx.meta["val"] = internals.fake_like(index, _meta(buf))
    picked = _emit(graph, aten.index_select.default, (buf, 0, idx))
    return _emit(graph, aten.view.default, (picked, list(val.shape)))


def gather_moves(gm: torch.fx.GraphModule) -> int:
    """Rebuild each exit of a chain of moves (see the module docstring), in place; returns how
    many exits were rebuilt."""
    graph = gm.graph
    grids = _Grids()
    moved = [node for node in graph.nodes if grids.move(node)]
    moves = set(moved)
    outputs = set(output_nodes(graph))
    count = 0
    for node in moved:
        if isinstance(grids.grid[node], (list, tuple)):
            continue
        if node not in outputs and all(u in moves for u in node.users):
            continue  # read only by other moves: not an exit
        with graph.inserting_before(node):
            new = _rebuild(gm, grids, node, f"_gather_index_{count}", outputs)
            if new is not None and node in outputs and _meta(new).stride() != _meta(node).stride():
                new = _materialize(graph, new, _meta(node))
        if new is None:
            continue
        node.replace_all_uses_with(new, delete_user_cb=lambda u: u not in moves)
        count += 1
    return rewritten(gm, count, dead=True)
