"""traced_backward's graphs without vmap's per-sample fallback (issue 30 item 1): nodes without a
batching rule decomposed (or named, with why), the forward's outputs as graph inputs (no
recomputed forward), a graph only where torch's backward falls back, and a cache keyed on what
determines the graph. Each test also breaks its mechanism and sees the difference."""

from __future__ import annotations

import torch
from torch.func import vjp, vmap

from funcbwd import internals
from funcbwd_lab.fx import fallback_free
from funcbwd_lab.run.outcomes import fallbacks_seen
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies import cost_gate
from funcbwd_lab.strategies import traced_backward as tb
from funcbwd_lab.strategies.traced_backward import TracedBackward

B = 4


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _unfold(x):
    return (x.unfold(0, 3, 2),)


def _vmapvjp(st, fn, x, cts):
    """vmap over primals and cotangents of the strategy's vjp: (grads, events, fallback ops)."""
    def h(a, c):
        _, vjp_fn = st.vjp(fn, a)
        return vjp_fn((c,))

    with fallbacks_seen() as seen, provenance.collecting() as events:
        got = vmap(h)(x, cts)
    return got, [e for e in events if e.strategy == st.name], seen.ops


def _graph(st):
    (hit,) = [h for h in st.cached() if isinstance(h, tb.JointGraph)]
    return hit


def _ops(gm):
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _loop(fn, x, cts):
    return torch.stack([vjp(fn, x[b])[1]((cts[b],))[0] for b in range(B)])


def test_unfold_backward_is_decomposed_and_nothing_falls_back():
    """unfold's backward (``unfold_backward``: no batching rule) is decomposed at build time: the
    graph runs without vmap's fallback. Mutation: without the pass the graph calls it and the
    fallback is seen."""
    x, cts = _randn(B, 10, seed=1), _randn(B, 4, 3, seed=2)
    want = _loop(_unfold, x, cts)
    for decompose in (True, False):
        st = TracedBackward(decompose=decompose)
        (got,), events, fell_back = _vmapvjp(st, _unfold, x, cts)
        torch.testing.assert_close(got, want)
        assert [e.mechanism for e in events] == [tb.GRAPH]
        hit = _graph(st)
        has = torch.ops.aten.unfold_backward.default in _ops(hit.graph)
        if decompose:
            assert not has and fell_back == [], fell_back
            assert "aten::unfold_backward" in hit.fallbacks.decomposed
            assert hit.fallbacks.left == () and hit.fallbacks.probe.startswith("no fallback")
            assert "fallback ops left: none" in events[0].detail
        else:
            assert has and fell_back == ["aten::unfold_backward"]


def test_the_vmap_probe_finds_what_the_dispatch_table_does_not_say(monkeypatch):
    """With the static reading of the dispatch table broken (no op 'has no batching rule'), the
    probe (the graph run once under vmap with the fallback disabled) still names
    unfold_backward and it is decomposed; with the probe off too, it stays."""
    monkeypatch.setattr(fallback_free, "_no_batching_rule", lambda name: False)
    x, cts = _randn(B, 10, seed=1), _randn(B, 4, 3, seed=2)
    st = TracedBackward()
    _vmapvjp(st, _unfold, x, cts)
    hit = _graph(st)
    assert torch.ops.aten.unfold_backward.default not in _ops(hit.graph)
    assert "aten::unfold_backward" in hit.fallbacks.decomposed
    monkeypatch.setattr(fallback_free, "vmap_probe", lambda gm, args, batched: fallback_free.Probe())
    st = TracedBackward()
    _vmapvjp(st, _unfold, x, cts)
    assert torch.ops.aten.unfold_backward.default in _ops(_graph(st).graph)


def test_an_op_without_a_decomposition_is_named_with_why(monkeypatch):
    """Mutation: torch and funcbwd have no decomposition (of anything): unfold_backward stays in
    the graph and the report names it, with why."""
    monkeypatch.setattr(fallback_free, "decomposition", lambda op: (None, ""))
    x, cts = _randn(B, 10, seed=1), _randn(B, 4, 3, seed=2)
    st = TracedBackward()
    (got,), events, fell_back = _vmapvjp(st, _unfold, x, cts)
    torch.testing.assert_close(got, _loop(_unfold, x, cts))
    hit = _graph(st)
    assert hit.fallbacks.left == (("aten::unfold_backward", fallback_free.NO_DECOMPOSITION),)
    assert "aten::unfold_backward (no decomposition" in events[0].detail
    assert fell_back == ["aten::unfold_backward"]


def test_funcbwds_put_decomposition_is_right_and_batched():
    """take's backward is ``put`` (no batching rule, no torch decomposition): funcbwd's
    decomposition (index_put on the flattened tensor) equals put, also with negative and
    repeated indices and accumulate, and has no fallback under vmap."""
    x = _randn(3, 4, seed=1)
    idx = torch.tensor([0, -1, 5, 5, -12])
    src = _randn(5, seed=2)
    for acc in (False, True):
        if not acc:  # repeated indices without accumulate: put's winner is unspecified
            i, s = idx[:3], src[:3]
        else:
            i, s = idx, src
        torch.testing.assert_close(fallback_free._put(x, i, s, acc), torch.put(x, i, s, acc))
    with internals.vmap_fallback_disabled():  # raises if anything falls back
        got = vmap(lambda a, j, s: fallback_free._put(a, j, s, True))(
            _randn(B, 3, 4, seed=3), torch.randint(-12, 12, (B, 5)), _randn(B, 5, seed=4))
    assert got.shape == (B, 3, 4)


def test_funcbwds_conj_physical_decomposition_is_right_and_batched():
    """The Hermitian FFTs' backward calls ``_conj_physical`` (no batching rule, no torch
    decomposition): funcbwd's equals it (complex and real) and has no fallback under vmap."""
    z = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    assert torch.equal(fallback_free._conj_physical(z), torch.ops.aten._conj_physical(z))
    x = _randn(3, 4, seed=2)
    assert torch.equal(fallback_free._conj_physical(x), torch.ops.aten._conj_physical(x))
    with internals.vmap_fallback_disabled():  # raises if anything falls back
        got = vmap(fallback_free._conj_physical)(z.expand(B, 3, 4).clone())
    assert torch.equal(got[1], z.conj_physical())


def test_the_forward_is_not_recomputed(monkeypatch):
    """log_ndtr's backward reads its output: the graph takes the eager forward's output as an
    input and computes no log_ndtr (whose vmap fallback it would pay again). Mutation: outputs
    dropped from the graph but their nodes kept (the old recomputing joint graph): log_ndtr is
    a node again. Decomposition off, so only this pass can remove it."""
    fn = lambda t: (torch.special.log_ndtr(t),)  # noqa: E731
    x, cts = _randn(B, 6, seed=1), _randn(B, 6, seed=2)
    want = _loop(fn, x, cts)
    real = fallback_free.forward_outputs_as_inputs

    def recomputing(gm, n_outputs):
        real(gm, 0)  # no placeholders for outputs
        out = next(n for n in gm.graph.nodes if n.op == "output")
        out.args = (tuple(out.args[0][n_outputs:]),)
        last = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
        for i in range(n_outputs):  # the call still passes the outputs: unused placeholders
            with gm.graph.inserting_after(last):
                last = gm.graph.placeholder(f"unused_{i}")
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return 0

    for mutate in (False, True):
        if mutate:
            monkeypatch.setattr(fallback_free, "forward_outputs_as_inputs", recomputing)
        st = TracedBackward(install="always", decompose=False)
        (got,), events, _ = _vmapvjp(st, fn, x, cts)
        torch.testing.assert_close(got, want)
        assert [e.mechanism for e in events] == [tb.GRAPH]
        has = torch.ops.aten.special_log_ndtr.default in _ops(_graph(st).graph)
        assert has == mutate


def test_a_graph_only_where_torchs_backward_falls_back():
    """Default install: sin's backward has batching rules, so torch's backward runs as is (no
    trace); cummax's falls back, so a graph is built. install='always' (the mutation): sin gets a
    graph too."""
    sin = lambda t: (t.sin(),)  # noqa: E731
    cummax = lambda t: (torch.cummax(t, 0).values,)  # noqa: E731
    x, cts = _randn(B, 5, seed=1), _randn(B, 5, seed=2)
    st = TracedBackward()
    (got,), events, _ = _vmapvjp(st, sin, x, cts)
    torch.testing.assert_close(got, cts * x.cos())
    assert [e.mechanism for e in events] == [tb.PASSTHROUGH] and st.trace_count == 0
    _vmapvjp(st, sin, x, cts)  # cached: no second probe, still no trace
    assert st.trace_count == 0 and all(isinstance(h, tb.Passthrough) for h in st.cached())
    # and from then on torch's own vjp_fn is returned, unwrapped (nothing more per call)
    def name_of_vjp_fn(strategy):
        names = []

        def h(a, c):
            _, f = strategy.vjp(sin, a)
            names.append(f.__name__)
            return f((c,))

        vmap(h)(x, cts)
        return names[0]

    assert name_of_vjp_fn(st) != "traced_vjp_fn"
    assert name_of_vjp_fn(TracedBackward()) == "traced_vjp_fn"  # a fresh cache: wrapped
    (got,), events, fell_back = _vmapvjp(st, cummax, x, cts)
    torch.testing.assert_close(got, _loop(cummax, x, cts))
    assert [e.mechanism for e in events] == [tb.GRAPH] and st.trace_count == 1
    assert "cummaxmin_backward hit the vmap fallback" in events[0].detail and fell_back == []
    always = TracedBackward(install="always")
    _, events, _ = _vmapvjp(always, sin, x, cts)
    assert [e.mechanism for e in events] == [tb.GRAPH] and always.trace_count == 1


def test_the_cache_is_keyed_on_what_determines_the_graph():
    """A fresh closure per call (what the fallback-speedup study's composition once built) hits
    the graph of the first: one trace. A closure over another tensor, or another code, is
    another graph. Mutation: keyed by the function's identity, every fresh closure re-traces."""
    w1, w2 = _randn(5, seed=7), _randn(5, seed=8)

    def make(w):
        return lambda t: (torch.cummax(t * w, 0).values,)

    x, cts = _randn(B, 5, seed=1), _randn(B, 5, seed=2)
    st = TracedBackward()
    for _ in range(3):
        (got,), events, _ = _vmapvjp(st, make(w1), x, cts)
        assert [e.mechanism for e in events] == [tb.GRAPH]
    torch.testing.assert_close(got, _loop(make(w1), x, cts))
    assert st.trace_count == 1
    (got,), _, _ = _vmapvjp(st, make(w2), x, cts)  # another captured tensor: another graph
    torch.testing.assert_close(got, _loop(make(w2), x, cts))
    assert st.trace_count == 2
    assert tb.function_key(make(w1)) == tb.function_key(make(w1)) != tb.function_key(make(w2))
    import funcbwd_lab.fx.joint as joint
    real = joint.key_of
    try:
        joint.key_of = lambda fn, _depth=0: joint._Identity(fn)  # the mutation
        joint._KEYS.clear()
        st = TracedBackward()
        for _ in range(3):
            _vmapvjp(st, make(w1), x, cts)
        assert st.trace_count == 3
    finally:
        joint.key_of = real
        joint._KEYS.clear()


def test_the_cost_gate_keeps_torchs_backward_where_the_graph_costs_more(monkeypatch):
    """With the cost gate on, a graph timed slower than GATE_MARGIN x torch's backward with its
    fallback at the first call is not used. Mutation-style: a margin of 0 makes every graph 'slower' (torch's
    backward runs, the reason says so); a huge margin makes none (the graph runs); off (the
    default) the gate never times anything."""
    cummax = lambda t: (torch.cummax(t, 0).values,)  # noqa: E731
    x, cts = _randn(B, 5, seed=1), _randn(B, 5, seed=2)
    for margin, want in ((0.0, tb.PASSTHROUGH), (1e9, tb.GRAPH)):
        monkeypatch.setattr(cost_gate, "GATE_MARGIN", margin)
        st = TracedBackward(cost_gate=True)
        (got,), events, _ = _vmapvjp(st, cummax, x, cts)
        torch.testing.assert_close(got, _loop(cummax, x, cts))
        assert [e.mechanism for e in events] == [want]
        if want == tb.PASSTHROUGH:
            assert "x torch's backward with its per-sample fallback" in events[0].detail
            _, events, _ = _vmapvjp(st, cummax, x, cts)  # kept: no graph from now on
            assert [e.mechanism for e in events] == [tb.PASSTHROUGH] and st.trace_count == 1
    monkeypatch.setattr(cost_gate, "GATE_MARGIN", 0.0)
    _, events, _ = _vmapvjp(TracedBackward(), cummax, x, cts)
    assert [e.mechanism for e in events] == [tb.GRAPH]


def test_the_scoped_rules_are_entered_only_around_graphs_that_call_their_ops(monkeypatch):
    """Entering the rules registers kernels (per call): with_rules() enters them around a graph
    only when it calls aten::copy or aten::as_strided_scatter, never around torch's backward run
    as is. cummax's graph calls neither; a write through an as_strided view does."""
    from funcbwd_lab import batching

    entered = []
    real = batching.scoped_rules

    def counting():
        entered.append(1)
        return real()

    monkeypatch.setattr(batching, "scoped_rules", counting)
    cummax = lambda t: (torch.cummax(t, 0).values,)  # noqa: E731
    x, cts = _randn(B, 5, seed=1), _randn(B, 5, seed=2)
    st = TracedBackward().with_rules()
    _, events, _ = _vmapvjp(st, cummax, x, cts)
    assert [e.mechanism for e in events] == [tb.GRAPH] and not _graph(st).needs_rules
    assert entered == []

    def strided(t):
        y = torch.zeros(8)
        y.as_strided((2,), (3,)).copy_(t)
        return (y * 2,)

    from funcbwd.fx import elide
    monkeypatch.setattr(elide, "elide_copies", lambda gm: elide.ElisionReport())  # copies stay
    st = TracedBackward(install="always").with_rules()
    x, cts = _randn(2, seed=3), _randn(B, 8, seed=4)  # the forward's write: x unbatched
    _, vjp_fn = st.vjp(strided, x)
    with provenance.collecting() as events:
        (got,) = vmap(lambda c: vjp_fn((c,)))(cts)
    assert [e.mechanism for e in events if e.strategy == st.name] == [tb.GRAPH]
    hit = _graph(st)
    assert hit.needs_rules and entered
    assert ("aten::copy", fallback_free.SCOPED) in hit.fallbacks.left
    torch.testing.assert_close(got, torch.stack([vjp(strided, x)[1]((c,))[0] for c in cts]))
