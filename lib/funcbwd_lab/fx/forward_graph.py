"""A fallback-free graph of a function's *forward*, where vmap runs an op of it one sample at a
time: ``traced_backward``'s forward stage.

``traced_backward`` replaces torch's backward where *it* falls back; many ops fall back in the
forward instead (``t_copy``, ``permute_copy``, ``masked_fill`` with a tensor value, ``renorm``,
``special.log_ndtr``, ``lerp_`` inside ``quantile``, ``tril_`` inside ``householder_product``,
``max_unpool``: no batching rule, or none for that batching), and there the backward cannot
help. :func:`build` traces ``fn(*primals, *inputs)`` once per signature (the forward alone,
:func:`funcbwd_lab.fx.joint.trace_joint`: functionalized make_fx on fake tensors of the logical
shapes, outside every transform), decomposes every node vmap would run through its fallback
(:func:`funcbwd_lab.fx.fallback_free.decompose_fallbacks`: torch's decompositions, the graph run
once under vmap with the fallback disabled), and checks it: on seeded inputs of the signature,
the graph's outputs *and* its vjp (autograd through the decomposed ops, seeded cotangents) against
``fn``'s own (:func:`funcbwd_lab.fx.joint.compare`: the dtype's tolerance). :class:`ForwardGraph`
then stands for ``fn``: its vjp is taken through the graph (the decomposed ops' own formulas,
batched by their rules), and ``traced_backward`` builds its joint graph from it where that
backward still falls back.

Refused (``fn`` runs as written): a trace that raises, a random or mutating op in the graph
(:func:`funcbwd_lab.fx.joint.refusal`: a second forward would draw or write again), nothing decomposed, a check that
differs or cannot run. The stage is entered only after a call of ``fn`` under vmap warned that an
op fell back (:data:`funcbwd.internals.FALLBACK_RE`): a fallback torch reaches from C++ (inside a
composite op) prints to stderr instead and is not seen here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd.fx import codegen
from funcbwd_lab.fx import fallback_free
from funcbwd.fx.formula_graphs import flatten_args, positional_key
from funcbwd_lab.fx.joint import (CHECK_SEED, Refused, _tensor_positions, check_inputs, compare, flatten,
                              refusal, reshape_views, trace_joint)

#: a cached decision not to use a forward graph (the forward needs none, or it was refused)
AS_WRITTEN = "the forward as written"


@dataclasses.dataclass(frozen=True)
class ForwardGraph:
    """The checked forward graph of one signature: ``function(*primals, *inputs)`` runs it and
    returns ``fn``'s output structure (a tensor or a tuple of tensors)."""

    graph: torch.fx.GraphModule
    run: Callable[[Sequence[Any]], Any]
    single: bool
    detail: str
    report: fallback_free.FallbackReport

    def function(self, *args: Any) -> Any:
        flat = pytree.tree_leaves(args) if any(type(a) is not torch.Tensor for a in args) else args
        out = self.run(flat)
        return out[0] if self.single else tuple(out)


def _structure(out: Any) -> bool | None:
    """True: one tensor; False: a tuple of tensors; None: anything else (not handled)."""
    if isinstance(out, torch.Tensor):
        return True
    if type(out) is tuple and all(isinstance(o, torch.Tensor) for o in out):
        return False
    return None


def _vjp_check(fn: Callable, graph_fn: Callable, primals: Sequence[Any], inputs: Sequence[Any]
               ) -> str:
    """'' if ``graph_fn``'s outputs and vjp (seeded cotangents) match ``fn``'s on these plain
    values, else the first difference."""
    gen = torch.Generator().manual_seed(CHECK_SEED + 1)
    results = []
    for f in (fn, graph_fn):
        out, vjp_fn = torch.func.vjp(lambda *p: f(*p, *inputs), *primals)
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        if not results:
            cts = [torch.randn(o.shape, generator=gen, dtype=o.dtype) if o.is_floating_point()
                   or o.is_complex() else torch.zeros_like(o) for o in outs]
        grads = vjp_fn(cts[0] if isinstance(out, torch.Tensor) else tuple(cts))
        results.append([o.detach() for o in outs] + [g for g in pytree.tree_leaves(grads)
                                                     if isinstance(g, torch.Tensor)])
    return compare(results[1], results[0])


def build(fn: Callable, primals: tuple, inputs: tuple, batched: Sequence[bool]
          ) -> ForwardGraph | Refused:
    """The forward graph of ``fn(*primals, *inputs)`` for this call's signature (module
    docstring); ``batched``: which tensors of ``(*primals, *inputs)`` the call batches."""
    p_leaves, p_spec = pytree.tree_flatten(primals)
    i_leaves, i_spec = pytree.tree_flatten(inputs)
    flat, n_p = (*p_leaves, *i_leaves), len(p_leaves)

    def forward(*leaves: Any) -> tuple:
        p = pytree.tree_unflatten(list(leaves[:n_p]), p_spec)
        i = pytree.tree_unflatten(list(leaves[n_p:]), i_spec)
        out = fn(*p, *i)
        return (out,) if isinstance(out, torch.Tensor) else tuple(out)

    try:
        gm = trace_joint(forward, flat)
    except Exception as e:  # noqa: BLE001 - untraceable: the forward runs as written
        return Refused(f"untraceable: {type(e).__name__}: {first_line(str(e), 160)}")
    why = refusal(gm)
    if why:
        return Refused(why)
    tpos = _tensor_positions(flat)
    with internals.cleared_functorch_state():
        sample = check_inputs(flat)
        single = _structure(fn(*pytree.tree_unflatten(list(sample[:n_p]), p_spec),
                               *pytree.tree_unflatten(list(sample[n_p:]), i_spec)))
        if single is None:
            return Refused("the forward returns other than a tensor or a tuple of tensors")
        gm, report = fallback_free.decompose_fallbacks(gm, [sample[p] for p in tpos],
                                                       [batched[p] for p in tpos])
        if not report.decomposed:
            return Refused(f"nothing to decompose ({report.text()})")
        reshape_views(gm)
        run = codegen.compile_graph(gm, tpos, "traced_backward forward")
        graph = ForwardGraph(gm, run, single, "", report)
        p_sample = pytree.tree_unflatten(list(sample[:n_p]), p_spec)
        i_sample = pytree.tree_unflatten(list(sample[n_p:]), i_spec)
        try:
            diff = _vjp_check(fn, graph.function, p_sample, i_sample)
        except Exception as e:  # noqa: BLE001 - eager or the graph raised on the seeded values
            return Refused(f"check inconclusive: {type(e).__name__}: {first_line(str(e), 100)}")
    if diff:
        return Refused(f"the forward graph differs from fn on seeded inputs: {diff}")
    nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    detail = (f"forward graph: {nodes} ops; {report.text()}; outputs and vjp match fn's on "
              f"seeded inputs (seed {CHECK_SEED})")
    return dataclasses.replace(graph, detail=detail)


def signature(f_key: Any, primals: tuple, inputs: tuple) -> tuple:
    """The forward stage's cache key: the function, the leaves' signature and their batching."""
    leaves = [*flatten(primals)[0], *flatten(inputs)[0]]
    sig = positional_key(leaves)
    return (f_key, sig if sig is not None else flatten_args(leaves).key,
            tuple(internals.batched_here(t) for t in leaves if isinstance(t, torch.Tensor)))
