"""funcbwd.vmap / funcbwd.allow_inplace(): in-place code as written under torch.func.

Every "works" is a value checked against a per-sample loop of torch's autograd; every mechanism
has a test showing that breaking it is caught (a mutation)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.func import hessian, jacrev, vjp

import funcbwd
from funcbwd.errors import FuncbwdError
from funcbwd import functions as oldstyle, inplace, replay, scope
from funcbwd.inplace import InplaceMode
from funcbwd.functions import run_inplace
from funcbwd.ladder import PerSampleLoopWarning

B = 3


def per_sample_jacobians(f, xs):
    return torch.stack([torch.autograd.functional.jacobian(f, x) for x in xs])


# --- small cases, one per mechanism of the mode ----------------------------------------------
def factory_write(x):
    y = torch.zeros(4)
    y[1:3] = x * 2
    return y


def view_write(x):  # a write through a view taken *before* the batched value arrives
    z = torch.zeros(3, 3)
    d = z.diagonal()
    d.copy_(x.exp())
    return z


def unbind_write(x):
    z = torch.zeros(2, 3)
    a, b = z.unbind(0)
    a.copy_(x)
    b.copy_(x.sin())
    return z


def mask_write(x):  # pytorch3d's _sqrt_positive_part pattern
    ret = torch.zeros_like(x)
    positive = x > 0
    ret[positive] = torch.sqrt(x[positive])
    return ret


def mask_write_rewrite(x):
    return torch.where(x > 0, x.clamp_min(1e-30).sqrt(), torch.zeros_like(x))


class OldScale(torch.autograd.Function):  # old style: forward(ctx, ...), a ctx attribute
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        ctx.save_for_backward(x)
        return x * alpha

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        out = torch.zeros_like(g)
        out += g * ctx.alpha  # in place in the backward
        return out, None


def old_function(x):
    return OldScale.apply(x, 3.0).sin()


def saved_overwrite(x):  # torchaudio's lfilter pattern: a window read (saved), then written
    buf = torch.zeros(x.shape[0] + 1)
    for i in range(x.shape[0]):
        w = buf[i:i + 1]
        buf[i + 1] = (w * x[i]).sum() + x[i]  # autograd saved w for x's gradient
    return buf


def saved_overwrite_rewrite(x):
    ys = [torch.zeros(())]
    for i in range(x.shape[0]):
        ys.append(ys[-1] * x[i] + x[i])
    return torch.stack(ys)


CASES = {
    "factory": (factory_write, lambda x: torch.cat([torch.zeros(1), x * 2, torch.zeros(1)]), 2),
    "saved_overwrite": (saved_overwrite, saved_overwrite_rewrite, 4),
    "views": (view_write, lambda x: torch.diag(x.exp()), 3),
    "unbind": (unbind_write, lambda x: torch.stack([x, x.sin()]), 3),
    "mask": (mask_write, mask_write_rewrite, 5),
    "old_function": (old_function, lambda x: (x * 3.0).sin(), 4),
}


def inputs(n):
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, n, generator=g)


@pytest.mark.parametrize("name", sorted(CASES))
def test_plain_torch_func_refuses_each_case(name):
    f, _, n = CASES[name]
    with pytest.raises(RuntimeError):
        torch.func.vmap(jacrev(f))(inputs(n))


@pytest.mark.parametrize("name", sorted(CASES))
def test_dropin_vmap_of_jacrev_matches_the_loop(name):
    f, rewrite, n = CASES[name]
    xs = inputs(n)
    got = funcbwd.vmap(jacrev(f))(xs)
    torch.testing.assert_close(got, per_sample_jacobians(rewrite, xs))
    torch.testing.assert_close(funcbwd.vmap(f)(xs), torch.stack([rewrite(x) for x in xs]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_allow_inplace_vmap_vjp_and_hessian_match_the_loop(name):
    f, rewrite, n = CASES[name]
    xs = inputs(n)
    ct = torch.randn(B, *rewrite(xs[0]).shape, generator=torch.Generator().manual_seed(1))
    with funcbwd.allow_inplace():
        got = torch.func.vmap(lambda x, c: vjp(f, x)[1](c)[0])(xs, ct)
    want = torch.stack([torch.autograd.grad(rewrite(x.requires_grad_()), x, c)[0]
                        for x, c in zip(xs.clone(), ct)])
    torch.testing.assert_close(got, want)
    if name in ("old_function",):  # no jvp defined: forward AD refuses it written or rewritten
        return
    g = lambda x: f(x).pow(2).sum()  # noqa: E731
    with funcbwd.allow_inplace():
        h = hessian(g)(xs[0] + 0.1)
    torch.testing.assert_close(
        h, torch.autograd.functional.hessian(lambda x: rewrite(x).pow(2).sum(), xs[0] + 0.1))


# --- mutations: breaking a mechanism is caught ----------------------------------------------
def test_mutation_views_not_rederived_is_caught(monkeypatch):
    def promote_base_only(self, node):
        from funcbwd import internals

        base = node.root().ref()
        internals.swap_impl(base, internals.batched_copy(base))  # views keep the old storage

    monkeypatch.setattr(InplaceMode, "_promote", promote_base_only)
    xs = inputs(3)
    try:
        got = run_inplace(lambda: torch.func.vmap(view_write)(xs))  # the mode alone
    except RuntimeError:
        return  # refused: caught
    assert not torch.allclose(got, torch.stack([torch.diag(x.exp()) for x in xs]))


def test_mutation_mask_fill_outside_the_selection_is_caught(monkeypatch):
    from funcbwd import masks

    original = masks.masked_getitem

    def zero_fill(mode, x, index):
        out = original(mode, x, index)
        if out is None:
            return None
        mask = mode.selection(out)
        return mode.select(x * 1, mask)  # the whole x, negative entries included

    monkeypatch.setattr(masks, "masked_getitem", zero_fill)
    xs = inputs(5)
    got = run_inplace(lambda: torch.func.vmap(jacrev(mask_write))(xs))  # sqrt(-1) is nan: 0 / nan = nan in the gradient
    assert torch.isnan(got).any()


def test_mutation_ctx_attributes_dropped_is_caught(monkeypatch):
    original = oldstyle._converted.__wrapped__

    def forgetful(cls):
        conv = original(cls)
        setup = conv.setup_context

        def setup_context(ctx, inputs, output):
            setup(ctx, inputs, output)
            ctx.alpha = 1.0

        conv.setup_context = staticmethod(setup_context)
        return conv

    monkeypatch.setattr(oldstyle, "_converted", forgetful)
    xs = inputs(4)
    got = run_inplace(lambda: torch.func.vmap(jacrev(old_function))(xs))
    assert not torch.allclose(got, per_sample_jacobians(lambda x: (x * 3.0).sin(), xs))


def test_mutation_writes_on_copies_in_place_is_caught(monkeypatch):
    from funcbwd import rules

    def in_place(mode, func, args, kwargs):
        return func(*args, **kwargs)  # the write lands in the tensor autograd saved

    monkeypatch.setattr(rules, "_write_on_copy", in_place)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        funcbwd.vmap(jacrev(saved_overwrite))(inputs(4))


def temporary_view_rows(x):
    t = torch.zeros(x.shape[0], 2)
    rows = list(t.t())  # views of a temporary view (t.t()), gone after this line
    rows[0].copy_(x)
    rows[1].copy_(x.sin())
    return t


def test_views_of_a_temporary_view_are_rederived_by_the_mode_itself():
    xs = inputs(3)
    got = run_inplace(lambda: torch.func.vmap(temporary_view_rows)(xs))  # no later stage
    torch.testing.assert_close(got, torch.stack([torch.stack([x, x.sin()], 1) for x in xs]))


def branchy(x):  # a branch on a per-sample value: only a per-sample loop runs it
    return x * 2 if x.sum() > 0 else x.sin()


@pytest.mark.parametrize("how", ["allow_inplace", "dropin"])
def test_vmap_of_vmap_of_a_value_read_runs_each_inner_entry(how):
    xs = torch.randn(2, B, 3, generator=torch.Generator().manual_seed(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerSampleLoopWarning)
        if how == "dropin":
            got = funcbwd.vmap(funcbwd.vmap(branchy))(xs)
        else:
            with funcbwd.allow_inplace():
                got = torch.func.vmap(torch.func.vmap(branchy))(xs)
    torch.testing.assert_close(got, torch.stack([torch.stack([branchy(x) for x in row])
                                                 for row in xs]))


# --- what the caller owns, what is refused, what is left behind ------------------------------
def _writes_caller_state(buf):
    def f(x):
        buf.copy_(x)  # a side effect on the caller's tensor, shared by every batch entry
        return buf * 2
    return f


def test_a_write_into_a_callers_tensor_is_refused_by_default_with_the_line():
    buf = torch.zeros(3)
    with pytest.raises(funcbwd.StateWriteError, match=r"test_inplace_mode.py:\d+.*state_writes"):
        funcbwd.vmap(_writes_caller_state(buf))(inputs(3))
    assert buf.tolist() == [0.0, 0.0, 0.0]  # refused before the write: nothing happened
    assert not torch._C._functorch.is_batchedtensor(buf)


def test_state_writes_discard_gives_the_callers_tensor_back():
    buf, xs = torch.zeros(3), inputs(3)
    got = funcbwd.vmap(_writes_caller_state(buf), state_writes="discard")(xs)
    torch.testing.assert_close(got, xs * 2)  # each entry saw its own write
    assert buf.tolist() == [0.0, 0.0, 0.0]  # the caller's, as it was
    assert not torch._C._functorch.is_batchedtensor(buf)


def test_state_writes_loop_is_the_per_sample_loop_exactly():
    def f(x):
        state.mul_(0.5).add_(x)  # each entry reads back the writes of the entries before it
        return state * 1.0

    xs = inputs(3)
    state = torch.zeros(3)
    want = torch.stack([f(x) for x in xs])
    after = state.clone()
    state = torch.zeros(3)
    with pytest.warns(PerSampleLoopWarning):
        got = funcbwd.vmap(f, state_writes="loop")(xs)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(state, after)


def test_a_callers_tensor_converted_in_place_of_itself_is_the_callers_too():
    class Holder:
        cache = torch.zeros(4)

    m = Holder()

    def f(x):
        m.cache = m.cache.to(x)  # llama's pattern: a no-op conversion, reassigned
        m.cache[:2] = x
        return m.cache * 2

    xs = inputs(2)
    with pytest.raises(funcbwd.StateWriteError):
        funcbwd.vmap(lambda x: vjp(f, x)[1](torch.ones(4))[0])(xs)
    got = funcbwd.vmap(lambda x: vjp(f, x)[1](torch.ones(4))[0], state_writes="discard")(xs)
    torch.testing.assert_close(got, torch.full((B, 2), 2.0))
    assert m.cache.tolist() == [0.0] * 4


def test_a_write_through_data_of_a_callers_tensor_is_never_wrong():
    buf = torch.zeros(3)

    def f(x):
        buf.data.copy_(x)  # .data: an alias of the caller's tensor the mode cannot batch
        return buf * 2

    with pytest.raises(inplace.InplaceModeError, match="through a view or .data"):
        run_inplace(lambda: torch.func.vmap(f)(inputs(3)), state_writes="discard")
    assert buf.tolist() == [0.0, 0.0, 0.0]
    # the ladder ends in the per-sample loop, each entry from the caller's state as it was
    with pytest.warns(PerSampleLoopWarning):
        got = funcbwd.vmap(f, state_writes="discard")(inputs(3))
    torch.testing.assert_close(got, inputs(3) * 2)
    assert buf.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(funcbwd.StateWriteError):
        funcbwd.vmap(f)(inputs(3))
    assert buf.tolist() == [0.0, 0.0, 0.0]


_DATA_ASSIGNED = """
import torch, funcbwd
from torch.func import jacrev
p = torch.nn.Parameter(torch.zeros(3))
def f(x):  # nflows' ActNorm: initialize from the first batch through .data
    p.data = torch.log(1.0 / x.std(0))
    return torch.exp(p) * x
try:
    funcbwd.vmap(f)(torch.randn(2, 4, 3))
except funcbwd.errors.FuncbwdError as e:
    print(type(e).__name__, str(e).split(":")[0])
print(p.tolist())
# no vmap: the eager stage (funcbwd.eager) runs f as eager autograd does, .data assignment included
x = torch.randn(4, 3)
got = funcbwd.jacrev(f)(x)
print(p.tolist() == torch.log(1.0 / x.std(0)).tolist())
p.data.zero_()
print(torch.allclose(got, torch.autograd.functional.jacobian(f, x)))
"""


def test_a_data_assignment_of_a_tracked_value_is_refused_not_a_crash():
    """``p.data = v`` with ``v`` a transform's value crashes plain torch 2.13 (segmentation fault;
    a child process, so a regression fails this test instead of killing the run)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _DATA_ASSIGNED], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("StateWriteError a .data assignment"), lines
    assert lines[1] == "[0.0, 0.0, 0.0]"  # nothing landed
    assert lines[2:] == ["True", "True"], lines  # jacrev without vmap: eager autograd's answer


def test_a_data_assignment_under_the_loop_policy_is_the_per_sample_loop():
    p = torch.nn.Parameter(torch.zeros(3))

    def f(x):
        p.data = torch.log(1.0 / x.std(0))
        return torch.exp(p) * x

    xs = torch.randn(2, 4, 3)
    with pytest.warns(PerSampleLoopWarning):
        got = funcbwd.vmap(f, state_writes="loop")(xs)
    mine = p.detach().clone()
    p.data.zero_()
    want = torch.stack([f(x) for x in xs])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(mine, p.detach())


def test_an_unbatched_input_written_is_the_callers_state_too():
    def f(x, y):
        y.add_(1)  # y is the caller's (in_dims None): a loop would add once per entry
        z = torch.zeros(3)
        z.copy_(x)
        return z

    y = torch.zeros(3)
    with pytest.raises(funcbwd.StateWriteError) as e:
        funcbwd.vmap(f, in_dims=(0, None))(inputs(3), y)
    assert "\n" not in str(e.value)
    assert y.tolist() == [0.0, 0.0, 0.0]  # refused before the write
    with pytest.warns(PerSampleLoopWarning):
        got = funcbwd.vmap(f, in_dims=(0, None), state_writes="loop")(inputs(3), y)
    torch.testing.assert_close(got, inputs(3))
    assert y.tolist() == [3.0, 3.0, 3.0]  # once per entry, as the loop adds


def test_a_retry_never_repeats_what_torchs_attempt_wrote():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("rm", torch.ones(3))

        def forward(self, x):
            self.rm.mul_(0.9)  # unbatched: torch's own vmap runs it...
            self.rm.add_(0.1 * x)  # ...then refuses this (a per-sample value)
            return x * self.rm

    m, xs = M(), inputs(3)
    got = funcbwd.vmap(m, state_writes="discard")(xs)
    torch.testing.assert_close(got, xs * (0.9 + 0.1 * xs))
    assert m.rm.tolist() == [1.0, 1.0, 1.0]  # not 0.81: nothing of a failed attempt remains
    again = funcbwd.vmap(m, state_writes="discard")(xs)  # what worked, replayed
    torch.testing.assert_close(again, got)
    assert m.rm.tolist() == [1.0, 1.0, 1.0]


def test_random_state_is_put_back_before_the_retry():
    def f(x):
        noise = torch.randn(3)
        z = torch.zeros(3)
        z.copy_(x + noise)
        return z

    torch.manual_seed(5)
    got = funcbwd.vmap(f, randomness="same")(inputs(3))
    torch.manual_seed(5)
    noise = torch.randn(3)
    torch.testing.assert_close(got, inputs(3) + noise)


def test_a_batched_mask_selection_into_a_reduction_runs_per_sample_and_says_so():
    def f(x):
        return x[x > 0].sum()

    with pytest.raises(RuntimeError):
        torch.func.vmap(f)(inputs(4))
    # the mode refuses a selection reaching a reduction (no silent wrong shape) ...
    with pytest.raises(inplace.InplaceModeError, match="elementwise"):
        run_inplace(lambda: torch.func.vmap(f)(inputs(4)))
    # ... so funcbwd.vmap ends in its per-sample loop, warned, equal to the loop
    with pytest.warns(PerSampleLoopWarning, match="once per batch entry"):
        got = funcbwd.vmap(f)(inputs(4))
    torch.testing.assert_close(got, torch.stack([f(x) for x in inputs(4)]))


def test_the_per_sample_loop_keeps_out_dims_and_randomness_same():
    def f(x):
        z = torch.zeros(3)
        z[0] = x.sum() + torch.rand(())  # the same draw for every entry under "same"
        return z if x.sum().item() > -1e9 else z  # a per-sample value read: only the loop runs it

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PerSampleLoopWarning)
        got = funcbwd.vmap(f, out_dims=1, randomness="same")(inputs(3))
    torch.manual_seed(0)
    r = torch.rand(())
    want = torch.stack([torch.cat([(x.sum() + r)[None], torch.zeros(2)]) for x in inputs(3)], 1)
    torch.testing.assert_close(got, want)


def test_nothing_is_left_behind_after_an_error():
    import torch._functorch.apis as apis

    def hopeless(x):  # fails batched and per sample alike
        raise RuntimeError("vmap: inplace arithmetic(self, *extra_args) is not possible because "
                           "there exists a Tensor `other` in extra_args that has more elements")

    vmap_impl, apply = apis.vmap_impl, torch.autograd.Function.__dict__["apply"]
    with pytest.raises(RuntimeError) as e:
        with funcbwd.allow_inplace():
            torch.func.vmap(hopeless)(inputs(4))
    assert "per-sample loop: RuntimeError" in e.value.__notes__[0]
    assert apis.vmap_impl is vmap_impl
    assert torch.autograd.Function.__dict__["apply"] is apply
    assert torch._C._len_torch_function_stack() == 0
    assert torch._C._functorch.get_dynamic_layer_stack_depth() == 0
    assert scope.current() == scope.Scope()


def test_code_that_works_plain_runs_plain_after_its_watched_first_call(monkeypatch):
    def f(x):
        return x.sin() * 2

    funcbwd.vmap(f)(inputs(3))  # the first call of a signature: watched (the caller's state)
    seen = _counting(monkeypatch, InplaceMode)
    _counting(monkeypatch, replay.Replay, seen)  # a replayed call counts as entering the mode
    out = funcbwd.vmap(f)(inputs(3))
    torch.testing.assert_close(out, inputs(3).sin() * 2)
    assert seen == []  # later calls of code that works plain never enter a mode ...
    funcbwd.vmap(factory_write)(inputs(2))
    assert seen  # ... the in-place code does (the spy sees it: the check can fail)


def test_a_signature_that_needed_the_mode_goes_straight_to_it():
    attempts = []

    def f(x):
        attempts.append(1)
        y = torch.zeros(2)
        y[0] = x.sum()
        return y

    g = funcbwd.vmap(f)
    g(inputs(2))
    first = len(attempts)
    g(inputs(2))  # the mode's plan replayed; a traced graph of f looked for (one trace)
    second = len(attempts)
    g(inputs(2))
    assert first == 2 and second == 4  # plain + retry; then the replay and the graph's trace
    assert len(attempts) - second <= 1  # then the plan or the graph only (the graph runs no f)


def _counting(monkeypatch, cls, calls=None):
    """A list that grows by one per op ``cls``'s handler sees (``calls``: share one list); the
    plain attempt's watch (which changes nothing) is not counted as the mode."""
    calls = [] if calls is None else calls
    original = cls.__torch_function__

    def spy(self, *a, **k):
        if not getattr(self, "watch", False):
            calls.append(1)
        return original(self, *a, **k)

    monkeypatch.setattr(cls, "__torch_function__", spy)
    return calls


def _replaying_no_promotion(monkeypatch):
    """The mutation: every Replay built from here on promotes nothing; returns the op counter
    of the full mode (which must then run instead)."""
    original = replay.Replay.__init__

    def promotes_nothing(self, plan, journal):
        original(self, plan, journal)
        self.promoted = frozenset()

    monkeypatch.setattr(replay.Replay, "__init__", promotes_nothing)
    return _counting(monkeypatch, InplaceMode)


def test_a_later_call_replays_the_plan_without_the_mode(monkeypatch):
    def f(x):  # a fresh function: nothing remembered yet
        y = torch.zeros(3, 3)
        y.diagonal().copy_(x.exp())
        return y * 2

    xs = inputs(3)
    funcbwd.vmap(f)(xs)
    full, replayed = _counting(monkeypatch, InplaceMode), _counting(monkeypatch, replay.Replay)
    got = funcbwd.vmap(f)(xs * 2)
    torch.testing.assert_close(got, torch.stack([torch.diag(x.exp()) * 2 for x in xs * 2]))
    assert replayed and not full


def test_mutation_a_plan_that_promotes_nothing_is_caught(monkeypatch):
    def f(x):
        y = torch.zeros(4)
        y[1:3] = x * 2
        return y

    xs = inputs(2)
    funcbwd.vmap(f)(xs)
    full = _replaying_no_promotion(monkeypatch)
    got = funcbwd.vmap(f)(xs)  # the replay fails as vmap fails; the full mode runs it
    torch.testing.assert_close(got, torch.stack([factory_write(x) for x in xs]))
    assert full  # so the replay test above can fail


def test_a_plan_whose_program_changed_runs_the_full_mode():
    flag = {"extra": False}

    def f(x):
        y = torch.zeros(2)
        if flag["extra"]:
            y = y + 1  # another op: the plan no longer fits
        y[0] = x.sum()
        return y

    xs = inputs(2)
    funcbwd.vmap(f)(xs)
    flag["extra"] = True
    got = funcbwd.vmap(f)(xs)
    torch.testing.assert_close(got, torch.stack([torch.stack([x.sum(), torch.ones(())])
                                                 for x in xs]))


def test_a_replayed_call_gives_the_callers_tensor_back():
    buf = torch.zeros(3)

    def f(x):
        buf.copy_(x)
        return buf * 2

    xs = inputs(3)
    funcbwd.vmap(f, state_writes="discard")(xs)
    got = funcbwd.vmap(f, state_writes="discard")(xs + 1)  # what worked, run again
    torch.testing.assert_close(got, (xs + 1) * 2)
    assert buf.tolist() == [0.0, 0.0, 0.0] and not torch._C._functorch.is_batchedtensor(buf)


def test_the_tool_imports_nothing_heavy():
    from tests.test_light_install import loaded, offenders

    probe = """
import json, sys
import torch, funcbwd
def g(x):
    y = torch.zeros(x.shape)
    y[0] = x[0] * 2
    return y
funcbwd.vmap(torch.func.jacrev(g))(torch.randn(2, 3))
with funcbwd.allow_inplace():
    torch.func.jacfwd(g)(torch.randn(3))
print(json.dumps(sorted(sys.modules)))
"""
    assert offenders(loaded(probe)) == []


def test_warnings_are_not_swallowed():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        funcbwd.vmap(factory_write)(inputs(2))
    assert all("funcbwd" not in str(x.message) for x in w)


class _WritesBothWays(torch.autograd.Function):  # old style; forward and backward write in place
    @staticmethod
    def forward(ctx, x):
        y = torch.zeros(x.shape)
        y[0] = x[0] * 2
        return y

    @staticmethod
    def backward(ctx, g):
        out = torch.zeros(g.shape)
        out[0] = g[0] * 2
        return out


def _vjp_of_writes(x, ct):
    return torch.func.vjp(_WritesBothWays.apply, x)[1](ct)[0]


def _want_writes(xs, cts):
    grads = torch.zeros_like(cts)
    grads[:, 0] = cts[:, 0] * 2
    return grads


def test_a_functions_later_calls_replay_its_plan(monkeypatch):
    xs, cts = inputs(3), inputs(3) + 1
    oldstyle.PLANS.clear()
    funcbwd.vmap(_vjp_of_writes)(xs, cts)
    full, replayed = _counting(monkeypatch, InplaceMode), _counting(monkeypatch, replay.Replay)
    got = funcbwd.vmap(_vjp_of_writes)(xs * 2, cts)
    torch.testing.assert_close(got, _want_writes(xs * 2, cts))
    assert replayed and not full  # the forward and backward replayed, no full mode


def test_mutation_a_functions_plan_that_promotes_nothing_runs_the_full_mode(monkeypatch):
    xs, cts = inputs(3), inputs(3) - 1
    oldstyle.PLANS.clear()
    funcbwd.vmap(_vjp_of_writes)(xs, cts)
    full = _replaying_no_promotion(monkeypatch)
    got = funcbwd.vmap(_vjp_of_writes)(xs, cts)  # each replay fails; the full mode runs it
    torch.testing.assert_close(got, _want_writes(xs, cts))
    assert full  # so the replay test above can fail


def test_a_function_that_writes_its_argument_is_right_on_every_call():
    """torchaudio's ``dcshift`` writes its input through masks and returns it: the second call
    (when the ladder tries the traced graph) once ran the graph on the caller's argument and
    shifted it again (0.5 off, silently)."""
    def shift(w):
        mask = w > 0.5
        w[mask] = (w[mask] * 0.1).clamp(max=0.5)
        w[~mask] = (w[~mask] + 0.5).clamp(min=-1, max=1)
        return w

    from funcbwd import ladder

    ladder.WORKED.clear()  # what the same code learned earlier (another test) is not reused
    xs = inputs(3)
    want = torch.stack([shift(x.clone()) for x in xs])
    for _ in range(3):
        mine = xs.clone()
        got = funcbwd.vmap(shift)(mine)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(mine, want)  # the argument written as the loop writes it


def test_mutation_the_graph_check_writing_the_argument_is_caught(monkeypatch):
    from funcbwd import ladder

    monkeypatch.setattr(ladder._Arguments, "restore", lambda self: False)
    with pytest.raises(AssertionError):
        test_a_function_that_writes_its_argument_is_right_on_every_call()
