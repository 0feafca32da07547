"""Slice ends clamped to the dimension's size: ``x[::2] = v`` then batches under vmap.

Functionalizing a write into ``x[::2]`` records ``slice_scatter(x, v, 0, 0, 9223372036854775807,
2)`` (the open end as ``sys.maxsize``). torch 2.13's batched ``slice_scatter`` fails on that end
with a step above 1 ("invalid size, possible overflow?"; with step 1: "IntArrayRef contains an int
that cannot be represented as a SymInt"), also for plain ``vmap(functionalize(f))``: functorch#105's
slice assignments hit it. Slicing clamps ``end`` to the size anyway, so replacing an end past the
size by the size (known per signature from the input's metadata) computes the same thing.

Also here, the other rewrite of the trace that keeps its values: a random fill's input detached
(:func:`detach_random_fills`).
"""

from __future__ import annotations

import torch
import torch.fx

from funcbwd.fx.elide import _meta

aten = torch.ops.aten
#: op -> (position of the sliced tensor, of dim, of end); defaults dim=0, start=None, end=None
_SLICES = {aten.slice.Tensor: (0, 1, 3), aten.slice_scatter.default: (0, 2, 4)}


def clamp_slice_ends(gm: torch.fx.GraphModule) -> int:
    """Clamp every open or oversized slice end of ``gm`` to its dim's size, in place; returns how
    many nodes changed."""
    count = 0
    for node in gm.graph.nodes:
        spec = _SLICES.get(node.target) if node.op == "call_function" else None
        if spec is None or node.kwargs:
            continue
        base, dim_at, end_at = spec
        args = list(node.args) + [None] * (end_at + 2 - len(node.args))
        dim = 0 if args[dim_at] is None else args[dim_at]
        size = _meta(args[base]).shape[dim]
        end = args[end_at]
        if isinstance(end, int) and end <= size:
            continue
        args[end_at] = size
        if args[end_at - 1] is None:
            args[end_at - 1] = 0
        if args[end_at + 1] is None:
            args[end_at + 1] = 1
        node.args = tuple(args)
        count += 1
    if count:
        gm.recompile()
    return count


#: random fills (functionalized ``t.bernoulli_(p)``, ``t.normal_()``, ...): the output takes only
#: its input's shape, and torch has no derivative for some of them (aten::bernoulli.p,
#: aten::normal_functional) where the in-place op's is zero
_aten = torch.ops.aten
RANDOM_FILLS = frozenset({
    _aten.bernoulli.p, _aten.normal_functional.default, _aten.uniform.default,
    _aten.exponential.default, _aten.geometric.default, _aten.log_normal.default,
    _aten.cauchy.default, _aten.random.default, getattr(_aten.random, "from"), _aten.random.to})


def detach_random_fills(gm: torch.fx.GraphModule) -> int:
    """Feed every random fill a detached input (same values; no gradient to ask torch for)."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in RANDOM_FILLS and node.args and \
                isinstance(node.args[0], torch.fx.Node):
            with gm.graph.inserting_before(node):
                detached = gm.graph.call_function(_aten.detach.default, (node.args[0],))
            if "val" in node.args[0].meta:
                detached.meta["val"] = node.args[0].meta["val"]
            node.args = (detached,) + tuple(node.args[1:])
            count += 1
    if count:
        gm.recompile()
    return count
