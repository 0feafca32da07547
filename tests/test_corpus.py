"""The extended corpus: every legacy formula equals torch's built-in gradient unbatched, and the
in-place ones reproduce the historical vmap failure under cotangent batching."""

from __future__ import annotations

import pytest
import torch

from funcbwd_lab import legacy
from funcbwd_lab.ops import registry
from funcbwd_lab.run import runner

EXTENDED = [s.name for s in registry.all_ops() if s.group in ("extended", "negative_control")]
CASES = [(name, smp.name) for name in EXTENDED for smp in registry.get_op(name).samples()]


def _grads(spec, fn, smp):
    args = list(smp.args)
    prim = [args[p].detach().clone().requires_grad_() for p in smp.diff]
    for p, v in zip(smp.diff, prim):
        args[p] = v
    outs = spec.diff_out(fn(*args))
    g = torch.Generator().manual_seed(0)
    cts = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    return torch.autograd.grad(outs, prim, cts, allow_unused=True)


def test_corpus_size_and_groups():
    assert len(registry.op_names()) >= 23
    assert len(registry.op_names("extended")) >= 15
    assert set(registry.op_names("negative_control")) >= {"norm_inf", "copysign", "cumprod", "narrow"}


@pytest.mark.parametrize("name,sample", CASES)
def test_legacy_formula_equals_builtin_unbatched(name, sample):
    spec = registry.get_op(name)
    smp = spec.sample(sample)
    legacy_g = _grads(spec, legacy.function_for(spec).apply, smp)
    builtin_g = _grads(spec, spec.torch_op, smp)
    for lg, bg in zip(legacy_g, builtin_g):
        bg = torch.zeros_like(lg) if bg is None else bg
        torch.testing.assert_close(lg, bg, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", EXTENDED)
def test_spec_is_complete(name):
    spec = registry.get_op(name)
    assert spec.source and spec.fixed_by and spec.schema
    assert 1 <= len(spec.samples()) <= 3
    for smp in spec.samples():
        assert sum(a.numel() for a in smp.args if isinstance(a, torch.Tensor)) <= 40


# Which ops fail how under plain vmap(vjp_fn) over cotangents: the history in legacy-formulas.md.
INPLACE_FAILS = ["gather", "take", "cummax", "select", "slice", "diagonal", "diag_embed",
                 "block_diag", "matrix_exp", "trace", "index", "binary_cross_entropy_with_logits"]


@pytest.mark.parametrize("name", INPLACE_FAILS)
def test_plain_reproduces_inplace_failure_and_builtin_passes(name):
    plain = runner.run(name, "vmap_cotangents", "plain")
    assert (plain.status, plain.reason) == ("fail", "vmap_inplace"), plain.message
    assert runner.run(name, "vmap_cotangents", "builtin").status == "pass"


@pytest.mark.parametrize("name", ["index_fill", "masked_fill"])
def test_self_grad_clone_fails_only_under_mixed_batching(name):
    assert runner.run(name, "vmap_cotangents", "plain").status == "pass"
    r = runner.run(name, "vmap_all_args", "plain")
    assert (r.status, r.reason) == ("fail", "vmap_inplace"), r.message


@pytest.mark.parametrize("name", ["norm_inf", "copysign"])
def test_safe_inplace_negative_controls_pass_plain(name):
    for scenario in ("vmap_cotangents", "vmap_all_args"):
        assert runner.run(name, scenario, "plain").status == "pass"


def test_item_negative_control_fails_under_functionalization_too():
    r = runner.run("max", "vmap_all_args", "per_formula")
    assert (r.status, r.reason) == ("fail", "data_dependent"), r.message


def test_functionalizing_fixes_gather():
    assert runner.run("gather", "vmap_cotangents", "per_formula").status == "pass"
