"""Sound copy elision: the rewrite keeps every value and stride later ops can observe, and the
traced strategy checks each new graph against the un-elided one before trusting it.

Two counter-examples to a values-only elision (``copy(dst, src)`` -> ``expand(src)``):

* ``broadcast_then_view``: a ``(3,)`` grad copied into zeros(5, 3) (broadcast over rows), then
  ``view(3, 5)``: the stride-0 expand cannot be viewed ("view size is not compatible");
* ``transposed_then_as_strided``: a grad copied into ``zeros(5, 3).t()``, then ``as_strided``
  over the base: the transposed source's storage order is read, a silently different result.

Both are the true gradients of their forwards, built here as ``OpSpec`` (not in the global
registry) and run through the matrix cell runner like any catalog op. With the pass of commit
75f93eb (values and shape only) both fail under ``traced`` (checked in a scratch run of that
commit: "view size is not compatible" and a mismatch of 3.22 against the per-sample loop).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from funcbwd.fx import codegen, elide
from funcbwd.fx.formula_graphs import (bindings_equivalent, build, check_elision, compare_outputs,
                                       formula_args_for, tensor_positions, tensor_spec, trace_formula)
from funcbwd_lab.ops import registry
from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.traced import UNELIDED, Traced


# ------------------------------------------------------------------------------ counter-examples
def broadcast_then_view(grad: torch.Tensor) -> torch.Tensor:
    z = torch.zeros(5, 3, dtype=grad.dtype)
    z.copy_(grad)  # (3,) broadcast over the 5 rows
    return z.view(3, 5)


def transposed_then_as_strided(grad: torch.Tensor) -> torch.Tensor:
    z = torch.zeros(5, 3, dtype=grad.dtype)
    z.t().copy_(grad)  # grad (3, 5) into a transposed view
    return z.as_strided((15,), (1,))


def _spec(name, torch_op, formula, shape) -> OpSpec:
    return OpSpec(
        name=name, torch_op=torch_op, formula=formula,
        formula_args=lambda args, outs, grads: (grads[0],), grad_positions=(0,),
        source="tests/test_elide.py", fixed_by="-",
        make_samples=lambda: [Sample(f"x {shape}", (torch.randn(shape, generator=torch.Generator().manual_seed(0)),))],
        schema="(Tensor grad) -> Tensor", group="negative_control")


# y = x.reshape(5, 3).sum(0): dy/dx broadcasts the (3,) grad over the rows, viewed back as (3, 5)
BROADCAST = _spec("elide_broadcast_then_view", lambda x: x.reshape(5, 3).sum(0),
                  broadcast_then_view, (3, 5))
# y = x.view(5, 3).t(): dy/dx puts grad.t() back in x's (15,) order
TRANSPOSED = _spec("elide_transposed_then_as_strided", lambda x: x.view(5, 3).t().contiguous(),
                   transposed_then_as_strided, (15,))
COUNTER_EXAMPLES = (BROADCAST, TRANSPOSED)


def test_broadcast_then_view_passes_under_every_functionalizing_strategy():
    for strategy in ("per_formula", "composite", "traced"):
        r = matrix.run(BROADCAST, "vmap_cotangents", strategy)
        assert r.status == "pass", (strategy, r.message)


def test_as_strided_after_a_fallback_copy_loses_the_layout_under_vmap():
    # A finding, not a traced bug: strategies that leave aten::copy to vmap's slow fallback get
    # the wrong answer here, because the fallback stacks the per-sample results contiguously and
    # as_strided then reads the stacked layout, not copy's (transposed) one. traced passes: its
    # clone keeps dst's strides in every sample.
    for strategy in ("per_formula", "composite"):
        r = matrix.run(TRANSPOSED, "vmap_cotangents", strategy)
        assert r.status == "mismatch" and "aten::copy" in r.fallback_ops, (strategy, r.message)
    assert matrix.run(TRANSPOSED, "vmap_cotangents", "traced").status == "pass"


@pytest.mark.parametrize("spec", COUNTER_EXAMPLES, ids=lambda s: s.name)
def test_counter_examples_run_the_elided_graph_without_copy(spec):
    st = Traced()
    r = matrix.run(spec, "vmap_cotangents", st)
    assert r.status == "pass", r.message
    assert r.fallback_ops == []  # no aten::copy left for vmap's slow loop
    (entry,) = st.entries(spec)
    assert entry.check.ok and entry.report.count == 1 and entry.report.clones == 1
    assert elide.count_targets(entry.graph) == 0
    assert st.refused == {}


def _drop_stride_handling(monkeypatch):
    """The mutation: an elision pass that never materializes dst's layout (values-only)."""
    monkeypatch.setattr(elide, "_needs_dst_layout", lambda node, new, outputs: False)


@pytest.mark.parametrize("spec,symptom", [(BROADCAST, "raised RuntimeError: view size"),
                                          (TRANSPOSED, "values differ")], ids=["view", "as_strided"])
def test_check_catches_a_pass_without_stride_handling(monkeypatch, spec, symptom):
    args = formula_args_for(spec, spec.sample())
    sound = build(spec.formula, args)
    assert sound.check.ok, sound.check.detail
    _drop_stride_handling(monkeypatch)
    broken = build(spec.formula, args)
    assert not broken.check.ok and symptom in broken.check.detail
    assert broken.graph is broken.functionalized  # the un-elided graph runs instead


def test_strategy_refuses_a_broken_elision_and_says_so(monkeypatch):
    _drop_stride_handling(monkeypatch)
    st = Traced()
    cell = matrix.run(BROADCAST, "vmap_cotangents", st)
    assert cell.status == "pass", cell.message  # correct: the un-elided graph ran
    assert "aten::copy" in cell.fallback_ops  # ... at the cost of vmap's slow loop
    assert "view size is not compatible" in st.refused[BROADCAST.name]
    with provenance.collecting() as events:
        torch.func.vmap(lambda g: st.run_formula(BROADCAST, (g,)))(torch.randn(2, 3))
    assert [(e.mechanism, e.ran) for e in events] == [(UNELIDED, True)]
    assert "view size is not compatible" in events[0].detail


def test_unchecked_broken_elision_gives_wrong_results(monkeypatch):
    # Why the check exists: the same broken pass without it fails the cell (the mutation is live).
    _drop_stride_handling(monkeypatch)
    st = Traced()
    monkeypatch.setattr("funcbwd.decorator.build",
                        lambda f, a, name="", **kw: build(f, a, name=name, check=False))
    assert matrix.run(BROADCAST, "vmap_cotangents", st).status == "fail"
    assert matrix.run(TRANSPOSED, "vmap_cotangents", st).status == "mismatch"


# ------------------------------------------------------------------------------ every catalog op
def _pairs():
    for name in registry.op_names():
        spec = registry.get_op(name)
        if spec.kind != "backward":
            continue
        for smp in spec.samples():
            yield pytest.param(spec, smp, id=f"{name}[{smp.name}]")


@pytest.mark.parametrize("spec,smp", list(_pairs()))
def test_elided_graph_matches_unelided_values_and_strides(spec, smp):
    args = formula_args_for(spec, smp)
    try:
        func = trace_formula(spec.formula, args)
    except Exception as e:  # noqa: BLE001
        assert "data-dependent" in str(e) or "dynamic" in str(e) or ".item()" in str(e), e
        pytest.skip(f"untraceable (data-dependent): {type(e).__name__}")
    elided = copy.deepcopy(func)
    report = elide.elide_copies(elided)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    want = func(*tensors)
    assert compare_outputs(want, elided(*tensors)) == ""  # exact values, shapes, dtypes, strides
    assert elide.count_targets(elided) == len(report.kept)
    # the compiled functions compute the same, strides included (overload calls, and the public
    # bindings the strategy runs once they are verified to bind the same overloads)
    for bindings in (False, True):
        run = codegen.compile_graph(elided, tensor_positions(args), spec.name, bindings)
        assert compare_outputs(want, run(args)) == ""
    # and the once-per-signature check agrees on random inputs; build() chose the bindings
    assert check_elision(func, elided, tensors).ok
    entry = build(spec.formula, args, name=spec.name)
    assert entry.check.ok and entry.bindings and compare_outputs(want, entry.run(args)) == ""


def test_compare_outputs_sees_strides_values_and_structure():
    a = torch.arange(6.0).view(2, 3)
    t = a.t().contiguous().t()  # same values, column-major strides
    assert compare_outputs(a, a.clone()) == ""
    assert "strides (1, 2)" in compare_outputs(a, t)
    assert "values differ" in compare_outputs(a, a + 1)
    assert compare_outputs((a, None), (a, None)) == ""
    assert "output 1" in compare_outputs((a, None), (a, a))
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(nan, nan.clone()) == ""


def test_bindings_are_used_only_when_they_bind_the_same_overload():
    x = torch.randn(3)
    # torch.add(x, 2) binds aten::add.Tensor, not the graph's add.Scalar: refused
    scalar = make_fx(lambda t: torch.ops.aten.add.Scalar(t, 2))(x)
    assert not bindings_equivalent(scalar, [tensor_spec(x)])
    tensor = make_fx(lambda t: torch.ops.aten.add.Tensor(t, 2))(x)
    assert bindings_equivalent(tensor, [tensor_spec(x)])


# ------------------------------------------------------------------------------ the pass itself
def test_layout_is_kept_only_where_observable():
    # diag: the copy feeds diagonal_scatter's src (values only): no clone, no copy left
    spec = registry.get_op("diag")
    g = build(spec.formula, formula_args_for(spec, spec.sample("3x5 k=1")))
    assert (g.report.count, g.report.clones, g.report.kept) == (1, 0, [])

    def non_dense_observed(grad):  # copy into a non-dense base whose layout as_strided reads
        z = torch.empty_strided((3,), (2,), dtype=grad.dtype)
        z.copy_(grad)
        return z.as_strided((2,), (4,))  # z[0], z[2]

    gm = trace_formula(non_dense_observed, (torch.randn(3),))
    report = elide.elide_copies(gm)
    assert report.kept == ["copy"] and elide.count_targets(gm) == 1  # no clone gives strides (2,)
    x = torch.randn(3)
    assert compare_outputs(non_dense_observed(x), gm(x)) == ""
    torch.testing.assert_close(gm(x), x[::2])


# ------------------------------------------------------------------------------ select_scatter
# Functionalizing a write into a select view emits select_scatter, whose vmap rule (a scatter of
# the unsqueezed, expanded source with duplicate indices) has a wrong gradient: reverse mode over
# a batched select_scatter scales the source's gradient by the scattered dim's size. That made
# traced's live_householder_product_backward_1 jacrev_jacrev a mismatch (4.44 / 6.16 against the
# per-sample loop) before build() rewrote select_scatter as slice_scatter.
def select_write(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Gradient of x[:, 0] ** 2: 2 grad x[:, 0] written into column 0 of zeros (in place)."""
    out = torch.zeros_like(x)
    out.select(-1, 0).copy_(2 * grad * x.select(-1, 0))
    return out


SELECT_WRITE = OpSpec(
    name="elide_select_write", torch_op=lambda x: x[:, 0] ** 2, formula=select_write,
    formula_args=lambda args, outs, grads: (grads[0], args[0]), grad_positions=(0,),
    source="tests/test_elide.py", fixed_by="-",
    make_samples=lambda: [Sample("x (4, 3)", (torch.randn(4, 3, dtype=torch.float64,
                                                           generator=torch.Generator().manual_seed(0)),))],
    schema="(Tensor grad, Tensor self) -> Tensor", group="negative_control")


def test_torch_batched_select_scatter_gradient_is_scaled_by_the_dim_size():
    # The torch behaviour the rewrite works around (if torch fixes it, this test says so).
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    e = torch.randn(5, 4, dtype=torch.float64)

    def grad_of(scatter):
        out = torch.func.vmap(lambda row: scatter(torch.zeros_like(x), row * x[:, 1]))(e)
        return torch.autograd.grad(out.sum(), x)[0][:, 1]

    want = e.sum(0)
    torch.testing.assert_close(grad_of(lambda b, s: torch.slice_scatter(b, s.unsqueeze(-1), -1, 0, 1)),
                               want)
    torch.testing.assert_close(grad_of(lambda b, s: torch.select_scatter(b, s, -1, 0)), 3 * want)


def test_select_scatter_is_rewritten_and_checked_against_the_trace():
    args = formula_args_for(SELECT_WRITE, SELECT_WRITE.sample())
    raw = trace_formula(select_write, args)
    entry = build(select_write, args, name=SELECT_WRITE.name)
    scatter = (torch.ops.aten.select_scatter.default,)
    assert elide.count_targets(raw, scatter) == 1 and entry.scatter_rewrites == 1
    assert elide.count_targets(entry.functionalized, scatter) == 0
    assert elide.count_targets(entry.graph, scatter) == 0 and entry.check.ok and entry.bindings
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    assert compare_outputs(raw(*tensors), entry.run(args)) == ""


def test_traced_second_order_through_a_select_write_matches_the_loop(monkeypatch):
    for scenario in ("jacrev_jacrev", "vjp_of_vjp", "jacrev"):
        r = matrix.run(SELECT_WRITE, scenario, Traced())
        assert r.status == "pass", (scenario, r.message)
    # the mutation: without the rewrite the batched select_scatter's gradient is 3x too large
    # (the graph passes off too: they rebuild this write into a fresh zeros as select_backward)
    monkeypatch.setattr("funcbwd.fx.formula_graphs.rewrite_select_scatter", lambda gm: 0)
    monkeypatch.setattr("funcbwd.fx.passes.PASSES", ())
    assert matrix.run(SELECT_WRITE, "jacrev", Traced()).status == "pass"  # first order is fine
    broken = matrix.run(SELECT_WRITE, "jacrev_jacrev", Traced())
    assert broken.status == "mismatch", broken.message


def test_rewrite_refuses_a_graph_it_would_change(monkeypatch):
    # The trace-time check is live: a rewrite writing the wrong column makes build() raise, and
    # the strategy falls back to per_formula with that reason rather than run either graph.
    from funcbwd.fx import formula_graphs, select_scatter

    def off_by_one(gm):
        for n in gm.graph.nodes:
            if n.target is torch.ops.aten.select_scatter.default:
                n.args = (*n.args[:3], n.args[3] + 1)
        return select_scatter.rewrite_select_scatter(gm)

    monkeypatch.setattr(formula_graphs, "rewrite_select_scatter", off_by_one)
    args = formula_args_for(SELECT_WRITE, SELECT_WRITE.sample())
    with pytest.raises(RuntimeError, match="differs from the trace: output 0: values differ"):
        build(select_write, args)
    st = Traced()
    assert "differs from the trace" in st.untraceable(SELECT_WRITE)


def test_householder_product_backward_second_order_under_traced():
    # The reported cell (both samples mismatched before the rewrite).
    spec = registry.get_op("live_householder_product_backward_1")
    for smp in spec.samples():
        st = Traced()
        r = matrix.run(spec, "jacrev_jacrev", st, smp)
        assert r.status == "pass", (smp.name, r.message)
        assert st.entries(spec) and all(e.scatter_rewrites > 0 for e in st.entries(spec))
