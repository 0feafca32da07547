"""``traced_backward``: ``traced``'s idea applied to torch's *own* backward nodes.

When its ``vjp_fn`` is called under vmap, the strategy traces the whole unbatched backward once:
``make_fx(functionalize(vjp_fn), tracing_mode="real")`` on zero cotangents of the per-sample shape,
outside every transform (:func:`funcbwd.internals.cleared_functorch_state`). The result is a graph
of out-of-place aten ops (every node of torch's C++ backward formulas included); its
``aten.copy`` nodes are elided by :func:`funcbwd.fx.elide.elide_copies`; then the graph runs on the
real (batched) cotangents, so vmap batches a functional graph instead of in-place formulas.

What a graph is: with ``tracing_mode="real"`` the tensors the backward saved (primals, outputs,
intermediates) are not inputs but graph *constants* (``_tensor_constant*`` attributes). A graph
therefore belongs to the primal values it was traced from: it is cached on the ``vjp_fn`` it was
traced for (one graph per cotangent signature) and never reused for another ``vjp``. Lifting the
constants to inputs would not make it reusable either: the caller has no handle on another
forward's saved tensors in the trace's order (``grad_fn._saved_*`` names differ per node), so the
forward would have to be traced too, which is ``traced`` over the whole function, not this
strategy.

Not applicable where primals are batched: the graph is traced from unbatched saved tensors; when
the primals (hence saved tensors) are batched the strategy raises
:class:`funcbwd.errors.NotApplicableError` instead of tracing a graph of one sample. So it serves
``vmap(vjp_fn)`` over cotangents (jacrev, per-example cotangents), not ``vmap`` over the whole
``vjp``.

A backward that cannot be traced (data-dependent control flow: ``prod``'s backward calls
``.item()``, which a tracing tensor refuses) falls back to ``whole``'s mechanism: the ``vjp_fn`` run
under ``torch.func.functionalize``.

Provenance: ``"traced backward graph ran"`` (ran=True, detail: nodes and copies elided) when a
graph runs; :data:`FALLBACK` (ran=False, detail: the trace error) for an untraceable backward;
``"vjp_fn ran as written (no vmap level)"`` outside vmap. :attr:`TracedBackward.trace_seconds`
keeps the time each trace took (the cost the design review asks about).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import torch
import torch.func

from funcbwd import internals
from funcbwd.errors import NotApplicableError, first_line
from funcbwd.fx import elide
from funcbwd.strategies import provenance
from funcbwd.strategies.base import Strategy

GRAPH = "traced backward graph ran"
FALLBACK = "untraceable: vjp_fn functionalized as whole does"


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def trace_backward(vjp_fn: Callable[[tuple], Any], cotangents: tuple) -> tuple[torch.fx.GraphModule, Any]:
    """(graph, elision report): ``vjp_fn`` functionalized and traced on ``cotangents`` (plain
    tensors), its copies elided. Runs outside every transform."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def backward(*cts: torch.Tensor) -> Any:
        return vjp_fn(cts)

    with internals.cleared_functorch_state():
        gm = make_fx(torch.func.functionalize(backward, remove="mutations_and_views"),
                     tracing_mode="real")(*cotangents)
    report = elide.elide_copies(gm)
    return gm, report


class TracedBackward(Strategy):
    name = "traced_backward"
    summary = ("under vmap, the whole vjp_fn (torch's own nodes included) traced once, "
               "functionalized, copies elided, then run on the batched cotangents")
    formula_kinds = ("backward",)
    formula_kinds_reason = "it traces the vjp_fn, i.e. the backward pass"
    acts_on_builtin_nodes = True
    backward_only = True
    #: vmap may batch the cotangents only (see the module docstring)
    batches_primals = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.trace_seconds: list[float] = []

    def vjp(self, fn: Callable, *primals: Any):
        batched = internals.vmap_active() and any(internals.is_batched(t) for t in _tensors(primals))
        out, vjp_fn = torch.func.vjp(fn, *primals)
        graphs: dict[tuple, tuple] = {}

        def traced_vjp_fn(cotangents: Any) -> Any:
            if not internals.vmap_active():
                provenance.record(self.name, "vjp_fn ran as written (no vmap level)", False)
                return vjp_fn(cotangents)
            if batched:
                raise NotApplicableError(
                    "traced_backward: the primals are batched, so the saved tensors a graph would "
                    "hold as constants differ per sample; it only serves vmap over cotangents")
            cts = tuple(cotangents) if isinstance(cotangents, (tuple, list)) else (cotangents,)
            key = tuple((tuple(c.shape), c.dtype) for c in cts)
            if key not in graphs:
                examples = tuple(torch.zeros(shape, dtype=dtype) for shape, dtype in key)
                start = time.perf_counter()
                try:
                    graphs[key] = trace_backward(vjp_fn, examples)
                except Exception as e:  # noqa: BLE001 - untraceable: the fallback says why
                    graphs[key] = f"{type(e).__name__}: {first_line(str(e), 160)}"
                with self._lock:
                    self.trace_seconds.append(time.perf_counter() - start)
            if isinstance(graphs[key], str):
                provenance.record(self.name, FALLBACK, False, graphs[key])
                return torch.func.functionalize(vjp_fn)(cts)
            gm, report = graphs[key]
            provenance.record(self.name, GRAPH, True,
                              f"{len(gm.graph.nodes)} nodes, {report.count} copies elided")
            # The graph holds the traced cotangents' layout (contiguous): its as_strided nodes
            # read absolute strides, and `grad.contiguous()` was a no-op when traced, so it is not
            # in the graph. A cotangent batched at another dim than 0 is per-sample
            # non-contiguous: give the graph the layout it was traced for.
            return tuple(gm(*(c.contiguous() for c in cts)))

        return out, traced_vjp_fn
