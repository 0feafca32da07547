"""The traced strategy: graphs without aten.copy, no slow fallback, honest fallback for prod,
one trace per signature (also across threads), and no leaked functorch state."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.func import vjp, vmap

from funcbwd import internals
from funcbwd_lab import legacy
from funcbwd.fx import elide
from funcbwd_lab.ops import registry
from funcbwd_lab.run import runner
from funcbwd.fx.formula_graphs import flatten_args, formula_args_for, positional_key, trace_formula
from funcbwd_lab.strategies import get_strategy, provenance
from funcbwd_lab.strategies.traced import FALLBACK, GRAPH, Traced, Untraceable

FIXED_OPS = ("diag", "index_select", "topk", "sort", "mode", "clamp")


@pytest.mark.parametrize("op", FIXED_OPS)
def test_traced_passes_vmap_cotangents_without_slow_fallback(op):
    for smp in registry.get_op(op).samples():
        r = runner.run(op, "vmap_cotangents", "traced", smp)
        assert r.status == "pass", (smp.name, r.message)
        assert r.fallback_ops == [], (smp.name, r.fallback_ops)


def test_fallback_detection_is_live_per_formula_diag_uses_copy_fallback():
    # The empty fallback_ops above mean something: the same detector flags per_formula's diag.
    r = runner.run("diag", "vmap_cotangents", "per_formula", "3x5 k=1")
    assert r.status == "pass"
    assert any(f.startswith("aten::copy") for f in r.fallback_ops)


@pytest.mark.parametrize("op,scenario", [("diag", "vmap_all_args"), ("diag", "jacrev_jacrev"),
                                         ("clamp", "vmap_all_args"), ("topk", "grad_inside_vmap")])
def test_traced_runs_with_vmap_fallback_disabled(op, scenario):
    # With the fallback disabled, any op lacking a batching rule raises instead of looping.
    smp = registry.get_op(op).samples()[0]
    with internals.vmap_fallback_disabled():
        r = runner.run(op, scenario, "traced", smp)
        base = runner.run(op, scenario, "per_formula", smp)
    # diag's second derivative is zero: uninformative, but it ran without raising
    assert r.status == ("uninformative" if scenario == "jacrev_jacrev" else "pass"), r.message
    if op == "diag":
        assert base.status == "fail" and "fallback" in base.message


@pytest.mark.parametrize("op", FIXED_OPS)
def test_elided_graphs_have_no_aten_copy(op):
    spec = registry.get_op(op)
    saw_copy = False
    for smp in spec.samples():
        args = formula_args_for(spec, smp)
        func = trace_formula(spec.formula, args, elide_copies=False)
        saw_copy |= elide.count_targets(func) > 0
        traced = trace_formula(spec.formula, args, elide_copies=True)
        assert elide.count_targets(traced) == 0
        assert not any(n.target is torch.ops.aten.copy_.default for n in traced.graph.nodes)
        # Same values as the formula as written.
        want = spec.formula(*args)
        got = traced(*flatten_args(args).tensors)
        for w, g in zip(spec.outputs_tuple(want), spec.outputs_tuple(got)):
            assert (w is None) == (g is None)
            if w is not None:
                torch.testing.assert_close(g, w)
    assert saw_copy == (op == "diag")  # only diag's formula has copy_ into a view


def test_prod_is_untraceable_with_reason_and_still_passes_via_fallback():
    st = Traced()
    reason = st.untraceable("prod")
    assert reason is not None and "data-dependent" in reason
    assert "prod" in st.fallbacks
    assert st.untraceable("diag") is None and "diag" not in st.fallbacks
    for smp in registry.get_op("prod").samples()[:4]:
        r = runner.run("prod", "vmap_cotangents", st, smp)
        # 'full, two zeros': prod's gradient is zero there (uninformative, not a failure)
        assert r.status == ("uninformative" if smp.name == "full, two zeros" else "pass"), (smp.name, r.message)


def _vmap_vjp_diag(st, k: int, batch: int = 3):
    x = torch.randn(3, 5)
    _, fn = vjp(lambda x: legacy.function_for("diag", st).apply(x, k), x)
    n = torch.diag(x, k).shape[0]
    return vmap(fn)(torch.randn(batch, n))[0]


def test_cache_reuse_one_trace_per_signature():
    st = Traced()
    _vmap_vjp_diag(st, 1)
    assert st.trace_count == 1
    _vmap_vjp_diag(st, 1, batch=5)  # batch size is not part of the logical signature
    assert st.trace_count == 1
    _vmap_vjp_diag(st, 0)  # k is baked into the graph: a new signature
    assert st.trace_count == 2
    assert len(st.cached_graphs("diag")) == 2


def test_cache_is_thread_safe():
    st = Traced()
    spec = registry.get_op("index_select")
    args = formula_args_for(spec, spec.sample())
    barrier = threading.Barrier(4)
    results, errors = [], []

    def worker():
        try:
            barrier.wait()
            results.append(st.graph_for(spec, args))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert st.trace_count == 1 and all(r is results[0] for r in results)


@pytest.mark.parametrize("key", [lambda a: flatten_args(a).key, positional_key], ids=["pytree", "positional"])
def test_signature_key_separates_types_shapes_strides_and_constants(key):
    g = torch.zeros(3)
    assert key((g, 1)) != key((g, True))
    assert key((g, 1)) != key((g, 1.0))
    assert key((g, [3, 5])) != key((g, [5, 3]))
    assert key((g, [3, 5])) != key((g, (3, 5)))
    assert key((g, 0.0)) != key((g, -0.0))  # baked into the graph: the sign matters
    assert key((g, float("nan"))) == key((g, float("nan")))  # else every call would retrace
    assert key((torch.zeros(4), 1)) != key((g, 1))
    assert key((torch.zeros(3, 2), 1)) != key((torch.zeros(2, 3).t(), 1))  # same shape, strides differ
    assert key((g, None)) == key((torch.ones(3), None))


def test_every_catalog_formula_takes_the_positional_key_fast_path():
    # The per-call key needs no pytree round trip for any catalog formula's args.
    slow = [(name, smp.name) for name in registry.op_names() for smp in registry.get_op(name).samples()
            if registry.get_op(name).kind == "backward"
            and positional_key(formula_args_for(registry.get_op(name), smp)) is None]
    assert slow == []
    assert positional_key((torch.zeros(2), [torch.zeros(1)])) is None  # nested tensors: pytree


def test_provenance_graph_and_fallback():
    st = Traced()
    with provenance.collecting() as events:
        _vmap_vjp_diag(st, 1)
    assert [(e.strategy, e.mechanism, e.ran) for e in events] == [("traced", GRAPH, True)]
    assert events[0].detail == "diag [(3,)f32, [3, 5], 1]"
    x = torch.rand(3, 4) + 0.5
    with provenance.collecting() as events:
        _, fn = vjp(lambda x: legacy.function_for("prod", st).apply(x, 1, False), x)
        vmap(fn)(torch.randn(2, 3))
    own = [e for e in events if e.strategy == "traced"]
    assert [(e.mechanism, e.ran) for e in own] == [(FALLBACK, False)]
    assert "data-dependent" in own[0].detail and "\n" not in own[0].detail


def test_tracing_inside_vmap_leaves_no_state_behind():
    st = Traced()
    before = internals.dispatch_state()
    seen = []
    x, result = torch.randn(3, 4), torch.randn(())

    def inner(g):
        seen.append(internals.dispatch_state())
        hit = st.graph_for(registry.get_op("prod"), (g, x, result, None, False))
        assert isinstance(hit, Untraceable)
        assert internals.dispatch_state() == seen[0]
        return g * 2

    vmap(inner)(torch.randn(2))
    assert internals.dispatch_state() == before
    assert st.bookkeeping() == {"building": 0}  # no graph left half-built


def _copy_cast_broadcast(src: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(2, 3, 4, dtype=torch.float64)
    out[1].copy_(src)  # src (4,) float32 broadcast to (3, 4) and cast to float64
    return out


def _copy_whole(src: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(src)
    out.copy_(src)  # elided to `src` itself: must be cloned, not returned aliased
    return out


def test_elision_casts_broadcasts_and_clones():
    src = torch.randn(4)
    gm = trace_formula(_copy_cast_broadcast, (src,), elide_copies=False)
    report = elide.elide_copies(gm)
    assert (report.count, report.casts, report.expands, report.clones) == (1, 1, 1, 0)
    torch.testing.assert_close(gm(src), _copy_cast_broadcast(src))
    with internals.vmap_fallback_disabled():
        batched = vmap(gm)(torch.randn(3, 4))
    assert batched.dtype == torch.float64 and batched.shape == (3, 2, 3, 4)

    gm2 = trace_formula(_copy_whole, (src,), elide_copies=False)
    report2 = elide.elide_copies(gm2)
    assert report2.clones == 1
    out = gm2(src)
    torch.testing.assert_close(out, src)
    assert out.data_ptr() != src.data_ptr()


def test_registry_instance_is_traced():
    assert isinstance(get_strategy("traced"), Traced)
