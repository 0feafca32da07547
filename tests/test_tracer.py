"""The recording tracer (funcbwd.fx.tracer): the graphs make_fx records, without its first-call
import of torch._dynamo; data-dependent code refused; the caller's random stream untouched."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from funcbwd import internals
from funcbwd.fx import formula_graphs as FG
from funcbwd.fx import tracer
from funcbwd_lab.ops import registry

CPU = torch.device("cpu")


def _formulas():
    for name in registry.op_names():
        spec = registry.get_op(name)
        for smp in spec.samples():
            yield pytest.param(spec, smp, id=f"{name}[{smp.name}]")


def _make_fx_graph(formula, args):
    flat = FG.flatten_args(args)

    def f(*ts):
        return formula(*flat.rebuild(ts))

    with internals.cleared_functorch_state():
        return make_fx(torch.func.functionalize(f), tracing_mode="fake")(*flat.tensors)


@pytest.mark.parametrize("spec,smp", list(_formulas()))
def test_every_catalog_graph_equals_make_fx(spec, smp):
    args = FG.formula_args_for(spec, smp)
    try:
        theirs = _make_fx_graph(spec.formula, args)
    except Exception:  # noqa: BLE001 - make_fx refuses it: so must we
        with pytest.raises(tracer.DataDependentError, match="data-dependent"):
            FG.trace_formula(spec.formula, args)
        return
    mine = FG.trace_formula(spec.formula, args)
    assert FG.graph_signature(mine) == FG.graph_signature(theirs)


def test_graph_signature_comparison_can_fail():
    # Mutation: a graph with one argument changed is told apart.
    spec = registry.get_op("diag")
    args = FG.formula_args_for(spec, spec.sample())
    gm = FG.trace_formula(spec.formula, args)
    other = FG.trace_formula(spec.formula, (args[0], args[1], args[2] + 1))
    assert FG.graph_signature(gm) != FG.graph_signature(other)


@pytest.mark.parametrize("fn,why", [
    (lambda x: x * 2 if x.sum() > 0 else x, "reads a tensor's value"),
    (lambda x: x * x.max().item(), "reads a tensor's value"),
    (lambda x: x[x.nonzero()], "output shape depends"),
    (lambda x: x[x > 0], "output shape depends"),
    (lambda x: torch.masked_select(x, x > 0), "output shape depends"),
])
def test_data_dependent_code_is_refused(fn, why):
    with pytest.raises(tracer.DataDependentError, match=why):
        tracer.trace(fn, [((3,), (1,), torch.float32, CPU)])


def test_boolean_mask_write_is_traceable():
    # x[mask] = 0 keeps x's shape: functionalized it is index_put, no value-dependent shape.
    def f(g, x):
        out = g.clone()
        out[x < 0] = 0
        return out

    gm = tracer.trace(torch.func.functionalize(f), [((4,), (1,), torch.float32, CPU)] * 2)
    g, x = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(gm(g, x), f(g, x))


def test_random_ops_are_recorded_and_the_callers_stream_is_kept():
    torch.manual_seed(0)
    want = torch.rand(3)
    torch.manual_seed(0)
    gm = tracer.trace(lambda x: x + torch.randn(3), [((3,), (1,), torch.float32, CPU)])
    assert torch.equal(torch.rand(3), want)  # tracing drew nothing from the caller's stream
    assert any(n.target is torch.ops.aten.randn.default for n in gm.graph.nodes)
    assert not torch.equal(gm(torch.zeros(3)), gm(torch.zeros(3)))  # random per call


def test_a_kernel_refusing_zeros_is_traced_from_meta():
    # linalg.solve raises on the singular zeros; the layout comes from meta instead.
    gm = tracer.trace(lambda a, b: torch.linalg.solve(a, b),
                      [((3, 3), (3, 1), torch.float64, CPU), ((3,), (1,), torch.float64, CPU)])
    a, b = torch.randn(3, 3, dtype=torch.float64) + 3 * torch.eye(3), torch.randn(3, dtype=torch.float64)
    torch.testing.assert_close(gm(a, b), torch.linalg.solve(a, b))


def test_closure_tensors_become_constants():
    c = torch.randn(3)
    gm = tracer.trace(lambda x: x + c, [((3,), (1,), torch.float32, CPU)])
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    torch.testing.assert_close(gm(torch.ones(3)), 1 + c)


def test_tracing_imports_no_dynamo_or_sympy():
    code = ("import sys, torch, funcbwd\n"
            "from funcbwd.fx import formula_graphs as FG\n"
            "from funcbwd_lab.ops import get_op\n"
            "op = get_op('diag')\n"
            "FG.build(op.formula, FG.formula_args_for(op, op.sample()))\n"
            "bad = [m for m in ('torch._dynamo', 'torch._inductor', 'sympy') if m in sys.modules]\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
