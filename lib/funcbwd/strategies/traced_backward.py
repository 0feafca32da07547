"""``traced_backward``: ``traced``'s idea applied to torch's *own* backward nodes, one graph per
signature.

:meth:`TracedBackward.vjp` runs the forward eagerly (``torch.func.vjp``: ``out`` and the eager
``vjp_fn`` come from there) and returns a ``vjp_fn`` that, under vmap, runs a **joint graph**
instead of the eager backward: ``torch.func.vjp(fn, *primals)[1](cotangents)`` traced once per
signature by :func:`trace_joint` (``make_fx(functionalize(joint), tracing_mode="fake")`` on fake
tensors of the logical shapes, strides and dtypes, outside every transform:
:func:`funcbwd.internals.cleared_functorch_state`), so the graph's inputs are the primals, the
non-differentiated tensor ``inputs`` and the cotangents, and nothing the forward saved is baked
into it. The graph is out-of-place aten ops (every node of torch's C++ backward formulas, the
forward recomputed); its ``aten.copy`` nodes are elided (:func:`funcbwd.fx.elide.elide_copies`),
its ``select_scatter`` rewritten as ``slice_scatter`` (:mod:`funcbwd.fx.select_scatter`: the
batched form's gradient is wrong), its ``view`` nodes run as ``reshape`` (:func:`reshape_views`:
the trace chose them on unbatched strides), dead nodes dropped, and it runs on the call's
(batched or grad-tracking) tensors, its grads summed to the primals' shapes where a batch rule's
differ (:func:`reduced_to`: the autograd engine's own step, which the graph bypasses): vmap
batches the primals, the inputs and the cotangents alike, and an outer ``vjp``/``grad``
differentiates the graph (vjp of vjp). Outside vmap the eager ``vjp_fn`` runs as written.

Cache: per ``fn`` (by identity: what ``fn`` captures, tensors included, is part of its graph)
and signature (shapes, strides, dtypes and devices of the tensors, values of the non-tensor
leaves, the pytree structures), least recently used first out beyond :data:`CACHE_SIZE`. A
caller that wants graphs reused must pass the same ``fn`` object; tensors it varies must be
primals or ``inputs``, not captured (a captured *batched* tensor makes tracing raise: fallback).

Refused (the ``vjp_fn`` then runs under ``torch.func.functionalize``, ``whole``'s mechanism, with
provenance :data:`FALLBACK` and the reason; the refusal is cached per signature):

* tracing raises: control flow on values (``if x.sum() > 0``, a C++ formula branching on
  ``zeros.numel()``: fake tracing's data-dependent guard). Data-dependent *ops* (``.item()``,
  ``nonzero``, ``masked_select``) trace in torch 2.13 as unbacked sizes and run as eager does (the
  check compares them); under vmap they fail as eager does;
* a random op (``nondeterministic_seeded``) anywhere in the traced graph: the graph recomputes
  the forward, so it would draw new random numbers and differentiate another function;
* an op that mutates (``fn`` writes into its inputs: the graph would write into the caller's
  tensors);
* the graph check fails: each new graph is run once, outside every transform, on seeded inputs
  of its signature (floating tensors random normal, others the call's per-sample values:
  :func:`funcbwd.internals.one_sample`) and compared with the eager joint (torch's own
  ``vjp``) on the same inputs: output structure, shapes, dtypes and values (the dtype's default
  ``torch.testing.assert_close`` tolerance, NaN equal to NaN). The elided graph is checked first;
  if it differs the un-elided graph is checked and, if it matches, runs (provenance
  :data:`UNELIDED`). Where the eager vjp raises on the random values (an input domain, e.g. a
  positive-definite matrix) the check runs on the call's own per-sample values instead, which
  cannot tell a graph that baked those values in; where it raises on both it is inconclusive
  and the graph is refused. One draw per signature, not a proof.

Cost: the eager forward runs as written under vmap (an op of it without a batching rule still
takes the slow fallback there), and the graph recomputes what of the forward the backward needs
(twice the fallback where that op is needed); the graph's ops are called from Python, one call
each. :mod:`funcbwd.studies.coverage.fallback_speedup` measures what that leaves of the speedup
(``data/fallback-speedup.json``). Conservative refusals: an op tagged ``nondeterministic_seeded``
for an argument it may not use (CPU flash attention at ``dropout_p=0``) is refused all the same.

Provenance: :data:`GRAPH` (ran=True, detail: nodes, copies elided, check) when a graph runs;
:data:`FALLBACK` (ran=False, detail: the reason); :data:`PLAIN` outside vmap.
:attr:`TracedBackward.trace_seconds` keeps the time each new signature took (trace, passes, check,
compile), :attr:`TracedBackward.trace_count` how many signatures were traced.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import threading
import time
from typing import Any, Callable, Sequence

import torch
import torch.func
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd.fx import codegen, elide
from funcbwd.fx.formula_graphs import (blank, bindings_equivalent, flatten_args, positional_key,
                                       tensor_spec)
from funcbwd.fx.select_scatter import rewrite_select_scatter
from funcbwd.strategies import provenance
from funcbwd.strategies.base import Strategy

GRAPH = "traced backward graph ran"
UNELIDED = "traced backward graph ran (un-elided: the elided graph failed the check)"
FALLBACK = "no graph: vjp_fn functionalized as whole does"
PLAIN = "vjp_fn ran as written (no vmap level)"
#: signatures (over all functions) whose graphs or refusals are kept
CACHE_SIZE = 256
CHECK_SEED = 0


# ------------------------------------------------------------------------------ the joint function
def joint_function(fn: Callable, primal_spec: Any, n_primals: int, input_spec: Any,
                   n_inputs: int, cotangent_spec: Any) -> Callable[..., tuple]:
    """``joint(*flat) -> grads (flat)``: ``torch.func.vjp(fn, *primals)[1](cotangents)`` with
    ``fn(*primals, *inputs)``, where ``flat`` is the primals' leaves, the inputs' leaves and the
    cotangents' leaves (rebuilt with the given pytree specs)."""

    def joint(*flat: Any) -> tuple:
        primals = pytree.tree_unflatten(list(flat[:n_primals]), primal_spec)
        inputs = pytree.tree_unflatten(list(flat[n_primals:n_primals + n_inputs]), input_spec)
        cts = pytree.tree_unflatten(list(flat[n_primals + n_inputs:]), cotangent_spec)
        _, vjp_fn = torch.func.vjp(lambda *p: fn(*p, *inputs), *primals)
        return tuple(pytree.tree_leaves(vjp_fn(cts)))

    return joint


def _tensor_positions(flat: Sequence[Any]) -> list[int]:
    return [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]


def trace_joint(joint: Callable[..., tuple], flat: Sequence[Any]) -> torch.fx.GraphModule:
    """make_fx graph of ``functionalize(joint)`` whose placeholders are the tensors of ``flat``
    (fake tensors of their logical shapes, strides and dtypes; the other leaves are baked in),
    traced outside every transform. Tensors ``joint`` captures become constants. Raises what
    tracing raises (a data-dependent op)."""
    flat = list(flat)
    tpos = _tensor_positions(flat)
    specs = [tensor_spec(flat[p]) for p in tpos]  # logical: read before leaving the transforms

    def of_tensors(*tensors: torch.Tensor) -> tuple:
        full = list(flat)
        for p, t in zip(tpos, tensors):
            full[p] = t
        return joint(*full)

    with internals.cleared_functorch_state():
        return internals.fake_trace(torch.func.functionalize(of_tensors), *[blank(s) for s in specs])


# ------------------------------------------------------------------------------ refusals and the check
def _ops(gm: torch.fx.GraphModule) -> list[torch._ops.OpOverload]:
    return [n.target for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def refusal(gm: torch.fx.GraphModule) -> str | None:
    """Why a traced joint graph cannot stand for the eager vjp, by its ops, or None."""
    random = sorted({str(t) for t in _ops(gm) if torch.Tag.nondeterministic_seeded in t.tags})
    if random:
        return (f"random op in the forward ({', '.join(random)}): the graph would recompute it "
                "with new random numbers")
    mutating = sorted({str(t) for t in _ops(gm) if t._schema.is_mutable})
    if mutating:
        return f"the function mutates its inputs ({', '.join(mutating)})"
    return None


def check_inputs(flat: Sequence[Any], seed: int = CHECK_SEED, random: bool = True) -> list:
    """Plain leaves of ``flat``'s signature: floating tensors random normal (``random``) or the
    call's per-sample values, other tensors the call's per-sample values (indices, masks stay
    valid), non-tensors as they are."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for a in flat:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        spec = tensor_spec(a)
        if random and (a.is_floating_point() or a.is_complex()):
            out.append(blank(spec, gen))
            continue
        value, fresh = internals.one_sample(a), blank(spec)  # zeros in the traced layout
        try:
            out.append(fresh.copy_(value))
        except RuntimeError:  # an overlapping layout (stride 0) cannot be written: keep the view
            out.append(value)
    return out


def compare(got: Sequence[Any], want: Sequence[Any]) -> str:
    """'' if ``got`` matches ``want`` (count, shapes, dtypes, values at the dtype's tolerance,
    NaN equal), else the first difference."""
    if len(got) != len(want):
        return f"{len(got)} grads != {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if (tuple(g.shape), g.dtype) != (tuple(w.shape), w.dtype):
            return f"grad {i}: {tuple(g.shape)} {g.dtype} != {tuple(w.shape)} {w.dtype}"
        try:
            torch.testing.assert_close(g, w, equal_nan=True)
        except AssertionError as e:
            return f"grad {i}: values differ ({first_line(str(e), 120)})"
    return ""


def check_graph(run: Callable[[Sequence[Any]], Any], joint: Callable[..., tuple],
                flat: Sequence[Any]) -> tuple[bool, str]:
    """(ok, detail): ``run`` against the eager ``joint`` on :func:`check_inputs` of ``flat``
    (random values; the call's own where the eager vjp raises on them), outside every transform."""
    why = ""
    for random in (True, False):
        where = f"seeded inputs (seed {CHECK_SEED})" if random else "the call's per-sample values"
        with internals.cleared_functorch_state():
            inputs = check_inputs(flat, random=random)
            try:
                want = [w.detach() for w in joint(*inputs)]
            except Exception as e:  # noqa: BLE001 - the eager vjp rejects these values
                why = f"the eager vjp raised on {where}: {type(e).__name__}: {first_line(str(e), 100)}"
                continue
            try:
                with torch.no_grad():
                    got = list(run(inputs))
            except Exception as e:  # noqa: BLE001 - the graph breaks where eager runs
                return False, f"the graph raised on {where}: {type(e).__name__}: {first_line(str(e), 100)}"
        diff = compare(got, want)
        return (not diff), (f"differs from the eager vjp on {where}: {diff}" if diff
                            else f"matches the eager vjp on {where}")
    return False, f"check inconclusive: {why}"


def reshape_views(gm: torch.fx.GraphModule) -> int:
    """Every ``aten.view.default`` of ``gm`` as ``aten.reshape.default``, in place; returns how
    many. make_fx records a ``reshape`` (a C++ formula's, a decomposition's) as the ``view`` it
    took on the trace's unbatched fake tensors, a choice made on their strides. Under vmap an
    intermediate's per-sample strides follow the batched physical tensor (an elementwise op
    keeps a cotangent's batch dim in the middle), so the recorded view can fail where eager's
    reshape copies ("view size is not compatible", stft's backward with in_dims -1). The graph is
    functional (mutating graphs are refused), so a copy instead of a view changes no value, and
    where the view is possible reshape returns that same view."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
            count += 1
    if count:
        gm.recompile()
    return count


# ------------------------------------------------------------------------------ one signature
@dataclasses.dataclass(frozen=True)
class JointGraph:
    """The graph that runs for one signature: ``run(flat) -> grads (flat)``."""

    graph: torch.fx.GraphModule
    run: Callable[[Sequence[Any]], Any]
    #: the provenance text: :data:`GRAPH`, or :data:`UNELIDED` when the elided graph was refused
    mechanism: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Refused:
    """A cached negative result: no graph for this signature, and why."""

    reason: str


def build(joint: Callable[..., tuple], flat: Sequence[Any], check: bool = True
          ) -> JointGraph | Refused:
    """:func:`_build` outside every transform: the elision pass runs ops on the trace's fake
    tensors, which under a jvp level (vmapjvpvjp) corrupts the dispatch TLS on torch 2.13."""
    specs = [tensor_spec(a) if isinstance(a, torch.Tensor) else a for a in flat]  # logical, read here
    with internals.cleared_functorch_state():
        return _build(joint, flat, specs, check)


def _build(joint: Callable[..., tuple], flat: Sequence[Any], logical: Sequence[Any],
           check: bool = True) -> JointGraph | Refused:
    """Trace ``joint`` for ``flat``'s signature (:func:`trace_joint`), refuse it
    (:func:`refusal`), drop dead nodes, elide copies and rewrite ``select_scatter`` on a copy,
    check (unless ``check`` is False) and compile the graph that runs."""
    try:
        traced = trace_joint(joint, flat)
    except Exception as e:  # noqa: BLE001 - untraceable: the fallback says why
        return Refused(f"untraceable: {type(e).__name__}: {first_line(str(e), 160)}")
    why = refusal(traced)
    if why:
        return Refused(why)
    traced.graph.eliminate_dead_code()
    traced.recompile()
    elided = copy.deepcopy(traced)
    report = elide.elide_copies(elided)  # first: it sees select_scatter's src as read for values
    rewrites = rewrite_select_scatter(elided)
    rewrite_select_scatter(traced)
    tpos = _tensor_positions(flat)
    specs = [logical[p] for p in tpos]
    tried = []
    for gm, is_elided in ((elided, True), (traced, False))[: 2 if report.count else 1]:
        # bindings checked before the view rewrite: aten.reshape has one overload, so its binding
        # binds it, but re-tracing the binding records the view it decomposes to
        bindings = bindings_equivalent(gm, specs)
        reshaped = reshape_views(gm)
        run = codegen.compile_graph(gm, tpos, "traced_backward", bindings)
        ok, detail = check_graph(run, joint, flat) if check else (True, "not checked")
        tried.append(detail)
        if ok:
            nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
            text = (f"{nodes} ops, {report.count if is_elided else 0} copies elided"
                    + (f", {rewrites} select_scatter rewritten" if rewrites else "")
                    + (f", {reshaped} views as reshape" if reshaped else "") + f"; {detail}")
            return JointGraph(gm, run, GRAPH if is_elided else UNELIDED, text)
    return Refused("graph check failed: " + "; un-elided: ".join(tried))


def reduced_to(grad: Any, primal: Any) -> Any:
    """``grad`` summed to ``primal``'s shape where that shape broadcasts to it, else as it is:
    what the autograd engine does to every node's grads (``validate_outputs``), which the graph
    bypasses. The trace's shapes already match; under vmap a batch rule may return a grad of
    another rank than its unbatched op (torch 2.13's ``_cdist_backward`` rule pads an empty
    cdist's grad to ``x1``'s shape with a leading 1), which eager's engine reduces silently."""
    if not (isinstance(grad, torch.Tensor) and isinstance(primal, torch.Tensor)) \
            or grad.shape == primal.shape:
        return grad
    try:
        expandable = torch.broadcast_shapes(primal.shape, grad.shape) == grad.shape
    except RuntimeError:
        return grad
    return grad.sum_to_size(primal.shape) if expandable else grad


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

    def __init__(self, check: bool = True) -> None:
        #: False only to show what the check catches (tests): every graph is trusted
        self.check = check
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[tuple, JointGraph | Refused] = collections.OrderedDict()
        self.trace_seconds: list[float] = []
        self.trace_count = 0
        self._tracing = 0

    def entry(self, key: tuple, joint: Callable[..., tuple], flat: Sequence[Any]
              ) -> JointGraph | Refused:
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
                hit = build(joint, flat, self.check)
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
            self._cache[key] = hit
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return hit

    def cached(self) -> list[JointGraph | Refused]:
        with self._lock:
            return list(self._cache.values())

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def vjp(self, fn: Callable, *primals: Any, inputs: Sequence[Any] = ()):
        """``(out, vjp_fn)`` of ``fn(*primals, *inputs)`` with respect to ``primals`` (``inputs``:
        tensors and constants ``fn`` reads but is not differentiated for, e.g. indices)."""
        inputs = tuple(inputs)
        out, vjp_fn = torch.func.vjp(lambda *p: fn(*p, *inputs), *primals)
        p_leaves, p_spec = pytree.tree_flatten(primals)
        i_leaves, i_spec = pytree.tree_flatten(inputs)

        def traced_vjp_fn(cotangents: Any) -> Any:
            if not internals.vmap_active():
                provenance.record(self.name, PLAIN, False)
                return vjp_fn(cotangents)
            c_leaves, c_spec = pytree.tree_flatten(cotangents)
            flat = (*p_leaves, *i_leaves, *c_leaves)
            sig = positional_key(flat)
            if sig is None:
                sig = flatten_args(flat).key
            key = (fn, str(p_spec), str(i_spec), str(c_spec), sig)
            joint = joint_function(fn, p_spec, len(p_leaves), i_spec, len(i_leaves), c_spec)
            hit = self.entry(key, joint, flat)
            if isinstance(hit, Refused):
                provenance.record(self.name, FALLBACK, False, hit.reason)
                return torch.func.functionalize(vjp_fn)(cotangents)
            provenance.record(self.name, hit.mechanism, True, hit.detail)
            grads = [reduced_to(g, p) for g, p in zip(hit.run(flat), p_leaves)]
            return pytree.tree_unflatten(grads, p_spec)

        return out, self.scoped_backward(traced_vjp_fn)

    def bookkeeping(self) -> Any:
        # The cache legitimately grows; what must return to rest is tracing in progress.
        return {"tracing_in_progress": self._tracing, "lock_held": self._lock.locked()}


def trace_backward(vjp_fn: Callable[[tuple], Any], cotangents: tuple
                   ) -> tuple[torch.fx.GraphModule, elide.ElisionReport]:
    """(graph, elision report) of ONE vjp's backward, traced in real mode on plain
    ``cotangents``: the saved tensors are graph constants, so the graph belongs to those primal
    values. Not what the strategy runs (that is :func:`trace_joint`); kept as the counter-example
    its check must catch (a graph baking the saved tensors) and for the layout tests."""
    def backward(*cts: torch.Tensor) -> Any:
        return vjp_fn(cts)

    with internals.cleared_functorch_state():
        gm = make_fx(torch.func.functionalize(backward, remove="mutations_and_views"),
                     tracing_mode="real")(*cotangents)
    return gm, elide.elide_copies(gm)
