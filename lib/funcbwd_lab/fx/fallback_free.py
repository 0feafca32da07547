"""Joint graphs without vmap's per-sample fallback, and without a recomputed forward.

Two passes on a joint graph (``traced_backward``'s: the forward and torch's backward nodes, traced
once per signature):

* :func:`forward_outputs_as_inputs`: the nodes computing the forward's outputs are replaced by new
  placeholders (the caller passes the outputs its eager forward already computed), so the forward
  is recomputed only as far as the backward needs values the forward did not return. An op of
  the forward without a batching rule (``special_log_ndtr``) then falls back once (in the eager
  forward), not twice;
* :func:`decompose_fallbacks`: every node whose op takes vmap's slow fallback is replaced by
  torch's decomposition of it (:func:`funcbwd.internals.decomposition`: ``torch._decomp``'s table,
  else the op's CompositeImplicitAutograd kernel), by re-tracing the graph with those ops in the
  decomposition table, until no such node is left or the rest is reported, each op with why (no
  decomposition in torch; its decomposition does not trace; it still falls back after it);
  ops torch has no decomposition for may have one of funcbwd's (:data:`OWN_DECOMPOSITIONS`:
  ``put``, take's backward; ``_conj_physical``, the Hermitian FFTs'). Which
  nodes fall back is read two ways: statically, the op's ``FuncTorchBatched`` dispatch entry is
  vmap's backend fallback (:func:`funcbwd.internals.batching_kind`); and by running the graph
  once under ``vmap`` (batch 2, batched where the call's tensors are) with the fallback disabled
  (:func:`vmap_probe`): the op vmap names when it would fall back (a batching rule that falls
  back for some arguments, an op reached through a batch-time decomposition) is decomposed too.

Nothing here changes values on purpose; a decomposition may round differently, so the caller
checks the final graph against the eager vjp (``traced_backward``'s check).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import torch
import torch.fx

from funcbwd import internals
from funcbwd.errors import first_line

#: re-traces at most (each decomposes every op found in that round)
MAX_ROUNDS = 8
NO_DECOMPOSITION = "no decomposition in torch or funcbwd (torch._decomp, CompositeImplicitAutograd)"


def _put(self: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
         accumulate: bool = False) -> torch.Tensor:
    """``aten::put`` (take's backward) as ``index_put`` on the flattened tensor, which has a
    batching rule: ``put`` indexes ``self`` as if it were 1-D; negative indices wrap in both."""
    flat = torch.ops.aten.reshape.default(self, [-1])
    out = torch.ops.aten.index_put.default(flat, [torch.ops.aten.reshape.default(index, [-1])],
                                           torch.ops.aten.reshape.default(source, [-1]), accumulate)
    return torch.ops.aten.reshape.default(out, list(self.shape))


def _conj_physical(self: torch.Tensor) -> torch.Tensor:
    """``aten::_conj_physical`` (the Hermitian FFTs' backward) from ops with batching rules: the
    real part and the negated imaginary part stacked back into a complex tensor (a copy, as
    ``_conj_physical`` makes); a real tensor is copied as it is."""
    aten = torch.ops.aten
    if not self.is_complex():
        return aten.clone.default(self)
    parts = aten.view_as_real.default(self)
    re = aten.select.int(parts, -1, 0)
    im = aten.neg.default(aten.select.int(parts, -1, 1))
    return aten.view_as_complex.default(aten.stack.default([re, im], -1))


#: funcbwd's own decompositions, for ops torch has none for (used after torch's); each is checked
#: like every graph (against the eager vjp) before it runs
OWN_DECOMPOSITIONS = {torch.ops.aten.put.default: _put,
                      torch.ops.aten._conj_physical.default: _conj_physical}


def decomposition(op: Any) -> tuple[Any, str]:
    """(the decomposition of ``op``, whose: "torch" or "funcbwd"), or (None, "")."""
    d = internals.decomposition(op)
    if d is not None:
        return d, "torch"
    d = OWN_DECOMPOSITIONS.get(op)
    return (d, "funcbwd") if d is not None else (None, "")


# ------------------------------------------------------------------------------ forward outputs
def forward_outputs_as_inputs(gm: torch.fx.GraphModule, n_outputs: int) -> int:
    """In place: ``gm`` returns ``(*outputs, *grads)``; afterwards it returns ``grads`` and takes
    ``n_outputs`` more placeholders (after its own, in order) standing for ``outputs``: every use of
    an output node reads the placeholder, and the forward nodes only the outputs needed are dead
    (dropped). Returns how many output nodes were replaced (an output that is a placeholder
    already, a primal returned as is, keeps its own node)."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(out.args[0])
    outputs, grads = results[:n_outputs], results[n_outputs:]
    last = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    replaced, seen = 0, {}
    for i, node in enumerate(outputs):
        with gm.graph.inserting_after(last):
            p = gm.graph.placeholder(f"forward_output_{i}")
        last = p
        if isinstance(node, torch.fx.Node):
            p.meta.update({k: v for k, v in node.meta.items() if k in ("val", "tensor_meta")})
        if isinstance(node, torch.fx.Node) and node.op != "placeholder" and node not in seen:
            seen[node] = p
            node.replace_all_uses_with(p)
            replaced += 1
    out.args = (tuple(seen.get(g, g) if isinstance(g, torch.fx.Node) else g for g in
                      (out.args[0][n_outputs:])),)
    del grads
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return replaced


# ------------------------------------------------------------------------------ which nodes fall back
def op_name(op: Any) -> str:
    """``aten::name`` or ``aten::name.overload``, as vmap names an op."""
    return op.name() if isinstance(op, torch._ops.OpOverload) else str(op)


@functools.lru_cache(maxsize=None)
def _no_batching_rule(name: str) -> bool:
    return internals.batching_kind(name) == "fallback"


def batched_nodes(gm: torch.fx.GraphModule, batched: Sequence[bool] | None) -> set:
    """The nodes vmap would see batched: the placeholders ``batched`` marks (None: every one),
    and every node with a batched node among its arguments (a factory, or an op of unbatched
    values only, never reaches vmap's batching rules or its fallback)."""
    out: set = set()
    placeholders = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if batched is None or (placeholders < len(batched) and batched[placeholders]):
                out.add(n)
            placeholders += 1
        elif n.op == "call_function":
            if any(a in out for a in n.all_input_nodes):
                out.add(n)
    return out


def static_fallbacks(gm: torch.fx.GraphModule, batched: Sequence[bool] | None = None
                     ) -> list[torch._ops.OpOverload]:
    """The ops of ``gm``'s batched nodes (:func:`batched_nodes`) whose ``FuncTorchBatched`` entry
    is vmap's per-sample fallback."""
    live = batched_nodes(gm, batched)
    ops = {n.target for n in gm.graph.nodes if n.op == "call_function" and n in live
           and isinstance(n.target, torch._ops.OpOverload)}
    return sorted((op for op in ops if _no_batching_rule(op_name(op))), key=op_name)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One run of a graph under vmap with the fallback disabled: ``op`` is the op that would
    have fallen back ('' if none did), ``error`` what else the run raised ('' if nothing)."""

    op: str = ""
    error: str = ""


def vmap_probe(gm: torch.fx.GraphModule, args: Sequence[torch.Tensor],
               batched: Sequence[bool]) -> Probe:
    """Run ``gm`` once under ``vmap`` (batch 2: each batched placeholder's ``args`` entry twice,
    the rest as they are) with the per-sample fallback disabled; outside every other transform."""
    ins = [torch.stack([a, a]) if b else a for a, b in zip(args, batched)]
    dims = tuple(0 if b else None for b in batched)
    if not any(batched):
        return Probe(error="no batched input")
    with internals.cleared_functorch_state(), internals.vmap_fallback_disabled(), torch.no_grad():
        try:
            torch.vmap(lambda *t: gm(*t), in_dims=dims)(*ins)
        except Exception as e:  # noqa: BLE001 - the named op falls back; anything else: reported
            name = internals.fallback_op_in(str(e))
            return Probe(op=name) if name else Probe(error=f"{type(e).__name__}: {first_line(str(e), 100)}")
    return Probe()


# ------------------------------------------------------------------------------ the pass
@dataclasses.dataclass(frozen=True)
class FallbackReport:
    """What :func:`decompose_fallbacks` did: ops decomposed, ops left (each with why), and how the
    final graph fared under vmap (:func:`vmap_probe`)."""

    decomposed: tuple[str, ...] = ()
    left: tuple[tuple[str, str], ...] = ()
    probe: str = "not run"
    rounds: int = 0

    def text(self) -> str:
        parts = []
        if self.decomposed:
            parts.append(f"decomposed {', '.join(self.decomposed)}")
        parts.append("fallback ops left: " + ("; ".join(f"{op} ({why})" for op, why in self.left)
                                               if self.left else "none"))
        parts.append(f"under vmap: {self.probe}")
        return ", ".join(parts)


def decompose_fallbacks(gm: torch.fx.GraphModule, args: Sequence[torch.Tensor],
                        batched: Sequence[bool] | None = None
                        ) -> tuple[torch.fx.GraphModule, FallbackReport]:
    """``gm`` with its falling-back nodes decomposed (module docstring), and the report. ``args``:
    real tensors of the placeholders' signature (the re-trace makes them fake; the probe runs on
    them); ``batched``: which placeholders the call batches (None: no probe)."""
    table: dict[Any, Any] = {}
    owners: dict[Any, str] = {}
    left: dict[str, str] = {}
    probe_text = "not run" if batched is None else ""
    rounds = 0
    while rounds < MAX_ROUNDS:
        found = [op for op in static_fallbacks(gm, batched) if op_name(op) not in left]
        if not found and batched is not None:
            p = vmap_probe(gm, args, batched)
            if p.error:
                probe_text = f"not verified ({p.error})"
                break
            if not p.op:
                probe_text = "no fallback (ran with vmap's fallback disabled)"
                break
            found = [op for op in _graph_ops(gm) if op_name(op) == p.op]
            if not found or p.op in left:
                left.setdefault(p.op, "falls back under vmap though no node of the graph is it "
                                      "(a batching rule or batch-time decomposition reaches it)")
                probe_text = f"{p.op} falls back"
                break
            for op in found:
                if op in table:  # decomposed already, and still there: not removable this way
                    left[op_name(op)] = "still falls back after its decomposition"
        new = [op for op in found if op not in table and op_name(op) not in left]
        if not new:
            break
        for op in new:
            d, whose = decomposition(op)
            if d is None:
                left[op_name(op)] = NO_DECOMPOSITION
            else:
                table[op] = d
                owners[op] = whose
        trying = [op for op in new if op in table]
        if not trying:
            continue
        rounds += 1
        try:
            with internals.cleared_functorch_state():
                gm = internals.retrace_decomposed(gm, table, list(args))
        except Exception as e:  # noqa: BLE001 - a decomposition that does not trace: reported
            for op in trying:
                del table[op]
                left[op_name(op)] = (f"its decomposition does not trace: {type(e).__name__}: "
                                     f"{first_line(str(e), 80)}")
    if batched is not None and not probe_text:
        probe_text = "stopped after the rounds" if rounds >= MAX_ROUNDS else "not run"
    for op in static_fallbacks(gm, batched):  # whatever is left in the graph is named
        left.setdefault(op_name(op), NO_DECOMPOSITION)
    return gm, FallbackReport(tuple(sorted(op_name(op) + (" (funcbwd's)" if owners[op] == "funcbwd" else "")
                                           for op in table)),
                              tuple(sorted(left.items())), probe_text, rounds)


def final_report(report: FallbackReport, gm: torch.fx.GraphModule, scoped: Sequence[str] = ()
                 ) -> FallbackReport:
    """``report`` for the graph that runs (``gm``: after copy elision, which may drop a node the
    pass reported): only the ops left that are still nodes of it; an op of ``scoped`` (funcbwd's
    scoped batching rules: ``aten::copy``) is said to be batched by that rule."""
    names = {op_name(op) for op in _graph_ops(gm)}
    left = tuple((op, SCOPED if op in scoped else why) for op, why in report.left if op in names)
    probe = report.probe
    gone = [op for op, _ in report.left if op not in names]
    if gone:
        probe += f" (before copy elision, which removed {', '.join(gone)})"
    return dataclasses.replace(report, left=left, probe=probe)


SCOPED = "no batching rule in torch; funcbwd's scoped rule batches it (with_rules)"


def _graph_ops(gm: torch.fx.GraphModule) -> list:
    return list({n.target for n in gm.graph.nodes if n.op == "call_function"})
