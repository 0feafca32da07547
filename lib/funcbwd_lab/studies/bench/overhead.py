"""The bench's "vmap off" sections: what a strategy costs when nothing is batched.

* :func:`bench_overhead`: per op, a plain ``torch.autograd.grad`` through ``overhead_nodes`` op
  nodes with each strategy installed, against no strategy and against the legacy op with a no-op
  Python pre/post hook on every node (interleaved series; ratios of medians);
* :func:`hooks_claim`: the claim "``hooks`` costs about nothing over a no-op Python hook when
  vmap is off", measured so it can be resolved: ONE graph of at least a thousand nodes, backward
  timed with the ``hooks`` strategy's own pre/post hooks installed on every node
  (:func:`funcbwd_lab.strategies.hooks.install_hooks`) and with no-op hooks on the same nodes,
  alternating in many pairs; the result is the per-pair difference per node with a 95% interval
  (:func:`funcbwd_lab.studies.bench.timing.paired_difference`). The hooks are installed and removed between
  samples, never inside one, so both arms run the same graph with the same number of Python hooks.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import torch

from funcbwd.errors import first_line
from funcbwd_lab.studies.bench import timing
from funcbwd_lab.studies.bench.config import COPY_RULE, NO_STRATEGY, NOOP_HOOK, TARGET_OPS, BenchConfig
from funcbwd_lab.studies.bench.inputs import generator, resize
from funcbwd_lab.ops import registry
from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.run.scenario import bind
from funcbwd_lab.strategies import get_strategy


def _noop_prehook(grad_outputs: Any) -> None:
    return None


def _noop_posthook(*args: Any) -> None:
    return None


def overhead_callable(spec: OpSpec, smp: Sample, label: str, nodes: int) -> Callable[[], Any]:
    """A plain backward through ``nodes`` op nodes, built with ``label``'s strategy active (or no
    strategy / the legacy op with no-op hooks on every node)."""
    st = get_strategy("plain" if label in (NO_STRATEGY, NOOP_HOOK) else label)
    prims = [smp.args[p].detach().clone().requires_grad_() for p in smp.diff]
    outs: list[torch.Tensor] = []
    with torch.enable_grad():
        f = bind(spec, st, smp.args, smp.diff)
        for _ in range(nodes):
            res = f(*prims)
            if label == NOOP_HOOK:
                for node in {id(o.grad_fn): o.grad_fn for o in res if o.grad_fn is not None}.values():
                    node.register_prehook(_noop_prehook)
                    node.register_hook(_noop_posthook)
            outs.extend(res)
    cts = [torch.randn(o.shape, generator=generator(7), dtype=o.dtype) for o in outs]

    def backward() -> Any:
        return torch.autograd.grad(outs, prims, cts, retain_graph=True, allow_unused=True)

    return backward


def overhead_labels(cfg: BenchConfig) -> list[str]:
    """No strategy, the no-op hook floor, then every timed label that changes the vmap-off path
    (``plain`` is what "no strategy" runs; the copy rule acts only under vmap)."""
    return [NO_STRATEGY, NOOP_HOOK] + [s for s in cfg.labels() if s not in ("plain", COPY_RULE)]


def bench_overhead(cfg: BenchConfig, progress: Callable[[str], None]) -> list[dict[str, Any]]:
    """The vmap-off cost per op: no strategy, the no-op hook floor, each strategy (small size)."""
    records = []
    for op in cfg.ops:
        spec = registry.get_op(op)
        smp = resize(spec, "small")
        series = []
        for label in overhead_labels(cfg):
            key = {"op": op, "size": "small", "label": label, "nodes": cfg.overhead_nodes}
            try:
                fn = overhead_callable(spec, smp, label, cfg.overhead_nodes)
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                records.append({**key, "samples": [], "median": math.nan,
                                "error": f"{type(e).__name__}: {first_line(str(e))}"})
                continue
            series.append(timing.Timed(key, fn, contextlib.nullcontext, cfg.overhead_repeats))
        timing.run_interleaved(series, cfg.clock, cfg.target_sample_s, cfg.max_number)
        records.extend(s.record() for s in series)
        progress(f"vmap-off {op}: {len(series)} labels")
    return records


# ------------------------------------------------------------------------------ the hooks claim
def _chain_graph(nodes: int) -> tuple[torch.Tensor, list[torch.Tensor], str]:
    """``nodes`` C++ autograd nodes in a chain (``y = y * c``): torch's own formulas, which the
    hooks strategy hooks too."""
    x = torch.randn(3, 5, generator=generator(11), requires_grad=True)
    y = x
    with torch.enable_grad():
        for _ in range(nodes):
            y = y * 1.0001
    return x, [y], "a chain of aten::mul nodes (C++ formulas), 3x5"


def _legacy_graph(op: str, nodes: int) -> tuple[torch.Tensor, list[torch.Tensor], str]:
    """``nodes`` legacy-op nodes (Python ``autograd.Function``, backward = the legacy formula) of
    ``op`` on its first sample, side by side on one input."""
    spec = registry.get_op(op)
    smp = spec.samples()[0]
    st = get_strategy("plain")
    x = smp.args[smp.diff[0]].detach().clone().requires_grad_()
    with torch.enable_grad():
        f = bind(spec, st, smp.args, smp.diff[:1])
        outs = [f(x)[0] for _ in range(nodes)]
    return x, outs, f"legacy {op} nodes (Python autograd.Function) on one input"


def _hook_arms(outs: list[torch.Tensor], x: torch.Tensor) -> tuple[list[Callable], int]:
    """Two contexts that install, for the duration of a sample, the hooks strategy's pre/post
    hooks or no-op ones on every node between ``outs`` and ``x``; and the hooked node count."""
    from funcbwd_lab.strategies import hooks

    probe = hooks.install_hooks(outs, stop_at=(x,))
    count = probe.node_count
    probe.remove()
    boundary = [x.grad_fn]
    nodes = [n for n in hooks.graph_nodes([o.grad_fn for o in outs], boundary)
             if n not in boundary and type(n).__name__ != "AccumulateGrad"]
    if len(nodes) != count:
        raise RuntimeError(f"no-op hooks would cover {len(nodes)} nodes, hooks {count}")

    @contextlib.contextmanager
    def with_hooks() -> Iterator[None]:
        hs = hooks.install_hooks(outs, stop_at=(x,))
        try:
            yield
        finally:
            hs.remove()

    @contextlib.contextmanager
    def with_noop() -> Iterator[None]:
        handles = [h for n in nodes for h in (n.register_prehook(_noop_prehook),
                                                n.register_hook(_noop_posthook))]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    return [with_hooks, with_noop], count


def hooks_claim(cfg: BenchConfig, progress: Callable[[str], None]) -> dict[str, Any]:
    """The hooks strategy's vmap-off cost per node over no-op hooks, paired on one graph at a time
    (a C++-node chain and a legacy-op graph), raw samples kept; see the module docstring."""
    if not cfg.hooks_claim_pairs:
        return {"status": "skipped", "reason": "hooks_claim_pairs is 0 in this config"}
    if "hooks" not in cfg.strategies:
        return {"status": "skipped", "reason": "hooks not among the strategies"}
    op = next((o for o in TARGET_OPS if o in cfg.ops), cfg.ops[0])
    graphs = []
    for build in (lambda: _chain_graph(cfg.hooks_claim_nodes),
                  lambda: _legacy_graph(op, cfg.hooks_claim_nodes)):
        try:
            x, outs, what = build()
            arms, count = _hook_arms(outs, x)
            cts = [torch.randn(o.shape, generator=generator(13), dtype=o.dtype) for o in outs]

            def backward(outs=outs, x=x, cts=cts) -> Any:
                return torch.autograd.grad(outs, x, cts, retain_graph=True)

            number, (hooked, noop) = timing.run_paired(
                backward, arms, cfg.hooks_claim_pairs, cfg.hooks_claim_sample_s, cfg.max_number,
                cfg.clock)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            graphs.append({"graph": "?", "error": f"{type(e).__name__}: {first_line(str(e))}"})
            continue
        graphs.append({"graph": what, "nodes": count, "number": number, "clock": cfg.clock,
                       "samples": {"hooks": hooked, NOOP_HOOK: noop}})
        progress(f"hooks claim: {what}: {cfg.hooks_claim_pairs} pairs")
    return {"status": "ok", "graphs": graphs,
            "method": "per pair: one sample with the hooks strategy's pre/post hooks on every "
                      "node, one with no-op hooks on the same nodes (order alternating); "
                      "difference per node"}
