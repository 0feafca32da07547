"""``traced``: answers "the copies seem scary" from the design discussion (functorch#241).

Each formula is traced once per signature (tensor shapes/dtypes/devices + the non-tensor args,
which are baked in) into an FX graph of ``torch.func.functionalize(formula)``, with fake tensors of
the *logical* (per-sample) shapes and the functorch state cleared (the backward runs under vmap).
:func:`funcbwd.fx.elide.elide_copies` then removes the ``aten.copy`` functionalization emits (it has
no batching rule, so it would send vmap into its slow per-sample loop). The cached graph is run
with the real (batched) args, so vmap batches a graph of out-of-place aten ops.

Formulas with data-dependent control flow (prod's ``.item()`` / ``nonzero``) cannot be traced
with fake tensors; they fall back to ``per_formula``'s ``functionalize_under_vmap``, and the
strategy says so: :meth:`Traced.untraceable` and :attr:`Traced.fallbacks`.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.fx import elide
from funcbwd.strategies.base import Strategy
from funcbwd.strategies.per_formula import functionalize_under_vmap


# ------------------------------------------------------------------------------ signatures
@dataclasses.dataclass(frozen=True)
class FlatArgs:
    """A formula's args split into tensor leaves (graph inputs) and everything else (baked in)."""

    tensors: tuple[torch.Tensor, ...]
    key: tuple
    rebuild: Callable[[tuple], tuple]


def _const_key(v: Any) -> tuple:
    # The type is part of the key: True, 1 and 1.0 hash alike but trace differently.
    return (type(v).__name__, v if _hashable(v) else repr(v))


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def flatten_args(args: tuple) -> FlatArgs:
    """Split ``args``; the key identifies one traced graph (shapes, dtypes and constants)."""
    leaves, spec = pytree.tree_flatten(args)
    tpos = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    key = (str(spec),) + tuple(
        ("T", tuple(leaf.shape), leaf.dtype, leaf.device.type) if isinstance(leaf, torch.Tensor)
        else _const_key(leaf)
        for leaf in leaves
    )

    def rebuild(tensors: tuple) -> tuple:
        full = list(leaves)
        for p, t in zip(tpos, tensors):
            full[p] = t
        return pytree.tree_unflatten(full, spec)

    return FlatArgs(tuple(leaves[i] for i in tpos), key, rebuild)


def trace_formula(formula: Callable[..., Any], args: tuple, *, functionalize: bool = True,
                  elide_copies: bool = False) -> torch.fx.GraphModule:
    """make_fx graph of ``formula(*args)`` taking the tensor args as inputs (fake tensors of
    their logical shapes), outside any transform. Raises if the formula is data-dependent."""
    flat = flatten_args(args)
    specs = [(tuple(t.shape), t.dtype, t.device) for t in flat.tensors]  # logical shapes

    def flat_formula(*tensors: torch.Tensor) -> Any:
        return formula(*flat.rebuild(tensors))

    fn = torch.func.functionalize(flat_formula) if functionalize else flat_formula
    with internals.cleared_functorch_state():
        examples = [torch.zeros(s, dtype=d, device=dev) for s, d, dev in specs]
        gm = make_fx(fn, tracing_mode="fake")(*examples)
    if elide_copies:
        elide.elide_copies(gm)
    return gm


# ------------------------------------------------------------------------------ the strategy
@dataclasses.dataclass(frozen=True)
class Untraceable:
    """A cached negative result: this signature cannot be traced, and why."""

    reason: str


def _reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:240]


class Traced(Strategy):
    name = "traced"
    summary = "formula traced once per signature, functionalized, aten.copy elided, graph run under vmap"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._graphs: dict[tuple, torch.fx.GraphModule | Untraceable] = {}
        self._fallback_fns: dict[str, Callable[..., Any]] = {}
        #: op name -> why (at least one signature of) it runs functionalize_under_vmap, not a graph
        self.fallbacks: dict[str, str] = {}
        #: how many graphs were traced (the cache tests read it)
        self.trace_count = 0
        self._tracing = 0

    # --- the cache ---------------------------------------------------------------------------
    def graph_for(self, op, args: tuple, flat: FlatArgs | None = None
                  ) -> torch.fx.GraphModule | Untraceable:
        """The elided graph for ``op.formula(*args)``'s signature, traced on first use."""
        key = (op.name,) + (flat or flatten_args(args)).key
        with self._lock:  # make_fx is not re-entrant; tracing once per key also needs the lock
            hit = self._graphs.get(key)
            if hit is None:
                self._tracing += 1
                try:
                    self.trace_count += 1
                    hit = trace_formula(op.formula, args, elide_copies=True)
                except Exception as e:  # noqa: BLE001 - any trace failure means: use the fallback
                    hit = Untraceable(_reason(e))
                    self.fallbacks.setdefault(op.name, hit.reason)
                finally:
                    self._tracing -= 1
                self._graphs[key] = hit
            return hit

    def cached_graphs(self, op=None) -> list[torch.fx.GraphModule]:
        name = getattr(op, "name", op)
        with self._lock:
            return [g for k, g in self._graphs.items()
                    if isinstance(g, torch.fx.GraphModule) and (name is None or k[0] == name)]

    def clear_cache(self) -> None:
        with self._lock:
            self._graphs.clear()
            self.fallbacks.clear()

    def untraceable(self, op, samples=None) -> str | None:
        """Why ``op``'s formula cannot be traced (it then runs functionalize_under_vmap), or None.

        Probes every sample of ``op`` (or ``samples``) with a cotangent of ones; results are cached."""
        from funcbwd.ops.registry import get_op

        spec = get_op(op) if isinstance(op, str) else op
        for smp in (spec.samples() if samples is None else samples):
            hit = self.graph_for(spec, formula_args_for(spec, smp))
            if isinstance(hit, Untraceable):
                return f"{smp.name}: {hit.reason}"
        return None

    # --- inside the backward ---------------------------------------------------------------
    def run_formula(self, op, args: tuple) -> Any:
        if not internals.vmap_active():
            return op.formula(*args)
        flat = flatten_args(args)
        hit = self.graph_for(op, args, flat)
        if isinstance(hit, Untraceable):
            fn = self._fallback_fns.get(op.name)
            if fn is None:
                fn = self._fallback_fns[op.name] = functionalize_under_vmap(op.formula)
            return fn(*args)
        return hit(*flat.tensors)

    def bookkeeping(self) -> Any:
        # The cache legitimately grows; what must return to rest is tracing in progress.
        return {"tracing_in_progress": self._tracing, "lock_held": self._lock.locked()}


def formula_args_for(op, sample, grads: tuple | None = None) -> tuple:
    """The formula's args for ``sample``: the forward's outputs and (by default) ones cotangents."""
    with torch.no_grad():
        outs = op.outputs_tuple(op.torch_op(*sample.args))
    if grads is None:
        grads = tuple(torch.ones_like(op.outputs_tuple(outs)[i]) for i in op.diff_outputs)
    return op.formula_args(sample.args, outs, grads)
