"""The foundation: legacy formulas are faithful, the failure reproduces, the loop reference is right."""

from __future__ import annotations

import pytest
import torch

import funcbwd
import funcbwd_lab
from funcbwd_lab import legacy
from funcbwd_lab.ops import registry
from funcbwd_lab.run import scenario as scenarios
from funcbwd.errors import UnknownNameError

ALL = [(op.name, s) for op in registry.all_ops() for s in op.samples()]


@pytest.mark.parametrize("op_name,sample", ALL, ids=[f"{o}-{s.name}" for o, s in ALL])
def test_legacy_formula_equals_builtin_gradient_unbatched(op_name, sample):
    """Faithfulness: the legacy formula gives torch's built-in gradient on every sample."""
    spec = registry.get_op(op_name)
    results = []
    for fn in (spec.torch_op, legacy.function_for(spec).apply):
        args = list(sample.args)
        prim = [args[p].detach().clone().double().requires_grad_() for p in sample.diff]
        for p, v in zip(sample.diff, prim):
            args[p] = v
        args = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() and i not in sample.diff
                else a for i, a in enumerate(args)]
        outs = spec.diff_out(fn(*args))
        g = torch.Generator().manual_seed(7)
        cts = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
        results.append(torch.autograd.grad(outs, prim, cts, allow_unused=True))
    for built, leg in zip(*results):
        torch.testing.assert_close(leg, built)


def test_catalog_has_the_eight_test_ops_with_citations():
    assert set(registry.TEST_OPS) <= set(registry.op_names())
    for name in registry.TEST_OPS:
        spec = registry.get_op(name)
        assert spec.source and spec.fixed_by and spec.samples()


def test_legacy_op_is_callable_like_the_torch_op():
    x = torch.randn(3, 5)
    torch.testing.assert_close(legacy.diag(x, 1), torch.diag(x, 1))
    v, i = legacy.topk(x, 2, -1, True, True)
    ref = torch.topk(x, 2)
    torch.testing.assert_close(v, ref.values)
    assert torch.equal(i, ref.indices)


def test_failure_reproduced_with_exact_error_class():
    """vmap over cotangents of the legacy non-square diag raises vmap's in-place RuntimeError."""
    x = torch.randn(3, 5)
    _, vjp_fn = torch.func.vjp(lambda t: legacy.diag(t, 1), x)
    with pytest.raises(RuntimeError, match=r"vmap: inplace arithmetic\(self, \*extra_args\) is not possible"):
        torch.func.vmap(vjp_fn)(torch.randn(4, 3))


def test_builtin_passes_where_legacy_fails():
    x = torch.randn(3, 5)
    _, vjp_fn = torch.func.vjp(lambda t: torch.diag(t, 1), x)
    (g,) = torch.func.vmap(vjp_fn)(torch.ones(4, 3))
    assert g.shape == (4, 3, 5)


def test_loop_reference_against_hand_computed_gradient():
    """The per-sample loop itself: diag's gradient is the cotangent placed on the k-th diagonal."""
    spec = registry.get_op("diag")
    sample = spec.sample("3x5 k=1")
    plain = funcbwd_lab.get_strategy("plain")
    ct = torch.arange(3.0)
    (g,) = scenarios.loop_vjp(spec, plain, sample.args, sample.diff, [ct])
    expected = torch.zeros(3, 5)
    expected[0, 1], expected[1, 2], expected[2, 3] = 0.0, 1.0, 2.0
    torch.testing.assert_close(g, expected)
    # and the loop of index_select with repeated indices accumulates
    spec = registry.get_op("index_select")
    s = spec.sample("dim0 repeated")  # index [0, 2, 2, 1, 0]
    ct = torch.ones(5, 3)
    (g,) = scenarios.loop_vjp(spec, plain, s.args, s.diff, [ct])
    torch.testing.assert_close(g, torch.tensor([2.0, 1.0, 2.0, 0.0])[:, None].expand(4, 3))


def test_in_dims_choices_follow_pytorch_methodology():
    ch = scenarios.in_dims_choices(2)
    assert ch[0] == (0, 0)
    assert set(ch[1:]) == {(-1, -1), (-1, None), (None, -1)}


@pytest.mark.parametrize("bad", ["nope", "", None, 3])
def test_unknown_op_names_list_valid_ones(bad):
    with pytest.raises(UnknownNameError, match=r"valid ops, by group:\n  test \(8\): .*diag"):
        registry.get_op(bad)


def test_unknown_sample_and_legacy_attribute():
    with pytest.raises(UnknownNameError, match="valid samples of diag: "):
        registry.get_op("diag").sample("no such sample")
    with pytest.raises(UnknownNameError, match="unknown op 'nope'"):
        legacy.nope  # noqa: B018


def test_wrong_shape_raises_clear_torch_error():
    with pytest.raises(RuntimeError, match="1D or 2D"):
        legacy.diag(torch.randn(2, 2, 2), 0)
