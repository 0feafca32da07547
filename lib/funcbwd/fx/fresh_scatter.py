"""Writes into a fresh factory rebuilt as ``cat`` / ``stack`` / torch's ``*_backward`` ops.

``y = torch.zeros(n); y[0] = a; y[1:] = b`` functionalizes to a chain of view-inverse scatters
into the ``zeros``: ``slice_scatter(slice_scatter(zeros, a', 0, 0, 1), b, 0, 1, n)``. Each
scatter copies its whole base (under vmap an unbatched base is first expanded and cloned to the
batch: diag's extra pass at B=1 and large inputs), where a hand rewrite builds the result in one
op. Here a chain of scatters along one dim whose base holds one known value
(:func:`funcbwd.fx.fresh.fill_of`) and whose written regions do not overlap is rebuilt as:

* one scatter into a fresh **zeros**: ``select_backward`` / ``slice_backward`` /
  ``diagonal_backward`` (the zeros and the write in one op; vmap batches each with the op itself,
  whose derivative is the view: exact at any order);
* step-1 slices and selects: ``cat`` of the written pieces in order, gaps filled by ``full``
  pieces of the base's value (``stack`` when every index is a ``select``);
* slices with one step ``k`` > 1 starting at distinct residues (functorch#105's ``h[::2]``,
  ``h[1::2]``): ``stack`` of the residues' pieces on a new dim after ``dim``, viewed as the base's
  shape (missing residues filled by ``full``).

A chain is only rebuilt when each intermediate scatter feeds nothing but the next one, every
source has the base's dtype, and the result has the last scatter's strides. The rebuilt graph is
checked against the unrebuilt one like the copy elision (:mod:`funcbwd.fx.passes`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx

from funcbwd.fx.elide import _emit, _meta, rewritten
from funcbwd.fx.fresh import EMPTY, fill_of, full_like_meta

aten = torch.ops.aten
_SCATTERS = (aten.slice_scatter.default, aten.select_scatter.default)


@dataclasses.dataclass(frozen=True)
class Write:
    """One scatter of a chain: ``src`` written at ``start:end:step`` of ``dim``."""

    node: torch.fx.Node
    src: torch.fx.Node
    dim: int
    start: int
    end: int
    step: int
    select: bool  # a select_scatter: src lacks ``dim``


def _write(node: torch.fx.Node) -> Write | None:
    if node.op != "call_function" or node.target not in _SCATTERS or node.kwargs:
        return None
    base, src, *rest = node.args
    shape = _meta(base).shape
    if node.target is aten.select_scatter.default:
        dim, index = rest
        dim = dim % len(shape)
        index = index % shape[dim] if shape[dim] else index
        return Write(node, src, dim, index, index + 1, 1, True)
    rest = rest + [None] * (4 - len(rest))
    dim, start, end, step = rest
    dim = (dim or 0) % len(shape)
    size = shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    end = size if end is None else (end + size if end < 0 else end)
    start, end, step = min(max(start, 0), size), min(max(end, 0), size), step or 1
    return Write(node, src, dim, start, end, step, False)


def _chain(first: torch.fx.Node) -> list[Write]:
    """The scatters from ``first`` on, each the only user of the one before, along one dim."""
    chain = [_write(first)]
    while True:
        node = chain[-1].node
        users = list(node.users)
        if len(users) != 1:
            return chain
        nxt = _write(users[0])
        if nxt is None or nxt.node.args[0] is not node or nxt.dim != chain[0].dim:
            return chain
        chain.append(nxt)


def _covered(w: Write) -> range:
    return range(w.start, w.end, w.step)


def _disjoint(chain: list[Write]) -> bool:
    seen: set[int] = set()
    for w in chain:
        idx = set(_covered(w))
        if idx & seen:
            return False
        seen |= idx
    return True


def _piece(graph: torch.fx.Graph, w: Write) -> torch.fx.Node:
    return _emit(graph, aten.unsqueeze.default, (w.src, w.dim)) if w.select else w.src


def _single(graph: torch.fx.Graph, w: Write, shape: list[int]) -> torch.fx.Node:
    """One write into zeros as torch's view-backward op."""
    if w.select:
        return _emit(graph, aten.select_backward.default, (w.src, shape, w.dim, w.start))
    return _emit(graph, aten.slice_backward.default, (w.src, shape, w.dim, w.start, w.end, w.step))


def _gap(graph: torch.fx.Graph, base: torch.Tensor, dim: int, size: int, fill: Any):
    shape = list(base.shape)
    shape[dim] = size
    return full_like_meta(graph, base, shape, fill)


def _concatenated(graph: torch.fx.Graph, chain: list[Write], base: torch.Tensor, fill: Any):
    """Step-1 writes: the pieces in order with the gaps between them (None: a gap, no fill)."""
    dim, at, pieces = chain[0].dim, 0, []
    for w in sorted(chain, key=lambda w: w.start):
        if w.start > at:
            if fill is EMPTY:
                return None
            pieces.append(("gap", w.start - at))
        pieces.append(("write", w))
        at = w.end
    if at < base.shape[dim]:
        if fill is EMPTY:
            return None
        pieces.append(("gap", base.shape[dim] - at))
    if all(kind == "write" and p.select for kind, p in pieces):
        return _emit(graph, aten.stack.default, ([p.src for _, p in pieces], dim))
    nodes = [_piece(graph, p) if kind == "write" else _gap(graph, base, dim, p, fill)
             for kind, p in pieces]
    return _emit(graph, aten.cat.default, (nodes, dim))


def _interleaved(graph: torch.fx.Graph, chain: list[Write], base: torch.Tensor, fill: Any):
    """Writes of one step k > 1 over whole residues: stacked on a new dim, viewed back."""
    dim, k, size = chain[0].dim, chain[0].step, base.shape[chain[0].dim]
    by_residue = {w.start: w for w in chain}
    if (size % k or any(w.step != k or w.select or w.start >= k or len(_covered(w)) != size // k
                        for w in chain) or len(by_residue) != len(chain)):
        return None
    if fill is EMPTY and len(chain) != k:
        return None
    piece_shape = list(base.shape)
    piece_shape[dim] = size // k
    pieces = [by_residue[r].src if r in by_residue
              else full_like_meta(graph, base, piece_shape, fill) for r in range(k)]
    stacked = _emit(graph, aten.stack.default, (pieces, dim + 1))
    return _emit(graph, aten.view.default, (stacked, list(base.shape)))


def _rebuilt(graph: torch.fx.Graph, chain: list[Write], fill: Any) -> torch.fx.Node | None:
    base = _meta(chain[0].node.args[0])
    if any(_meta(w.src).dtype != base.dtype for w in chain) or not _disjoint(chain):
        return None
    if len(chain) == 1 and fill is not EMPTY and fill == 0:
        return _single(graph, chain[0], list(base.shape))
    if all(w.step == 1 for w in chain):
        return _concatenated(graph, chain, base, fill)
    return _interleaved(graph, chain, base, fill)


def _diagonal(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """``diagonal_scatter`` into a fresh zeros: ``diagonal_backward``."""
    fill = fill_of(node.args[0])
    if node.kwargs or fill is None or fill is EMPTY or fill != 0:
        return None
    base, src, *rest = node.args
    offset, dim1, dim2 = rest + [0, 0, 1][len(rest):]
    if _meta(src).dtype != _meta(base).dtype:
        return None
    shape = list(_meta(base).shape)
    return _emit(graph, aten.diagonal_backward.default, (src, shape, offset, dim1, dim2))


def rewrite_fresh_scatters(gm: torch.fx.GraphModule) -> int:
    """Rebuild every chain of scatters into a fresh factory (see the module docstring), in
    place; returns how many scatters were replaced."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if getattr(node, "_erased", False) or node.op != "call_function":
            continue  # erased as part of an earlier chain
        if node.target is aten.diagonal_scatter.default:
            chain = [node]
            with graph.inserting_before(node):
                new = _diagonal(graph, node)
        elif _write(node) is not None and fill_of(node.args[0]) is not None:
            writes = _chain(node)
            chain = [w.node for w in writes]
            with graph.inserting_before(chain[-1]):
                new = _rebuilt(graph, writes, fill_of(node.args[0]))
        else:
            continue
        if new is None or _meta(new).stride() != _meta(chain[-1]).stride():
            continue  # nodes inserted for it are dead: the caller discards a graph left unchanged
        chain[-1].replace_all_uses_with(new)
        for old in reversed(chain):
            graph.erase_node(old)
        count += len(chain)
    return rewritten(gm, count, dead=True)
