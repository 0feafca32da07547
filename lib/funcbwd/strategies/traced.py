"""``traced``: answers "the copies seem scary" from the design discussion (functorch#241).

Each formula is traced once per signature into an FX graph of ``torch.func.functionalize(formula)``,
its ``aten.copy`` elided (no batching rule: vmap would run its slow per-sample loop), the elided
graph checked once against the un-elided one, and the result compiled into a plain function that
runs with the real (batched) args: vmap batches a graph of out-of-place aten ops. All of that is
:mod:`funcbwd.fx.formula_graphs`; this module is the strategy around it: the cache, the fallback,
and what it tells provenance.

* A graph runs: provenance ``"FX graph"`` (or ``"un-elided graph (elision refused)"`` when the
  check refused the elided graph; :attr:`Traced.refused` keeps why), detail the signature.
* Formulas with data-dependent control flow (prod's ``.item()`` / ``nonzero``) cannot be traced
  with fake tensors; they fall back to ``per_formula``'s ``functionalize_under_vmap``: provenance
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

import dataclasses
import threading
from typing import Any, Callable

import torch.fx

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd.fx.formula_graphs import (FlatArgs, FormulaGraph, build, flatten_args,
                                       formula_args_for, positional_key)
from funcbwd.strategies import provenance
from funcbwd.strategies.base import Strategy
from funcbwd.strategies.per_formula import functionalize_under_vmap

GRAPH = "FX graph"
UNELIDED = "un-elided graph (elision refused)"
FALLBACK = "fallback to per_formula"


@dataclasses.dataclass(frozen=True)
class Untraceable:
    """A cached negative result: this signature cannot be traced, and why."""

    reason: str


class _OpTable(dict):
    """signature key -> FormulaGraph | Untraceable, for one formula (and its fallback)."""

    def __init__(self, formula: Callable[..., Any]) -> None:
        super().__init__()
        self.formula = formula
        self.fallback = functionalize_under_vmap(formula)


class Traced(Strategy):
    name = "traced"
    summary = ("formula traced once per signature, functionalized, aten.copy elided (checked), "
               "compiled graph run under vmap")
    formula_kinds = ("backward", "jvp")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[str, _OpTable] = {}
        #: op name -> why (at least one signature of) it runs functionalize_under_vmap, not a graph
        self.fallbacks: dict[str, str] = {}
        #: op name -> why the check refused (at least one signature's) elided graph
        self.refused: dict[str, str] = {}
        #: how many signatures were traced (the cache tests read it)
        self.trace_count = 0
        self._tracing = 0

    # --- the cache ---------------------------------------------------------------------------
    def _table(self, op) -> _OpTable:
        table = self._tables.get(op.name)
        if table is None or table.formula is not op.formula:
            with self._lock:
                table = self._tables.get(op.name)
                if table is None or table.formula is not op.formula:
                    table = self._tables[op.name] = _OpTable(op.formula)
        return table

    def entry_for(self, op, args: tuple) -> FormulaGraph | Untraceable:
        """The graph entry for ``op.formula(*args)``'s signature, traced on first use."""
        table = self._table(op)
        key = positional_key(args)
        if key is None:
            key = ("pytree",) + flatten_args(tuple(args)).key
        hit = table.get(key)
        return hit if hit is not None else self._trace(op, args, table, key)

    def _trace(self, op, args: tuple, table: _OpTable, key: tuple) -> FormulaGraph | Untraceable:
        with self._lock:  # make_fx is not re-entrant; tracing once per key also needs the lock
            hit = table.get(key)
            if hit is not None:
                return hit
            self._tracing += 1
            try:
                self.trace_count += 1
                hit = build(op.formula, args, name=op.name)
                if hit.refusal:
                    self.refused.setdefault(op.name, hit.refusal)
            except Exception as e:  # noqa: BLE001 - any trace failure means: use the fallback
                hit = Untraceable(f"{type(e).__name__}: {first_line(str(e))}")
                self.fallbacks.setdefault(op.name, hit.reason)
            finally:
                self._tracing -= 1
            table[key] = hit
            return hit

    def graph_for(self, op, args: tuple, flat: FlatArgs | None = None
                  ) -> torch.fx.GraphModule | Untraceable:
        """The graph that runs for ``op.formula(*args)``'s signature (elided unless refused)."""
        hit = self.entry_for(op, args)
        return hit if isinstance(hit, Untraceable) else hit.graph

    def entries(self, op=None) -> list[FormulaGraph]:
        name = getattr(op, "name", op)
        with self._lock:
            return [g for n, t in self._tables.items() if name is None or n == name
                    for g in t.values() if isinstance(g, FormulaGraph)]

    def cached_graphs(self, op=None) -> list[torch.fx.GraphModule]:
        return [e.graph for e in self.entries(op)]

    def clear_cache(self) -> None:
        with self._lock:
            self._tables.clear()
            self.fallbacks.clear()
            self.refused.clear()

    def untraceable(self, op, samples=None) -> str | None:
        """Why ``op``'s formula cannot be traced (it then runs functionalize_under_vmap), or None.

        Probes every sample of ``op`` (or ``samples``) with a cotangent of ones; results are cached."""
        from funcbwd.ops.registry import get_op

        spec = get_op(op) if isinstance(op, str) else op
        for smp in (spec.samples() if samples is None else samples):
            hit = self.entry_for(spec, formula_args_for(spec, smp))
            if isinstance(hit, Untraceable):
                return f"{smp.name}: {hit.reason}"
        return None

    # --- inside the backward ---------------------------------------------------------------
    def run_formula(self, op, args: tuple) -> Any:
        if not internals.stack_depth():
            return op.formula(*args)
        hit = self.entry_for(op, args)
        if isinstance(hit, Untraceable):
            provenance.record(self.name, FALLBACK, False, hit.reason)
            return self._table(op).fallback(*args)
        if hit.check.ok:
            provenance.record(self.name, GRAPH, True, hit.label)
        else:
            provenance.record(self.name, UNELIDED, True, f"{hit.label}: {hit.refusal}")
        return hit.run(args)

    def bookkeeping(self) -> Any:
        # The cache legitimately grows; what must return to rest is tracing in progress.
        return {"tracing_in_progress": self._tracing, "lock_held": self._lock.locked()}
