"""jvp-kind ops end to end: the legacy op runs the forward-mode formula through the strategy, its
backward is torch's, the forward-mode scenarios compare with a per-sample loop and can fail, and
each scenario and strategy applies to the op kinds it can act on.

Uses first samples and small ops only (the full table is ``python -m funcbwd_lab deletable``).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import jacfwd, jacrev

import funcbwd
import funcbwd_lab
from funcbwd_lab.ops import legacy_ops, registry
from funcbwd_lab.ops.live import jvp as live_jvp
from funcbwd_lab.run import runner
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.run.scenarios import BACKWARD_NAMES, FORWARD_NAMES, SCENARIOS, names_for
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.per_formula import PerFormula

JVP_OPS = list(live_jvp.SITE_NAMES)


def _torch_and_legacy(spec, sample, tangents):
    """(torch's jvp of torch_op, the legacy op's jvp under plain forward AD), diff outputs."""
    def call(fn, args):
        with fwAD.dual_level():
            full = list(args)
            for p, t in zip(sample.diff, tangents):
                full[p] = fwAD.make_dual(args[p], t)
            return [fwAD.unpack_dual(o).tangent for o in spec.diff_out(fn(*full))]

    return call(spec.torch_op, sample.args), call(legacy_ops.function_for(spec).apply, sample.args)


@pytest.mark.parametrize("name", JVP_OPS)
def test_legacy_jvp_op_runs_the_fast_path_and_equals_torch_unbatched(name):
    spec = registry.get_op(name)
    sample = spec.samples()[0]
    g = torch.Generator().manual_seed(3)
    tangents = [torch.randn(sample.args[p].shape, generator=g, dtype=sample.args[p].dtype)
                for p in sample.diff]
    ref, got = _torch_and_legacy(spec, sample, tangents)
    for r, t in zip(ref, got):
        torch.testing.assert_close(t, r, rtol=1e-4, atol=1e-5)
    # mutation: the same comparison sees a legacy op whose formula is off by a factor
    broken = dataclasses.replace(spec, name=f"{name}_scaled", formula=lambda *a: _scaled(spec.formula(*a)))
    _, bad = _torch_and_legacy(broken, sample, tangents)
    assert not all(torch.allclose(b, r, rtol=1e-4, atol=1e-5) for b, r in zip(bad, ref))


def _scaled(out):
    return tuple(1.5 * o for o in out) if isinstance(out, tuple) else 1.5 * out


def test_legacy_jvp_op_backward_is_torchs_gradient_through_the_statistics_outputs():
    """group norm's saved statistics (mean, rstd) stay differentiable outputs of the legacy op,
    so reverse mode through the formula's saved statistics reaches the input; the grad equals
    torch's (every cotangent defined: torch's grads of mean/rstd alone are wrong, see the report)."""
    spec = registry.get_op("live__invstd_jvp_1")
    x, *rest = spec.samples()[0].args
    xr = x.detach().clone().requires_grad_()
    outs = legacy_ops.function_for(spec).apply(xr, *rest)
    assert all(o.requires_grad for o in outs)
    ref_outs = spec.torch_op(xr, *rest)
    g = torch.Generator().manual_seed(4)
    cts = [torch.randn(o.shape, generator=g) for o in outs]
    torch.testing.assert_close(torch.autograd.grad(outs, xr, cts)[0],
                               torch.autograd.grad(ref_outs, xr, cts)[0])


def test_legacy_jvp_op_backward_works_under_vmap_of_vjp():
    spec = registry.get_op("live_logsumexp_jvp_1")
    x, *rest = spec.samples()[0].args
    fn = legacy_ops.function_for(spec).apply
    out, vjp_fn = torch.func.vjp(lambda y: fn(y, *rest), x)
    _, ref_fn = torch.func.vjp(lambda y: spec.torch_op(y, *rest), x)
    cts = torch.randn((3, *out.shape), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(torch.func.vmap(vjp_fn)(cts), torch.func.vmap(ref_fn)(cts))


# ------------------------------------------------------------------------------ the scenarios
def test_vmap_jvp_fails_the_fast_path_and_passes_with_the_mechanism_that_ran():
    op = "live_logsumexp_jvp_1"
    plain = runner.run(op, "vmap_jvp", "plain", batch=3)
    assert (plain.status, plain.reason) == ("fail", "vmap_inplace")
    pf = runner.run(op, "vmap_jvp", "per_formula", batch=3)
    assert pf.status == "pass" and pf.mechanism_ran, (pf.status, pf.mechanism)
    hf = runner.run(op, "vmap_jvp", "handfixed", batch=3)
    assert hf.status == "pass"


class ScaledUnderVmap(PerFormula):
    """A broken strategy: right outside vmap (the loop), 1.5x off under vmap (the transform)."""

    name = "scaled_under_vmap"

    def run_formula(self, op, args):
        from funcbwd import internals

        out = super().run_formula(op, args)
        provenance.record(self.name, "scaled", True)
        return _scaled(out) if internals.vmap_active() else out


@pytest.mark.parametrize("scenario", FORWARD_NAMES)
def test_each_forward_scenario_catches_a_strategy_wrong_under_vmap(scenario):
    op = "live_rms_norm_rstd_jvp_1"
    good = runner.run(op, scenario, "per_formula")
    assert good.status == "pass", good.message
    bad = runner.run(op, scenario, ScaledUnderVmap())
    assert bad.status == "mismatch", (bad.status, bad.message)


def test_forward_over_reverse_cannot_see_the_jvp_formula_so_it_does_not_apply():
    """Why jvp-kind ops get jacrev_jacfwd, not jacfwd_jacrev: forward over reverse differentiates
    the backward (torch's, for these ops) and discards the formula's output tangents."""
    spec = registry.get_op("live_logsumexp_jvp_1")
    x, *rest = spec.samples()[0].args
    wrong = dataclasses.replace(spec, name="logsumexp_wrong_jvp", formula=lambda *a: 2.0 * spec.handfixed(*a))

    def h(s):
        fn = legacy_ops.function_for(s).apply

        def weighted(y):
            out = fn(y, *rest)
            return (out * torch.arange(1.0, 1.0 + out.numel()).reshape(out.shape)).sum()

        return weighted

    right_spec = dataclasses.replace(spec, name="logsumexp_right_jvp", formula=spec.handfixed)
    assert torch.allclose(jacfwd(jacrev(h(right_spec)))(x), jacfwd(jacrev(h(wrong)))(x))
    assert not torch.allclose(jacrev(jacfwd(h(right_spec)))(x), jacrev(jacfwd(h(wrong)))(x))
    cell = runner.run(spec, "jacfwd_jacrev", "traced")
    assert cell.status == "not_applicable" and "runs backward formulas" in cell.message


# ------------------------------------------------------------------------------ applicability
def test_scenarios_and_strategies_apply_by_formula_kind():
    assert names_for(["backward"]) == list(BACKWARD_NAMES)
    assert names_for(["jvp"]) == list(FORWARD_NAMES)
    jvp_op, bw_op = registry.get_op("live_logsumexp_jvp_1"), registry.get_op("live_take_backward_1")
    for name, sc in SCENARIOS.items():
        for op in (jvp_op, bw_op):
            reason = sc.not_applicable(op, funcbwd_lab.get_strategy("traced"))
            assert (reason is None) == (sc.formula_kind == op.kind), (name, op.name, reason)
    for st in ("hooks", "whole"):
        reason = funcbwd_lab.get_strategy(st).not_applicable(jvp_op, "vmap_jvp")
        assert reason and "forward pass" in reason, (st, reason)
        assert funcbwd_lab.get_strategy(st).not_applicable(bw_op, "vmap_cotangents") is None
    for st in ("plain", "builtin", "handfixed", "per_formula", "traced", "composite"):
        assert funcbwd_lab.get_strategy(st).not_applicable(jvp_op, "vmap_jvp") is None, st
    cell = runner.run(jvp_op, "vmap_jvp", "hooks")
    assert cell.status == "not_applicable" and "hooks" in cell.message


def test_live_ops_are_opt_in_and_the_matrix_default_is_unchanged():
    defaults = registry.op_names()
    assert not any(registry.get_op(n).group == "live" for n in defaults)
    assert set(registry.TEST_OPS) <= set(defaults)
    assert len(registry.op_names("live")) == 43 and "live" in registry.groups()
    cells = matrix.run_matrix(["live_rms_norm_rstd_jvp_1"], strategies=["handfixed"], samples="first")
    assert [c.scenario for c in cells] == list(FORWARD_NAMES)
    assert all(c.status == "pass" for c in cells), [(c.scenario, c.message) for c in cells]


def test_cli_lists_the_live_group(capsys):
    from funcbwd_lab import cli

    assert cli.main(["ops", "--group", "live"]) == 0
    listed = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln.startswith("live_")]
    assert listed == registry.op_names("live")
    assert cli.main(["ops"]) == 0
    assert "live_" not in capsys.readouterr().out
