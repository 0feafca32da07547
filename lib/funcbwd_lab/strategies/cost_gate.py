"""traced_backward's cost gate (``TracedBackward(cost_gate=True)``): a graph, timed once at the
first call of its signature against what it replaces (torch's backward, or the forward as written,
each with vmap's per-sample fallback), is used only where it is clearly cheaper. Off by default:
the sweep's verdicts must not depend on a timing; the fallback-speedup study turns it on."""

from __future__ import annotations

import math
import time
import warnings
from typing import Any, Callable, Sequence

import torch
from torch.utils import _pytree as pytree

from funcbwd_lab.fx.forward_graph import ForwardGraph
from funcbwd_lab.fx.joint import JointGraph

#: the cost gate (``cost_gate=True``): a graph runs only where, timed at the first call of its
#: signature (:func:`timed_pair`), it costs at most this share of what it replaces (torch's
#: backward, or the forward as written, with vmap's per-sample fallback): a graph's path pays a
#: signature key per call that a passthrough does not
GATE_MARGIN = 0.9
#: interleaved rounds of that timing (the best of each side kept)
GATE_ROUNDS = 5


def timed_pair(graph: Callable[[], Any], eager: Callable[[], Any]) -> tuple[float, float] | None:
    """(graph, eager) thread-CPU seconds, the best of :data:`GATE_ROUNDS` interleaved rounds (a
    slow moment of the machine hits both), or None if either raises."""
    best = [math.inf, math.inf]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for _ in range(GATE_ROUNDS):
                for i, arm in enumerate((graph, eager)):
                    start = time.thread_time()
                    arm()
                    best[i] = min(best[i], time.thread_time() - start)
        except Exception:  # noqa: BLE001 - no comparison: the graph runs
            return None
    return best[0], best[1]


def graph_slower(hit: JointGraph, run: Callable, full: Sequence[Any], vjp_fn: Callable,
            cotangents: Any) -> str:
    """Why torch's backward (with vmap's fallback) should run instead of the graph: the graph
    costs more than :data:`GATE_MARGIN` times it (:func:`timed_pair`, no grad); '' when the
    graph is that cheap (it runs)."""
    with torch.no_grad():
        times = timed_pair(lambda: run(full), lambda: vjp_fn(cotangents))
    if times is None or times[0] <= GATE_MARGIN * times[1]:
        return ""
    ops = sum(1 for n in hit.graph.graph.nodes if n.op == "call_function")
    return (f"the graph ({ops} ops) costs more than {GATE_MARGIN}x torch's backward with its "
            f"per-sample fallback at the first call ({times[0] * 1e6:.0f} us vs "
            f"{times[1] * 1e6:.0f} us)")


def forward_slower(hit: ForwardGraph, fn: Callable, primals: tuple, inputs: tuple) -> str:
    """Why the forward should run as written: the vjp through its graph (forward and backward,
    ones as cotangents, under the call's vmap) costs more than :data:`GATE_MARGIN` times the vjp
    of ``fn`` with its per-sample fallback (:func:`timed_pair`); '' when it is that cheap. The
    graph has no random or mutating op, so the extra runs change nothing."""
    def vjp_of(f: Callable) -> Callable[[], Any]:
        def run() -> Any:
            out, back = torch.func.vjp(lambda *p: f(*p, *inputs), *primals)
            return back(pytree.tree_map(torch.ones_like, out))
        return run

    times = timed_pair(vjp_of(hit.function), vjp_of(fn))
    if times is None or times[0] <= GATE_MARGIN * times[1]:
        return ""
    return (f"the vjp through the forward graph costs more than {GATE_MARGIN}x fn's with its "
            f"per-sample fallback at the first call ({times[0] * 1e6:.0f} us vs "
            f"{times[1] * 1e6:.0f} us)")
