"""``traced``: answers "the copies seem scary" from the design discussion (functorch#241).

Each formula is traced once per signature into an FX graph of ``torch.func.functionalize(formula)``,
its ``aten.copy`` elided (no batching rule: vmap would run its slow per-sample loop), the elided
graph checked once against the un-elided one, and the result compiled into a plain function that
runs with the real (batched) args: vmap batches a graph of out-of-place aten ops. That is
:func:`funcbwd.functionalized` (:mod:`funcbwd.decorator`), the public tool, one wrapper per formula
(unbounded cache): what the matrix proves is what users run. This module is the strategy around
it: the per-op wrappers and what they tell provenance (through the tool's ``observer``).

* A graph runs: provenance ``"FX graph"`` (or ``"un-elided graph (elision refused)"`` when the
  check refused the elided graph; :attr:`Traced.refused` keeps why), detail the signature.
* Formulas with data-dependent control flow (prod's ``.item()`` / ``nonzero``) cannot be traced
  (:class:`funcbwd.fx.tracer.DataDependentError`); they run functionalized at call time under vmap
  (the tool's fallback, what ``per_formula``'s ``functionalize_under_vmap`` does): provenance
  ``"fallback to per_formula"`` with the trace error, :meth:`Traced.untraceable`,
  :attr:`Traced.fallbacks`.
* Outside every functorch transform the formula runs as written (nothing to functionalize for);
  under any transform (vmap, or grad/jvp without vmap, where the graph is as correct) the graph
  runs. The test is the transform stack's depth, an int, not a walk over the interpreter stack
  looking for vmap: this runs on every backward call, and the walk cost more than the rest of the
  per-call bookkeeping together.

Per call the strategy computes the signature key (:func:`positional_key`: shapes, strides, dtypes
and constants of flat positional args, no pytree round trip), looks it up in the op's table and
calls the compiled graph (no ``nn.Module`` call, ops resolved once).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch.fx

from funcbwd.fx.formula_graphs import FormulaGraph, formula_args_for
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy
from funcbwd.decorator import TRACED, Untraceable, functionalized, signature_key

__all__ = ["GRAPH", "UNELIDED", "FALLBACK", "Traced", "Untraceable"]

GRAPH = "FX graph"
UNELIDED = "un-elided graph (elision refused)"
FALLBACK = "fallback to per_formula"


class Traced(Strategy):
    name = "traced"
    summary = ("formula traced once per signature, functionalized, aten.copy elided (checked), "
               "compiled graph run under vmap")
    formula_kinds = ("backward", "jvp")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: op name -> (its formula, the functionalized wrapper of it)
        self._wrappers: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}
        #: op name -> why (at least one signature of) it runs functionalized at call time
        self.fallbacks: dict[str, str] = {}
        #: op name -> why the check refused (at least one signature's) elided graph
        self.refused: dict[str, str] = {}
        self._retired_traces = 0

    # --- the wrappers --------------------------------------------------------------------------
    def _observer(self, op_name: str) -> Callable[[str, Any], None]:
        def observe(kind: str, entry: Any) -> None:
            if kind == TRACED:
                if isinstance(entry, Untraceable):
                    self.fallbacks.setdefault(op_name, entry.reason)
                elif entry.refusal:
                    self.refused.setdefault(op_name, entry.refusal)
            elif isinstance(entry, Untraceable):
                provenance.record(self.name, FALLBACK, False, entry.reason)
            elif entry.check.ok:
                provenance.record(self.name, GRAPH, True, entry.label)
            else:
                provenance.record(self.name, UNELIDED, True, f"{entry.label}: {entry.refusal}")
        return observe

    def wrapper(self, op) -> Callable[..., Any]:
        """``funcbwd.functionalized(op.formula)`` for this strategy (one per op and formula)."""
        hit = self._wrappers.get(op.name)
        if hit is None or hit[0] is not op.formula:
            with self._lock:
                hit = self._wrappers.get(op.name)
                if hit is None or hit[0] is not op.formula:
                    wrapped = functionalized(op.formula, maxsize=None, name=op.name,
                                             observer=self._observer(op.name), warn=False)
                    hit = self._wrappers[op.name] = (op.formula, wrapped)
        return hit[1]

    @property
    def trace_count(self) -> int:
        """How many signatures were traced (the cache tests read it)."""
        return self._retired_traces + sum(w.cache_info().misses for _, w in self._wrappers.values())

    def entry_for(self, op, args: tuple) -> FormulaGraph | Untraceable:
        """The graph entry for ``op.formula(*args)``'s signature, traced on first use."""
        core = self.wrapper(op).functionalizer
        return core.entry(signature_key(tuple(args)), op.formula, tuple(args))

    def graph_for(self, op, args: tuple) -> torch.fx.GraphModule | Untraceable:
        """The graph that runs for ``op.formula(*args)``'s signature (elided unless refused)."""
        hit = self.entry_for(op, args)
        return hit if isinstance(hit, Untraceable) else hit.graph

    def entries(self, op=None) -> list[FormulaGraph]:
        name = getattr(op, "name", op)
        with self._lock:
            wrappers = [w for n, (_, w) in self._wrappers.items() if name is None or n == name]
        return [e for w in wrappers for e in w.functionalizer.cache.values()
                if isinstance(e, FormulaGraph)]

    def cached_graphs(self, op=None) -> list[torch.fx.GraphModule]:
        return [e.graph for e in self.entries(op)]

    def clear_cache(self) -> None:
        with self._lock:
            self._retired_traces = self.trace_count
            self._wrappers.clear()
            self.fallbacks.clear()
            self.refused.clear()

    def untraceable(self, op, samples=None) -> str | None:
        """Why ``op``'s formula cannot be traced (it then runs functionalized at call time), or
        None. Probes every sample of ``op`` (or ``samples``) with a cotangent of ones; cached."""
        from funcbwd_lab.ops.registry import get_op

        spec = get_op(op) if isinstance(op, str) else op
        for smp in (spec.samples() if samples is None else samples):
            hit = self.entry_for(spec, formula_args_for(spec, smp))
            if isinstance(hit, Untraceable):
                return f"{smp.name}: {hit.reason}"
        return None

    # --- inside the backward ---------------------------------------------------------------
    def run_formula(self, op, args: tuple) -> Any:
        return self.wrapper(op)(*args)  # as written outside every transform (the tool's check)

    def bookkeeping(self) -> Any:
        # The cache legitimately grows; what must return to rest is tracing in progress.
        with self._lock:
            wrappers = [w for _, w in self._wrappers.values()]
        return {"building": sum(w.functionalizer.cache.building() for w in wrappers)}
