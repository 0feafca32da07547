"""One signature of ``traced_backward``: its joint graph traced, made fallback-free, elided,
checked and compiled (:func:`build`), or refused with why (see
:mod:`funcbwd_lab.strategies.traced_backward` for what runs it and when)."""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch

from funcbwd import internals
from funcbwd_lab.batching import RULES
from funcbwd.errors import first_line
from funcbwd.fx import codegen, elide
from funcbwd_lab.fx import fallback_free
from funcbwd.fx.formula_graphs import bindings_equivalent, tensor_spec
from funcbwd_lab.fx.joint import (JointCall, JointGraph, Refused, _tensor_positions, check_graph,
                              check_inputs, refusal, reshape_views, trace_joint)
from funcbwd.fx.select_scatter import rewrite_select_scatter

GRAPH = "traced backward graph ran"
UNELIDED = "traced backward graph ran (un-elided: the elided graph failed the check)"


def build(call: JointCall, check: bool = True, decompose: bool = True) -> JointGraph | Refused:
    """:func:`_build` outside every transform: the elision pass runs ops on the trace's fake
    tensors, which under a jvp level (vmapjvpvjp) corrupts the dispatch TLS on torch 2.13."""
    full = (*call.flat, *call.outputs)
    specs = [tensor_spec(a) if isinstance(a, torch.Tensor) else a for a in full]  # logical, read here
    with internals.cleared_functorch_state():
        return _build(call, specs, check, decompose)


def _build(call: JointCall, logical: Sequence[Any], check: bool = True, decompose: bool = True
           ) -> JointGraph | Refused:
    """Trace ``call.traced`` for ``call.flat``'s signature (:func:`trace_joint`), make the
    forward's outputs graph inputs, refuse it (:func:`refusal`), decompose the nodes that fall
    back under vmap (unless ``decompose`` is False), elide copies and rewrite ``select_scatter``
    on a copy, check (unless ``check`` is False) and compile the graph that runs."""
    flat, n_out = call.flat, len(call.outputs)
    try:
        traced = trace_joint(call.traced, flat)
    except Exception as e:  # noqa: BLE001 - untraceable: the fallback says why
        return Refused(f"untraceable: {type(e).__name__}: {first_line(str(e), 160)}")
    fallback_free.forward_outputs_as_inputs(traced, n_out)
    why = refusal(traced)  # on what runs: a random op the backward no longer needs is not drawn
    if why:
        return Refused(why)
    full = (*flat, *call.outputs)
    tpos = _tensor_positions(full)
    specs = [logical[p] for p in tpos]
    report = fallback_free.FallbackReport(probe="decomposition off")
    if decompose:
        sample = check_inputs(full)
        batched = [call.batched[p] if p < len(call.batched) else False for p in tpos]
        traced, report = fallback_free.decompose_fallbacks(traced, [sample[p] for p in tpos], batched)
    elided = copy.deepcopy(traced)
    elision = elide.elide_copies(elided)  # first: it sees select_scatter's src as read for values
    rewrites = rewrite_select_scatter(elided)
    rewrite_select_scatter(traced)
    forward = call.forward

    tried = []
    for gm, is_elided in ((elided, True), (traced, False))[: 2 if elision.count else 1]:
        # bindings checked before the view rewrite: aten.reshape has one overload, so its binding
        # binds it, but re-tracing the binding records the view it decomposes to
        bindings = bindings_equivalent(gm, specs)
        reshaped = reshape_views(gm)
        run = codegen.compile_graph(gm, tpos, "traced_backward", bindings)
        ok, detail = (check_graph(lambda ins, run=run: run([*ins, *forward(*ins)]), call.joint, flat)
                      if check else (True, "not checked"))
        tried.append(detail)
        if ok:
            nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
            text = (f"{nodes} ops, {elision.count if is_elided else 0} copies elided"
                    + (f", {rewrites} select_scatter rewritten" if rewrites else "")
                    + (f", {reshaped} views as reshape" if reshaped else "")
                    + f"; {report.text()}; {detail}")
            final = fallback_free.final_report(report, gm, RULES)
            text = text.replace(report.text(), final.text())
            needs = any(n.op == "call_function" and fallback_free.op_name(n.target) in RULES
                        for n in gm.graph.nodes)
            return JointGraph(gm, run, GRAPH if is_elided else UNELIDED, text, final, needs)
    return Refused("graph check failed: " + "; un-elided: ".join(tried))
