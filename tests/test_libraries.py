"""The installed-library study: each failure class it found, pinned as an expected outcome with
its reason (functorch's test_ops.py style), once with the installed library's call (skipped with
one line where the library is absent: ``make libraries``) and once with a program of our own
that needs no library. When the tool learns to handle a class, its test fails as an unexpected
success: update the table (and docs/libraries.md by re-running the study).

Also: the verdict rules, the harness's comparison (outputs and caller state) with a mutation that
proves it can fail, and the committed data's shape and provenance.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, jacrev, vmap

import funcbwd
from funcbwd_lab.studies.libraries import env
from funcbwd_lab.studies.libraries.case import Built, LibCase
from funcbwd_lab.studies.libraries.verdicts import VERDICTS, cause, verdict

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------ own programs


def _bn_per_sample_grads():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(64, 2))
    m.train()
    params = {k: v.detach() for k, v in m.named_parameters()}
    buffers = {k: v.detach() for k, v in m.named_buffers()}

    def loss(p, b, x, y):
        return nn.functional.cross_entropy(functional_call(m, (p, b), (x[None],)), y[None])
    return vmap(grad(loss), in_dims=(None, None, 0, 0))(params, buffers, torch.randn(3, 3, 6, 6),
                                                       torch.tensor([0, 1, 0]))


class _Running(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running", torch.zeros(()))

    def forward(self, x):
        with torch.no_grad():
            self.running.mul_(0.9).add_(0.1 * x.mean())
        return x * 2


class _OldRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0)


def _recurrence(x):
    out = torch.zeros_like(x)  # 3 entries: the mode tries every stage before it gives up
    for i in range(1, x.shape[0]):
        out[i] = out[i - 1].sin() + x[i]  # sin saved out[i - 1]; the next write bumps out
    return out


def _equal(x, y):
    return x * 2 if torch.equal(x, y) else x * y


def _assert_async(x):
    torch._assert_async(x.abs().min() >= 0, "x must be non-negative")
    return x * 2


def _data_write(x):
    y = x / x.norm()
    y.data[0] = 1.0
    return y


def _out_into(x):
    buf = torch.empty(8)
    torch.cat([x, x * 2], out=buf)
    return buf


def _topk_values(x):
    v = torch.topk(x, 2).values
    v /= float(x.max())
    return v


#: class -> (program, expected outcome under ``funcbwd.allow_inplace()``, text of the error it
#: ends with ("" when it answers), why[, the state_writes it runs with])
OWN = {
    "bn_per_sample_grads": (_bn_per_sample_grads, "fails", "state_writes",
                            "BatchNorm's running statistics updated per sample: refused by "
                            "default (the contract); state_writes='discard' or 'loop' answer"),
    "bn_per_sample_grads_discard": (_bn_per_sample_grads, "fixed", "",
                                    "running statistics kept as they were", "discard"),
    "grad_captured_buffer": (lambda: jacrev(_Running())(torch.randn(4)), "fixed", "",
                             "a captured buffer written under jacrev: lifted, its value lands"),
    "grad_oldstyle_function": (lambda: jacrev(_OldRelu.apply)(torch.randn(4)), "fixed", "",
                               "old-style Functions converted under every transform"),
    "jacrev_saved_overwritten": (lambda: jacrev(_recurrence)(torch.randn(3)), "fails",
                                 "modified by an inplace operation",
                                 "a bare jacrev; eager autograd refuses it too (no reference)"),
    "aten_equal": (lambda: vmap(_equal, in_dims=(0, None))(torch.randn(3, 4), torch.randn(4)),
                   "fixed", "", "no batching rule: the per-sample loop"),
    "assert_async": (lambda: vmap(_assert_async)(torch.randn(3, 4)), "fixed", "",
                     "no batching rule: the per-sample loop"),
    "data_write_under_vmap": (lambda: vmap(_data_write)(torch.randn(3, 4)), "fixed", "",
                              "`.data` under vmap is detach() in the mode"),
    "out_into_fresh": (lambda: vmap(_out_into)(torch.randn(3, 4)), "fixed", "",
                       "op(..., out=fresh) runs out of place and is copied in"),
    "topk_values_then_item": (lambda: vmap(_topk_values)(torch.randn(3, 5)), "fixed", "",
                              "a per-sample value read: the per-sample loop"),
}


def _outcome(run, within):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with within():
                run()
        except Exception as e:  # noqa: BLE001 - the outcome is the error
            return "fails", str(e)
    return "fixed", ""


@pytest.mark.parametrize("name", sorted(OWN))
def test_own_program(name):
    run, expected, text, why, *state = OWN[name]
    plain, _ = _outcome(run, contextlib.nullcontext)
    assert plain == "fails", f"{name}: plain torch.func no longer fails; the class is gone ({why})"
    got, message = _outcome(run, lambda: funcbwd.allow_inplace(*state))
    if expected == "fails" and got == "fixed":
        pytest.fail(f"unexpected success: {name} now works under allow_inplace ({why}); "
                    "update OWN and re-run the study")
    assert got == expected, f"{name}: {message[:200]}"
    assert text in message, f"{name}: ends with another error: {message[:200]}"


def test_own_fixed_program_equals_the_loop():
    x = torch.randn(3, 4)
    with funcbwd.allow_inplace():
        got = vmap(_out_into)(x)
    assert torch.allclose(got, torch.stack([_out_into(r) for r in x]))


# ------------------------------------------------------------------------------ library calls
#: (case, transform) -> (expected verdict, why): the classes above met in the installed libraries
LIBRARY = {
    ("timm.create_model('resnet10t')", "per_sample_grad"): (
        "refused", "BatchNorm's running statistics per sample: refused by default"),
    ("pyro.distributions.TransformedDistribution(BatchNorm).log_prob", "jacrev"): (
        "fixed", "its inverse writes the moving averages: lifted under jacrev, the value lands"),
    ("pyro.distributions.TransformedDistribution(BatchNorm).log_prob", "vmap"): (
        "refused", "the moving averages written per sample: refused by default"),
    ("nflows.transforms.BatchNorm", "jacrev"): ("fixed", "a captured buffer under jacrev"),
    ("timm.layers.EvoNorm2dB0", "jacrev"): ("fixed", "a captured buffer under jacrev"),
    ("e3nn.math.soft_one_hot_linspace(cutoff=True)", "jacrev"): (
        "fixed", "soft_unit_step is an old-style Function: converted under jacrev"),
    ("torchdiffeq.odeint(dopri5)", "jacrev"): ("fixed", "old-style Function, converted"),
    ("torchdiffeq.odeint(dopri5)", "vmap_jacrev"): ("fixed", "adaptive solver under vmap(jacrev)"),
    ("gpytorch.kernels.RBFKernel", "vmap_vjp"): ("fixed", "aten::equal: the per-sample loop"),
    ("kornia.enhance.equalize_clahe", "vmap"): ("fixed", "aten::_assert_async.msg: the loop"),
    ("pyro.ops.tensor_utils.safe_normalize", "vmap"): ("fixed", ".data under vmap: detach()"),
    ("roma.euler_to_rotmat", "vmap_jacrev"): ("fixed", "in-place writes into fresh tensors"),
    ("einops.rearrange", "vmap_jacrev"): ("pass", "a control: no in-place write"),
    ("nflows.transforms.ActNorm", "jacrev"): (
        "fixed", "p.data = a tracked value: plain torch crashes (segfault); no vmap around it: "
                 "eager autograd's answer (funcbwd.eager), the .data write as eager makes it"),
    ("torchaudio.functional.dcshift", "vmap"): (
        "fixed", "writes its own input: the second call once ran the graph check on it"),
    ("zuko.flows.SOSPF", "jacfwd"): (
        "fixed", "GaussLegendre's backward is once_differentiable: no forward rule from it; "
                 "J v by reverse mode, one Jacobian row at a time (funcbwd.eager)"),
    ("zuko.flows.NAF", "hessian"): (
        "fixed", "torch.autograd.grad inside log_prob: eager autograd per basis vector"),
    ("torchdiffeq.odeint(dopri5)", "hessian"): (
        "fixed", "a custom Function's output view written: the inner jacrev eager too"),
}


def test_forward_mode_through_no_grad_is_torchs_forward_semantics():
    """:data:`FORWARD_SEMANTICS`' claim, computed: funcbwd's jacfwd of an adaptive solver equals
    reverse mode with the no_grad step size differentiated, not the reverse-mode loop."""
    if not env.available("torchdiffeq"):
        pytest.skip(env.skip_reason("torchdiffeq"))
    env.activate()
    import torchdiffeq
    from torchdiffeq._impl import misc, rk_common

    from funcbwd_lab.studies.libraries.verdicts import FORWARD_SEMANTICS

    assert ("torchdiffeq.odeint(bosh3)", "jacfwd") in FORWARD_SEMANTICS
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2)).double()
    t = torch.linspace(0.0, 1.0, 3, dtype=torch.float64)

    def g(y0):
        return torchdiffeq.odeint(lambda s, y: net(y), y0, t, method="bosh3")[-1]

    y0 = torch.randn(2, dtype=torch.float64)
    reverse = torch.autograd.functional.jacobian(g, y0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = funcbwd.jacfwd(g)(y0)
    assert (got - reverse).abs().max() > 1e-5  # the difference the verdict explains
    original = rk_common._optimal_step_size
    rk_common._optimal_step_size = misc._optimal_step_size.__wrapped__  # without @no_grad
    try:
        through = torch.autograd.functional.jacobian(g, y0)
    finally:
        rk_common._optimal_step_size = original
    torch.testing.assert_close(got, through, rtol=0, atol=1e-10)


@pytest.mark.parametrize("key", sorted(LIBRARY), ids=lambda k: f"{k[0]}-{k[1]}")
def test_library_call(key):
    from funcbwd_lab.studies.libraries.cases import CASES

    name, transform = key
    case = CASES[name]
    if not env.available(case.library):
        pytest.skip(env.skip_reason(case.library))
    from funcbwd_lab.studies.libraries.harness import run_cell

    expected, why = LIBRARY[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, detail = verdict(run_cell(case, transform, ("plain", "mode")))
    if case.isolate:  # plain ran in a child process: it crashed there, not here
        # torch's bug ends the child either way: a segfault, or (seen under pytest once the mode
        # answered ActNorm's jacrev in this process) its INTERNAL ASSERT on the grad level
        message = run_cell(case, transform, ("plain",))["plain"]["message"]
        assert "crashed the process" in message or "INTERNAL ASSERT FAILED" in message, message
    if expected in ("fails", "wrong") and got in ("fixed", "pass"):
        pytest.fail(f"unexpected success: {name} {transform} is now {got} ({why}); update "
                    "LIBRARY and re-run the study")
    assert got == expected, f"{name} {transform}: {got}: {detail[:200]}"


# ------------------------------------------------------------------------------ the machinery
def test_harness_counts_a_state_difference_as_wrong(monkeypatch):
    """A module that writes a per-sample value into its buffer: the mode refuses it by default
    (the contract); mutation: a mode that gives the buffer back as it was (the old borrow, no
    refusal) answers outputs right, state not the loop's: counted as wrong (state)."""
    from funcbwd import scope
    from funcbwd_lab.studies.libraries.harness import run_cell

    def build():
        m = _Running().double()
        return Built(m, m)
    case = LibCase("own", "none", "m(x)", "here", build,
                   lambda g: (torch.randn(4, generator=g, dtype=torch.float64),))
    v, detail = verdict(run_cell(case, "vmap", ("plain", "mode")))
    assert v == "refused", detail
    real = scope.entered

    def always_discard(**changes):
        if "state_writes" in changes:
            changes["state_writes"] = "discard"
        return real(**changes)

    monkeypatch.setattr(scope, "entered", always_discard)
    v, detail = verdict(run_cell(case, "vmap", ("plain", "mode")))
    assert (v, cause(detail)) == ("wrong", "caller's state differs from the loop's"), detail


def test_harness_comparison_can_fail(monkeypatch):
    """Mutation: a truth off by one makes a passing control cell differ (plain and the mode
    alike: torch's answer passed through, ``inherited``)."""
    from funcbwd_lab.studies.libraries import harness

    case = LibCase("own", "none", "sin(x)", "here", lambda: Built(torch.sin),
                   lambda g: (torch.randn(4, generator=g, dtype=torch.float64),))
    assert verdict(harness.run_cell(case, "vmap", ("plain", "mode")))[0] == "pass"
    real = harness.truth
    monkeypatch.setattr(harness, "truth", lambda *a: real(*a) + 1)
    cell = harness.run_cell(case, "vmap", ("plain", "mode"))
    assert cell["plain"]["status"] == "wrong" and verdict(cell)[0] == "inherited"


@pytest.mark.parametrize("cell,expected", [
    ({"truth": {"status": "noref", "message": "x"}}, "no_reference"),
    ({"truth": {"status": "ok"}, "plain": {"status": "ok"}, "mode": {"status": "ok"}}, "pass"),
    ({"truth": {"status": "ok"}, "plain": {"status": "error"}, "mode": {"status": "ok"}}, "fixed"),
    ({"truth": {"status": "ok"}, "plain": {"status": "error"},
      "mode": {"status": "error", "refused": True, "message": "r"}}, "refused"),
    ({"truth": {"status": "ok"}, "plain": {"status": "error"},
      "mode": {"status": "error", "refused": False}}, "fails"),
    ({"truth": {"status": "ok"}, "plain": {"status": "ok"}, "mode": {"status": "error"}},
     "regression"),
    ({"truth": {"status": "ok"}, "plain": {"status": "error"}, "mode": {"status": "state"}},
     "wrong"),
    ({"truth": {"status": "ok"}, "plain": {"status": "error"}, "mode": {"status": "state"},
      "discard": {"status": "ok"}}, "fixed_opt_in"),
    ({"truth": {"status": "ok"}, "plain": {"status": "wrong", "max_abs_err": 0.5},
      "mode": {"status": "wrong", "max_abs_err": 0.5}}, "inherited"),
    ({"truth": {"status": "ok"}, "plain": {"status": "error"},
      "mode": {"status": "wrong", "max_abs_err": 0.5}}, "wrong"),
])
def test_verdict_rules(cell, expected):
    assert verdict(cell)[0] == expected


# ------------------------------------------------------------------------------ the saved data
def test_committed_data_is_whole_and_cited():
    data = json.loads((ROOT / "data" / "libraries.json").read_text())
    from funcbwd_lab.studies.libraries.cases import CASES
    from funcbwd_lab.studies.libraries.verdicts import rows, summarize

    assert set(data["cases"]) == set(CASES), "re-run the study: cases changed"
    assert {r["case"] for r in data["results"]} == set(CASES)
    s = summarize(data)
    assert len(s["libraries"]) >= 15 and s["cases"] >= 120 and s["control_cases"] > 0
    assert all(": " in c["cite"] for c in data["cases"].values())
    assert {r["verdict"] for r in rows(data)} <= set(VERDICTS)
    assert data["pins"] == env.pins(), "re-run the study: the lock changed"
