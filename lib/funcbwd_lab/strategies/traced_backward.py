"""``traced_backward``: ``traced``'s idea applied to torch's *own* backward nodes, one graph per
signature, installed where torch's backward takes vmap's slow per-sample fallback.

:meth:`TracedBackward.vjp` runs the forward eagerly (``torch.func.vjp``: ``out`` and the eager
``vjp_fn`` come from there) and returns a ``vjp_fn`` that, under vmap, runs a **joint graph**
instead of the eager backward where that backward falls back. **Where**: the first call of a
signature runs torch's backward with vmap's fallback disabled; if it runs, it is the answer and
the signature is cached as :class:`Passthrough` (torch's backward runs as is from then on,
provenance :data:`PASSTHROUGH`); if it raises (an op would fall back, or it fails) a graph is
built. ``install="always"`` builds one for every signature.

**The graph**: ``torch.func.vjp(fn, *primals)[1](cotangents)`` with the forward's outputs,
traced once per signature by :func:`trace_joint` (``make_fx(functionalize(joint),
tracing_mode="fake")`` on fake tensors of the logical shapes, strides and dtypes, outside every
transform: :func:`funcbwd.internals.cleared_functorch_state`). Its passes:
:func:`funcbwd_lab.fx.fallback_free.forward_outputs_as_inputs` (the forward's outputs become graph
inputs, fed the eager forward's outputs: the forward is recomputed only for values it did not
return), :func:`funcbwd_lab.fx.fallback_free.decompose_fallbacks` (every node vmap would run through
its per-sample fallback decomposed with torch's decompositions, checked by running the graph
once under vmap with the fallback disabled; what is left is named with why:
:class:`funcbwd_lab.fx.fallback_free.FallbackReport`), ``aten.copy`` nodes elided
(:func:`funcbwd.fx.elide.elide_copies`), ``select_scatter`` rewritten as ``slice_scatter``
(:mod:`funcbwd.fx.select_scatter`: the batched form's gradient is wrong), ``view`` nodes run as
``reshape`` (:func:`reshape_views`: the trace chose them on unbatched strides), dead nodes
dropped. The graph's inputs are the primals, the non-differentiated tensor ``inputs``, the
cotangents and the outputs; nothing the forward saved is baked into it. It runs on the call's
(batched or grad-tracking) tensors, its grads summed to the primals' shapes where a batch rule's
differ (:func:`reduced_to`: the autograd engine's own step, which the graph bypasses): vmap
batches them alike, and an outer ``vjp``/``grad`` differentiates the graph (vjp of vjp; the
outputs carry the eager forward's own derivative). Outside vmap the eager ``vjp_fn`` runs as
written.

**The forward stage** (:mod:`funcbwd_lab.fx.forward_graph`): an op of the *forward* without a
batching rule (``t_copy``, ``masked_fill`` with a tensor value, ``max_unpool``) takes vmap's
fallback before any backward runs. The first call of a forward signature under vmap watches vmap's
fallback warnings; where one names an op, a forward graph is built (the forward traced, its
falling-back nodes decomposed, its outputs and vjp checked against ``fn``'s on seeded inputs;
with :attr:`~TracedBackward.cost_gate`, kept only if its vjp, timed once, is not slower than
``fn``'s with the fallback) and later calls differentiate it instead of ``fn`` (provenance
:data:`FORWARD_GRAPH`; the backward stage then works on it as on ``fn``). A fallback torch reaches
from C++ (``quantile``'s ``lerp_``) prints to stderr instead of warning and is not seen.

Cache: per function (:func:`funcbwd_lab.fx.joint.function_key`: its code, and what it closes over,
captured tensors by identity: a fresh closure of the same code over the same objects hits the
same graph) and signature (shapes, strides, dtypes and devices of the tensors, values of the
non-tensor leaves, the pytree structures, which tensors vmap batches), least recently used first
out beyond :data:`CACHE_SIZE`. A passthrough is also kept per function and its primals' and
inputs' ranks, dtypes and batching (a coarse key: the next call returns torch's own ``vjp_fn``
after one dict lookup; a wrong hit can only run torch's backward, which is right). Tensors a caller varies must be primals or ``inputs``, not captured (a
captured *batched* tensor makes tracing raise: fallback).

Refused (the ``vjp_fn`` then runs under ``torch.func.functionalize``, ``whole``'s mechanism, with
provenance :data:`FALLBACK` and the reason; the refusal is cached per signature):

* tracing raises: control flow on values (``if x.sum() > 0``, a C++ formula branching on
  ``zeros.numel()``: fake tracing's data-dependent guard). Data-dependent *ops* (``.item()``,
  ``nonzero``, ``masked_select``) trace in torch 2.13 as unbacked sizes and run as eager does (the
  check compares them); under vmap they fail as eager does;
* a random op (``nondeterministic_seeded``) among the nodes the backward needs beyond the
  forward's outputs: the graph would draw new random numbers and differentiate another function;
* an op that mutates (``fn`` writes into its inputs: the graph would write into the caller's
  tensors);
* the graph check fails: each new graph is run once, outside every transform, on seeded inputs
  of its signature (floating tensors random normal, others the call's per-sample values:
  :func:`funcbwd.internals.one_sample`; the outputs computed from them by ``fn``) and compared
  with the eager joint (torch's own ``vjp``) on the same inputs: output structure, shapes, dtypes
  and values (the dtype's default ``torch.testing.assert_close`` tolerance, NaN equal to NaN).
  The elided graph is checked first; if it differs the un-elided graph is checked and, if it
  matches, runs (provenance :data:`UNELIDED`). Where the eager vjp raises on the random values
  (an input domain, e.g. a positive-definite matrix) the check runs on the call's own per-sample
  values instead, which cannot tell a graph that baked those values in; where it raises on both
  it is inconclusive and the graph is refused. One draw per signature, not a proof.

Cost: the eager forward runs as written under vmap (an op of it without a batching rule still
takes the slow fallback there: traced_backward acts on the backward only); the graph's ops are
called from Python, one call each; a passthrough call costs a key and a lookup.
:mod:`funcbwd_lab.studies.coverage.fallback_speedup` measures it (``data/fallback-speedup.json``).
Conservative refusals: an op tagged ``nondeterministic_seeded`` for an argument it may not use
(CPU flash attention at ``dropout_p=0``) is refused all the same.

Provenance: :data:`GRAPH` (ran=True, detail: nodes, copies elided, decomposed and left fallback
ops, check) when a graph runs; :data:`FORWARD_GRAPH` (ran=True) when the forward stage's graph
runs; :data:`PASSTHROUGH` (ran=False) where torch's backward needs
none; :data:`FALLBACK` (ran=False, detail: the reason); :data:`PLAIN` outside vmap.
:attr:`TracedBackward.trace_seconds` keeps the time each new signature took (trace, passes, check,
compile), :attr:`TracedBackward.trace_count` how many signatures were traced.
"""

from __future__ import annotations

import collections
import threading
import time
import warnings
from typing import Any, Callable, Sequence

import torch
import torch.func
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd_lab.fx import forward_graph
from funcbwd_lab.fx.forward_graph import ForwardGraph
from funcbwd.fx.formula_graphs import flatten_args, positional_key
# re-exported for the tests and studies that reach them through this module
from funcbwd_lab.fx.joint import (JointCall, JointGraph, Passthrough, Refused,  # noqa: F401
                              flatten, forward_function, function_key, joint_function,
                              joint_with_outputs, reduced_to, refusal, tensor_leaves,
                              trace_backward, trace_joint)
from funcbwd_lab.strategies import cost_gate, provenance
from funcbwd_lab.strategies.base import Strategy
from funcbwd_lab.strategies.joint_build import GRAPH, UNELIDED, build  # noqa: F401

FALLBACK = "no graph: vjp_fn functionalized as whole does"
PLAIN = "vjp_fn ran as written (no vmap level)"
PASSTHROUGH = "torch's backward ran as is (no per-sample fallback to remove)"
FORWARD_GRAPH = "traced forward graph ran (its fallback ops decomposed)"
#: the values of :attr:`TracedBackward.install`
INSTALL = ("fallback", "always")
#: signatures (over all functions) whose graphs or refusals are kept
CACHE_SIZE = 256


batched_here = internals.batched_here


def _bound(fn: Callable, inputs: tuple) -> Callable:
    """``fn`` with ``inputs`` appended to its arguments (what ``vjp`` differentiates)."""
    return (lambda *p: fn(*p, *inputs)) if inputs else fn


class _Other:
    """A non-tensor argument in a passthrough key (its value is in the full signature only)."""


# ------------------------------------------------------------------------------ the strategy
class TracedBackward(Strategy):
    name = "traced_backward"
    summary = ("under vmap, fn's forward and torch's backward traced once per signature into one "
               "functionalized graph (copies elided, checked), run on the batched primals and "
               "cotangents")
    formula_kinds = ("backward",)
    formula_kinds_reason = "it traces the vjp, i.e. the backward pass"
    acts_on_builtin_nodes = True
    backward_only = True
    #: :meth:`vjp` takes ``inputs``: tensors ``fn`` reads that are not differentiated
    takes_inputs = True

    def __init__(self, check: bool = True, install: str = "fallback", decompose: bool = True,
                 cost_gate: bool = False) -> None:
        #: False only to show what the check catches (tests): every graph is trusted
        self.check = check
        if install not in INSTALL:
            raise ValueError(f"install must be one of {INSTALL}, not {install!r}")
        #: "fallback": a graph only where torch's backward falls back or raises under vmap
        #: (:class:`Passthrough` elsewhere); "always": a graph for every signature
        self.install = install
        #: False only to show what the decomposition pass removes (tests, the study's mutation)
        self.decompose = decompose
        #: True: a graph slower than torch's backward with its fallback, timed once at the first
        #: call of its signature (:mod:`funcbwd_lab.strategies.cost_gate`), is not used (torch's backward runs). Off by
        #: default: the choice then depends on a timing (the sweep's verdicts must not); the
        #: fallback-speedup study turns it on
        self.cost_gate = cost_gate
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[tuple, JointGraph | Refused | Passthrough] = \
            collections.OrderedDict()
        self._passthrough: dict[tuple, Passthrough] = {}
        #: (id of a function object, its tensors' batching) -> (the object, its Passthrough)
        self._fast: dict[tuple, tuple[Any, Passthrough]] = {}
        #: the forward stage: signature -> its ForwardGraph, or why the forward runs as written
        self._forwards: dict[tuple, ForwardGraph | str | Refused] = {}
        #: forward signatures whose forward graph's backward runs as is (no backward graph)
        self._graph_plain: set[tuple] = set()
        #: coarse keys (as the passthrough's) whose forward runs as written: no stage per call
        self._as_written: set[tuple] = set()
        self.trace_seconds: list[float] = []
        self.trace_count = 0
        self._tracing = 0

    def lookup(self, key: tuple) -> JointGraph | Refused | Passthrough | None:
        """The cached entry for ``key`` or None; without the lock (every call takes this path:
        a get and a move of the OrderedDict are each atomic under the GIL, and an entry evicted
        in between is only built again)."""
        hit = self._cache.get(key)
        if hit is not None:
            try:
                self._cache.move_to_end(key)
            except KeyError:
                pass
        return hit

    def _store_passthrough(self, key: tuple, hit: Passthrough, fast: tuple | None = None,
                           fn: Any = None) -> None:
        """A forward signature whose backward runs as is: a plain dict read once per call
        (emptied when it holds :data:`CACHE_SIZE`; a miss only probes again); with ``fast``, also
        under the function object's id and its tensors' batching (the next call of this very
        object skips even the key)."""
        if len(self._passthrough) >= CACHE_SIZE:
            self._passthrough.clear()
        self._passthrough[key] = hit
        if fast is not None:
            if len(self._fast) >= CACHE_SIZE:
                self._fast.clear()
            self._fast[fast] = (fn, hit)  # the object kept: its id is not reused meanwhile

    def _store(self, key: tuple, hit: Any) -> None:
        self._cache[key] = hit
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)

    def entry(self, key: tuple, call: JointCall) -> JointGraph | Refused | Passthrough:
        """The cached graph (or refusal) for ``key``, built on first use."""
        with self._lock:  # make_fx is not re-entrant; building once per key needs the lock too
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            start = time.perf_counter()
            self._tracing += 1
            before = internals.dispatch_state()
            try:
                self.trace_count += 1
                hit = build(call, self.check, self.decompose)
            finally:
                self._tracing -= 1
                after = internals.dispatch_state()
                if after != before:
                    # Seen on torch 2.13 when tracing under a jvp level (vmapjvpvjp): make_fx leaves
                    # the forced dispatch TLS of the trace behind. Undo it, trust no graph from it.
                    internals.restore_dispatch_state(before)
                    hit = Refused(f"tracing changed the dispatch state ({before.describe_difference(after)[:120]}); "
                                  "restored, graph not used")
            self.trace_seconds.append(time.perf_counter() - start)
            self._store(key, hit)
            return hit

    def _forward_entry(self, key: tuple, fn: Callable, primals: tuple, inputs: tuple,
                       fell_back: list[str]) -> ForwardGraph | str | Refused:
        """The forward stage's entry for ``key``, decided at its first call: a checked forward
        graph where an op of the forward fell back (``fell_back``, from vmap's warnings) and the
        graph is not slower than that forward (with :attr:`cost_gate`), else why not."""
        hit: ForwardGraph | str | Refused = forward_graph.AS_WRITTEN
        if fell_back:
            leaves = [*flatten(primals)[0], *flatten(inputs)[0]]
            batched = [isinstance(t, torch.Tensor) and internals.is_batched(t) for t in leaves]
            with self._lock:
                start = time.perf_counter()
                hit = forward_graph.build(fn, primals, inputs, batched)
                self.trace_seconds.append(time.perf_counter() - start)
            if isinstance(hit, ForwardGraph) and self.cost_gate:
                slower = cost_gate.forward_slower(hit, fn, primals, inputs)
                if slower:
                    hit = Refused(slower)
        with self._lock:
            if len(self._forwards) >= CACHE_SIZE:
                self._forwards.clear()
            self._graph_plain.clear()
            self._as_written.clear()
            self._forwards[key] = hit
        return hit

    def _runner(self, hit: JointGraph) -> Callable[[Sequence[Any]], Any]:
        """The graph's run, inside the scoped rules where it needs them."""
        return self.scoped_backward(hit.run) if hit.needs_rules else hit.run

    def cached(self) -> list[JointGraph | Refused | Passthrough]:
        with self._lock:
            return list(self._cache.values())

    def cached_forwards(self) -> list[ForwardGraph | str | Refused]:
        """The forward stage's entries (graphs, refusals, and AS_WRITTEN)."""
        with self._lock:
            return list(self._forwards.values())

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._passthrough.clear()
            self._fast.clear()
            self._forwards.clear()
            self._graph_plain.clear()
            self._as_written.clear()

    def vjp(self, fn: Callable, *primals: Any, inputs: Sequence[Any] = ()):
        """``(out, vjp_fn)`` of ``fn(*primals, *inputs)`` with respect to ``primals`` (``inputs``:
        tensors and constants ``fn`` reads but is not differentiated for, e.g. indices)."""
        inputs = tuple(inputs)
        try:  # the fastest path: this very function object, its tensors batched as before
            fast: tuple | None = (id(fn), *map(batched_here, primals), *map(batched_here, inputs))
        except TypeError:  # a primal or input that is not a tensor: the keyed path only
            fast = None
        else:
            seen = self._fast.get(fast)
            if seen is not None and seen[0] is fn:
                provenance.record(self.name, PASSTHROUGH, False, seen[1].reason)
                return torch.func.vjp(_bound(fn, inputs), *primals)
        return self._vjp(fn, primals, inputs, fast)

    def _vjp(self, fn: Callable, primals: tuple, inputs: tuple, fast: tuple | None):
        """:meth:`vjp` past its fastest path (a separate frame: the closures below cost every
        call that builds them, not the fast one)."""
        f_key = function_key(fn)
        # a function whose backward ran under vmap without falling back (or ran cheaper than its
        # graph), for these primals' and inputs' ranks and dtypes: torch's own vjp_fn is returned
        # as is, nothing more per call. A coarse key on purpose (no shapes, strides): a wrong hit
        # only runs torch's backward, which is always right; the graphs keep the full signature
        fwd_key = (f_key, *[(t.dim(), t.dtype, batched_here(t)) if isinstance(t, torch.Tensor)
                            else _Other for t in (*primals, *inputs)])
        known = self._passthrough.get(fwd_key)
        if known is not None:
            if fast is not None:
                self._store_passthrough(fwd_key, known, fast, fn)
            out, vjp_fn = torch.func.vjp(_bound(fn, inputs), *primals)
            provenance.record(self.name, PASSTHROUGH, False, known.reason)
            return out, vjp_fn
        forward, watch, fsig = None, None, None
        if internals.vmap_active() and fwd_key not in self._as_written:  # the forward stage
            watch = fsig = forward_graph.signature(f_key, primals, inputs)
            forward = self._forwards.get(watch)
            if forward is not None:
                watch = None
        if isinstance(forward, ForwardGraph):
            fn, f_key = forward.function, (f_key, "forward graph", id(forward))
            provenance.record(self.name, FORWARD_GRAPH, True, forward.detail)
            if fsig in self._graph_plain:  # its backward needs nothing: torch's own, as is
                out, vjp_fn = torch.func.vjp(_bound(fn, inputs), *primals)
                provenance.record(self.name, PASSTHROUGH, False, Passthrough().reason)
                return out, vjp_fn
        if watch is None:
            out, vjp_fn = torch.func.vjp(_bound(fn, inputs), *primals)
        else:  # the first call of this forward signature: did an op of it fall back?
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out, vjp_fn = torch.func.vjp(_bound(fn, inputs), *primals)
            for w in caught:  # seen, and passed on as they came
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            forward = self._forward_entry(watch, fn, primals, inputs,
                                          internals.fallback_ops(caught))
            if not isinstance(forward, ForwardGraph) and len(self._as_written) < CACHE_SIZE:
                self._as_written.add(fwd_key)  # coarse, as the passthrough: a miss costs speed
        # a forward graph is chosen per signature: the coarse passthrough key must not skip it
        coarse = not isinstance(forward, ForwardGraph)
        p_leaves, p_key = flatten(primals)
        i_leaves, i_key = flatten(inputs)

        def traced_vjp_fn(cotangents: Any) -> Any:
            if not internals.vmap_active():
                provenance.record(self.name, PLAIN, False)
                return vjp_fn(cotangents)
            c_leaves, c_key = flatten(cotangents)
            flat = (*p_leaves, *i_leaves, *c_leaves)
            outputs = tuple(t for t in (flatten(out)[0] if type(out) in (tuple, torch.Tensor)
                                        else tensor_leaves(out)) if isinstance(t, torch.Tensor))
            full = (*flat, *outputs)
            sig = positional_key(full)
            if sig is None:
                sig = flatten_args(full).key
            # which tensors vmap batches here decides whether torch's backward falls back
            key = (f_key, p_key, i_key, c_key, sig,
                   tuple(batched_here(t) for t in full if isinstance(t, torch.Tensor)))
            hit = self.lookup(key)
            if isinstance(hit, Passthrough):
                provenance.record(self.name, PASSTHROUGH, False, hit.reason)
                return vjp_fn(cotangents)
            why = ""
            if hit is None and self.install == "fallback":
                try:  # the first call of a signature: does torch's backward fall back (or raise)?
                    with internals.vmap_fallback_disabled():
                        grads = vjp_fn(cotangents)
                except Exception as e:  # noqa: BLE001 - it falls back or fails: a graph is built
                    why = f"torch's backward under vmap: {type(e).__name__}: {first_line(str(e), 100)}"
                else:
                    with self._lock:
                        self._store(key, Passthrough())
                        if coarse:
                            self._store_passthrough(fwd_key, Passthrough(), fast, fn)
                        elif len(self._graph_plain) < CACHE_SIZE:
                            self._graph_plain.add(fsig)
                    provenance.record(self.name, PASSTHROUGH, False, Passthrough().reason)
                    return grads
            p_spec = pytree.tree_structure(primals)
            if hit is None:
                i_spec, c_spec = pytree.tree_structure(inputs), pytree.tree_structure(cotangents)
                n_p, n_i = len(p_leaves), len(i_leaves)
                hit = self.entry(key, JointCall(
                    joint_with_outputs(fn, p_spec, n_p, i_spec, n_i, c_spec),
                    joint_function(fn, p_spec, n_p, i_spec, n_i, c_spec),
                    forward_function(fn, p_spec, n_p, i_spec, n_i), flat, outputs,
                    tuple(isinstance(t, torch.Tensor) and internals.is_batched(t) for t in full)))
                if isinstance(hit, JointGraph) and self.cost_gate and "hit the vmap fallback" in why:
                    slower = cost_gate.graph_slower(hit, self._runner(hit), full, vjp_fn, cotangents)
                    if slower:  # the fallback is cheaper than the graph here: torch's backward
                        with self._lock:  # decided at this call's batch size, kept for the signature
                            self._store(key, Passthrough(slower))
                            if coarse:
                                self._store_passthrough(fwd_key, Passthrough(slower), fast, fn)
                        provenance.record(self.name, PASSTHROUGH, False, slower)
                        return vjp_fn(cotangents)
            if isinstance(hit, Refused):
                provenance.record(self.name, FALLBACK, False, hit.reason)
                return self.scoped_backward(torch.func.functionalize(vjp_fn))(cotangents)
            provenance.record(self.name, hit.mechanism, True, hit.detail + (f" ({why})" if why else ""))
            grads = [reduced_to(g, p) for g, p in zip(self._runner(hit)(full), p_leaves)]
            return tuple(grads) if p_key.__class__ is int else pytree.tree_unflatten(grads, p_spec)

        # the scoped rules (with_rules) cover the graph and the refusal's functionalized backward,
        # not torch's backward where it runs as is (the probe and a passthrough: torch's own cost)
        return out, traced_vjp_fn

    def bookkeeping(self) -> Any:
        # The cache legitimately grows; what must return to rest is tracing in progress.
        return {"tracing_in_progress": self._tracing, "lock_held": self._lock.locked()}
