"""traced_backward: one joint graph per function and signature, run under vmap over primals and
cotangents, differentiable, refused (with the reason) where it cannot stand for the eager vjp,
and checked so that a graph baking one call's saved tensors is caught. By default a graph is
installed only where torch's backward falls back under vmap; the tests of the graph's own
mechanics use functions whose backward does not, so they install it always."""

from __future__ import annotations

import pytest
import torch
from torch.func import vjp, vmap
from torch.fx.experimental.proxy_tensor import make_fx

from funcbwd import internals
from funcbwd.fx.formula_graphs import blank, tensor_spec
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies import joint_build
from funcbwd_lab.strategies import traced_backward as tb
from funcbwd_lab.strategies.traced_backward import TracedBackward

B = 4


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed):
    return torch.randn(*shape, generator=_gen(seed))


def _loop(fn, batched, in_dims, n_primals):
    """torch's own vjp, one sample at a time: entry b of every batched arg (None: as is)."""
    outs = []
    for b in range(B):
        args = [a if d is None else a.select(d, b) for a, d in zip(batched, in_dims)]
        prims, rest = args[:n_primals], args[n_primals:]
        _, ref = vjp(fn, *prims)
        outs.append(ref(tuple(rest)))
    return tuple(torch.stack(parts) for parts in zip(*outs))


def _run(st, fn, batched, in_dims, n_primals, inputs=()):
    """vmap of (primals, cotangents) -> the strategy's vjp; (grads, provenance events)."""
    def h(*args):
        _, vjp_fn = st.vjp(fn, *args[:n_primals], inputs=inputs)
        return vjp_fn(tuple(args[n_primals:]))

    with provenance.collecting() as events:
        got = vmap(h, in_dims=in_dims)(*batched)
    return got, [e for e in events if e.strategy == st.name]


def _cummax_sin(x, y):
    return (torch.cummax(x * y, 0).values.sin(),)


def test_one_graph_serves_every_call_of_a_signature():
    st = TracedBackward()
    for seed in range(3):  # new values, same signature: one trace
        batched = [_randn(B, 5, seed=seed), _randn(B, 5, seed=seed + 10), _randn(B, 5, seed=seed + 20)]
        got, events = _run(st, _cummax_sin, batched, (0, 0, 0), 2)
        assert [e.mechanism for e in events] == [tb.GRAPH]
        for g, w in zip(got, _loop(_cummax_sin, batched, (0, 0, 0), 2)):
            torch.testing.assert_close(g, w)
    assert st.trace_count == 1 and len(st.cached()) == 1
    batched = [_randn(B, 6, seed=1), _randn(B, 6, seed=2), _randn(B, 6, seed=3)]
    _run(st, _cummax_sin, batched, (0, 0, 0), 2)  # another shape: another graph
    assert st.trace_count == 2
    other = lambda x, y: _cummax_sin(x, y)  # noqa: E731 - another function: its own graph
    _run(st, other, batched, (0, 0, 0), 2)
    assert st.trace_count == 3


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(tb, "CACHE_SIZE", 2)
    st = TracedBackward(install="always")
    for n in (3, 4, 5):
        _run(st, lambda x: (x.sin(),), [_randn(B, n, seed=n), _randn(B, n, seed=n + 1)], (0, 0), 1)
    assert st.trace_count == 3 and len(st.cached()) == 2


@pytest.mark.parametrize("in_dims", [(0, 0, 0), (None, 0, -1), (-1, None, 0), (0, 0, None)])
def test_vmap_over_primals_and_cotangents_equals_the_loop_and_torchs_vjp(in_dims):
    st = TracedBackward()
    shapes = [(5,), (5,), (5,)]
    batched = [_randn(*(s if d is None else (s[:d] + (B,) + s[d:] if d >= 0 else s + (B,))),
                      seed=i) for i, (s, d) in enumerate(zip(shapes, in_dims))]
    got, events = _run(st, _cummax_sin, batched, in_dims, 2)
    assert events and all(e.ran for e in events)
    for g, w in zip(got, _loop(_cummax_sin, batched, in_dims, 2)):
        torch.testing.assert_close(g, w)
    # and against torch's own vjp under the same vmap (builtin)
    want = vmap(lambda x, y, c: vjp(_cummax_sin, x, y)[1]((c,)), in_dims=in_dims)(*batched)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_batched_indices_as_inputs_and_no_slow_fallback():
    """take with a batched index (a non-differentiated input): the graph equals the loop, and
    take's backward (put: no batching rule, vmap's slow fallback under builtin) runs batched."""
    st = TracedBackward()
    x, idx, ct = _randn(B, 6, seed=1), torch.randint(0, 6, (B, 3), generator=_gen(2)), _randn(B, 3, seed=3)

    def h(x, i, c):
        _, vjp_fn = st.vjp(lambda a, j: (torch.take(a, j),), x, inputs=(i,))
        return vjp_fn((c,))

    import warnings
    with warnings.catch_warnings(record=True) as caught, provenance.collecting() as events:
        warnings.simplefilter("always")
        got = vmap(h)(x, idx, ct)
    assert all(e.ran for e in events if e.strategy == st.name)
    slow = [str(w.message) for w in caught if "performance drop" in str(w.message)]
    assert not [m for m in slow if "aten::put" in m], slow  # the eager forward's take remains
    assert any("aten::take" in m for m in slow)  # the detection works: the forward still falls back
    want = torch.stack([vjp(lambda a: (torch.take(a, idx[b]),), x[b])[1]((ct[b],))[0]
                        for b in range(B)])
    torch.testing.assert_close(got[0], want)


def test_vjp_of_vjp():
    """The graph is out-of-place aten ops: an outer vjp differentiates it (second order)."""
    x, cts, outer = _randn(5, seed=1), _randn(B, 5, seed=2), _randn(B, 5, seed=3)

    def second(strategy_vjp):
        def inner(a):
            _, vjp_fn = strategy_vjp(lambda t: (t.sin().cumsum(0) * t,), a)
            return vmap(vjp_fn)((cts,))[0]
        out, vjp2 = vjp(inner, x)
        return out, vjp2(outer)[0]

    st = TracedBackward(install="always")
    with provenance.collecting() as events:
        got = second(st.vjp)
    assert [e.mechanism for e in events if e.strategy == st.name] == [tb.GRAPH]
    want = second(torch.func.vjp)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_outside_vmap_the_vjp_fn_runs_as_written():
    st = TracedBackward()
    x, c = _randn(5, seed=1), _randn(5, seed=2)
    _, vjp_fn = st.vjp(lambda t: (t.exp(),), x)
    with provenance.collecting() as events:
        (g,) = vjp_fn((c,))
    assert [e.mechanism for e in events] == [tb.PLAIN] and st.trace_count == 0
    torch.testing.assert_close(g, x.exp() * c)


def test_random_ops_are_refused_and_the_saved_draw_is_used():
    fn = lambda t: (t * torch.rand_like(t),)  # noqa: E731
    x = _randn(5, seed=1)
    torch.manual_seed(0)
    st = TracedBackward(install="always")
    _, vjp_fn = st.vjp(fn, x)
    cts = _randn(B, 5, seed=9)
    with provenance.collecting() as events:
        got = vmap(vjp_fn)((cts,))
    (ev,) = [e for e in events if e.strategy == st.name]
    assert ev.mechanism == tb.FALLBACK and not ev.ran and "random op" in ev.detail
    assert "rand_like" in ev.detail
    mask = vjp_fn((torch.ones(5),))[0]  # the forward's own draw, as the eager backward saw it
    torch.testing.assert_close(got[0], cts * mask)
    # the refusal matters: the joint graph, had it run, draws again and differs
    flat = (x, cts[0])
    joint = tb.joint_function(fn, *_specs(x, cts[0]))
    gm = tb.trace_joint(joint, flat)
    assert tb.refusal(gm) and not torch.allclose(gm(*flat)[0], cts[0] * mask)


def _specs(x, ct):
    import torch.utils._pytree as pytree
    _, ps = pytree.tree_flatten((x,))
    _, is_ = pytree.tree_flatten(())
    _, cs = pytree.tree_flatten((ct,))
    return ps, 1, is_, 0, cs


def test_data_dependent_control_flow_falls_back_with_the_reason():
    """A branch on a value cannot be traced with fake tensors (a graph would bake one branch).
    Data-dependent *ops* (``.item()``, ``nonzero``, ``masked_select``) trace in torch 2.13 as
    unbacked sizes and run as eager does, so they are not refused (the check compares them)."""
    st = TracedBackward(install="always")
    fn = lambda t: (t * 2,) if t.sum() > 0 else (t * 3,)  # noqa: E731
    x, cts = _randn(6, seed=1), _randn(B, 6, seed=9)
    _, vjp_fn = st.vjp(fn, x)
    with provenance.collecting() as events:
        (got,) = vmap(vjp_fn)((cts,))
    (ev,) = [e for e in events if e.strategy == st.name]
    assert ev.mechanism == tb.FALLBACK and not ev.ran
    assert ev.detail.startswith("untraceable: GuardOnDataDependentSymNode")
    torch.testing.assert_close(got, cts * (2 if x.sum() > 0 else 3))
    masked = lambda t: (t.masked_select(t > 0) * 2,)  # noqa: E731
    _, vjp_fn = st.vjp(masked, x)
    c = _randn(B, int((x > 0).sum()), seed=3)
    with provenance.collecting() as events:
        (got,) = vmap(vjp_fn)((c,))
    assert [e.mechanism for e in events if e.strategy == st.name] == [tb.GRAPH]
    want = torch.stack([vjp(masked, x)[1]((cb,))[0] for cb in c])
    torch.testing.assert_close(got, want)


def test_a_graph_baking_the_saved_tensors_is_caught_by_the_check(monkeypatch):
    """Mutation: a tracer that bakes the first call's primals (real mode, saved tensors as
    constants) gives the first primal's gradient for every later primal of the signature. The
    check (seeded inputs against the eager vjp) refuses it; without the check it runs and is
    wrong for a second primal value."""
    fn = lambda t: (t.sin() * t,)  # noqa: E731
    real = tb.trace_joint

    def baked(joint, flat):
        primal = flat[0]  # plain: only the cotangents are batched here
        specs = [tensor_spec(a) for a in flat]
        with internals.cleared_functorch_state():
            return make_fx(lambda *f: joint(primal, *f[1:]), tracing_mode="real")(
                *[blank(s) for s in specs])

    monkeypatch.setattr(joint_build, "trace_joint", baked)
    x1, x2, cts = _randn(5, seed=1), _randn(5, seed=2), _randn(B, 5, seed=3)
    want2 = torch.stack([vjp(fn, x2)[1]((c,))[0] for c in cts])
    for check in (False, True):
        st = TracedBackward(check=check, install="always")
        for x in (x1, x2):  # the second call hits the graph traced for the first
            _, vjp_fn = st.vjp(fn, x)
            with provenance.collecting() as events:
                got = vmap(vjp_fn)((cts,))[0]
        (ev,) = [e for e in events if e.strategy == st.name]
        if check:
            assert ev.mechanism == tb.FALLBACK and "differs from the eager vjp" in ev.detail
            torch.testing.assert_close(got, want2)
        else:
            assert ev.mechanism == tb.GRAPH and not torch.allclose(got, want2)
    monkeypatch.setattr(joint_build, "trace_joint", real)
    st = TracedBackward(install="always")  # the real tracer: right for both primals, one graph
    for x in (x1, x2):
        _, vjp_fn = st.vjp(fn, x)
        got = vmap(vjp_fn)((cts,))[0]
    torch.testing.assert_close(got, want2)
    assert st.trace_count == 1


def test_a_captured_batched_tensor_falls_back():
    """A tensor fn captures (not a primal or an input) cannot be a fake tensor: tracing raises."""
    st = TracedBackward(install="always")

    def h(x, w, c):
        _, vjp_fn = st.vjp(lambda a: (a * w,), x)
        return vjp_fn((c,))

    x, w, c = _randn(3, seed=1), _randn(B, 3, seed=2), _randn(B, 3, seed=3)
    with provenance.collecting() as events:
        (got,) = vmap(h, in_dims=(None, 0, 0))(x, w, c)
    (ev,) = [e for e in events if e.strategy == st.name]
    assert ev.mechanism == tb.FALLBACK and ev.detail.startswith("untraceable")
    torch.testing.assert_close(got, w * c)


def test_no_state_leaks():
    before = internals.dispatch_state()
    st = TracedBackward()
    _run(st, _cummax_sin, [_randn(B, 5, seed=1), _randn(B, 5, seed=2), _randn(B, 5, seed=3)],
         (0, 0, 0), 2)
    assert internals.dispatch_state() == before
    assert st.bookkeeping() == {"tracing_in_progress": 0, "lock_held": False}


def _copy_slices(t, u):  # an in-place write into a view: copies and as_strided_scatter
    y = t.clone()
    y[:2].copy_(u)
    return (y * t,)


def test_an_elided_graph_failing_the_check_runs_un_elided(monkeypatch):
    """Mutation: an elision that breaks the graph (its first output scaled). The check refuses
    the elided graph, checks the un-elided one and runs it; without the mutation the elided
    graph runs."""
    from funcbwd_lab import batching
    from funcbwd.fx import elide

    real = elide.elide_copies

    def broken(gm):
        report = real(gm)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        with gm.graph.inserting_before(out):
            m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (out.args[0][0], 1.01))
        out.args = ((m, *out.args[0][1:]),)
        gm.recompile()
        return report

    batched = [_randn(B, 4, seed=1), _randn(B, 2, seed=2), _randn(B, 4, seed=3)]
    want = _loop(_copy_slices, batched, (0, 0, 0), 2)
    for mutate in (False, True):
        if mutate:
            monkeypatch.setattr(elide, "elide_copies", broken)
        st = TracedBackward(install="always")
        with batching.scoped_rules():  # its backward writes through as_strided_scatter
            got, events = _run(st, _copy_slices, batched, (0, 0, 0), 2)
        (ev,) = events
        assert ev.mechanism == (tb.UNELIDED if mutate else tb.GRAPH), ev
        assert ("copies elided" in ev.detail) and (" 0 copies" in ev.detail) == mutate
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


# ------------------------------------------------------------------------------ the forward stage
def _t_copy(x):  # no batching rule for aten::t_copy: the forward takes vmap's fallback
    return (torch.t_copy(x).sin(),)


def _seen_fallbacks(fn):
    import warnings

    from funcbwd.internals import fallback_ops
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, fallback_ops(caught)


def test_a_forward_that_falls_back_runs_as_a_decomposed_graph_from_the_second_call():
    st = TracedBackward()
    batched = [_randn(B, 3, 4, seed=1), _randn(B, 4, 3, seed=2)]
    want = _loop(_t_copy, batched, (0, 0), 1)
    (got, events), ops = _seen_fallbacks(lambda: _run(st, _t_copy, batched, (0, 0), 1))
    assert ops == ["aten::t_copy"] and tb.FORWARD_GRAPH not in [e.mechanism for e in events]
    (got2, events2), ops2 = _seen_fallbacks(lambda: _run(st, _t_copy, batched, (0, 0), 1))
    assert ops2 == [] and tb.FORWARD_GRAPH in [e.mechanism for e in events2]
    for g, g2, w in zip(got, got2, want):
        torch.testing.assert_close(g, w)
        torch.testing.assert_close(g2, w)
    (fwd,) = [h for h in st.cached_forwards() if isinstance(h, tb.ForwardGraph)]
    assert "aten::t_copy" in fwd.report.decomposed and not fwd.report.left


def test_mutation_a_wrong_forward_decomposition_is_refused_by_the_check(monkeypatch):
    from funcbwd_lab.fx import fallback_free

    real = fallback_free.decomposition

    def wrong(op):  # t_copy decomposed as a copy of its input, untransposed
        d, whose = real(op)
        if fallback_free.op_name(op) == "aten::t_copy":
            return (lambda x: x.clone().reshape(x.shape[::-1])), whose
        return d, whose

    monkeypatch.setattr(fallback_free, "decomposition", wrong)
    st = TracedBackward()
    batched = [_randn(B, 3, 4, seed=3), _randn(B, 4, 3, seed=4)]
    want = _loop(_t_copy, batched, (0, 0), 1)
    for _ in range(2):
        got, events = _run(st, _t_copy, batched, (0, 0), 1)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    assert tb.FORWARD_GRAPH not in [e.mechanism for e in events]
    (refused,) = [h for h in st.cached_forwards() if isinstance(h, tb.Refused)]
    assert "differs from fn" in refused.reason
    # the mutation is live: unchecked, the wrong graph's output differs
    x = _randn(3, 4, seed=5)
    gm = tb.trace_joint(lambda t: _t_copy(t), [x])
    gm, _ = fallback_free.decompose_fallbacks(gm, [x], [True])
    assert tb.refusal(gm) is None and not torch.allclose(gm(x)[0], _t_copy(x)[0])


def test_a_random_forward_gets_no_forward_graph():
    fn = lambda t: (torch.t_copy(t) * torch.rand_like(torch.t_copy(t)),)  # noqa: E731
    st = TracedBackward()
    batched = [_randn(B, 3, 4, seed=6), _randn(B, 4, 3, seed=7)]

    def h(x, ct):
        return st.vjp(fn, x)[1]((ct,))

    for _ in range(2):
        vmap(h, randomness="different")(*batched)
    (refused,) = [h for h in st.cached_forwards() if isinstance(h, tb.Refused)]
    assert "random op" in refused.reason
