"""The ``hooks`` strategy: correctness under vmap, torch's C++ nodes, the off switch, and
reliability when a backward formula raises (the thread's "disabled after it, even if the backward
raises")."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.func import vjp, vmap

from funcbwd import internals
from funcbwd_lab import legacy
from funcbwd_lab.ops import registry, inject
from funcbwd_lab.run import outcomes, runner
from funcbwd_lab.strategies import get_strategy
from funcbwd_lab.strategies.hooks import (HookSet, functionalize_backward, functionalize_prehook,
                                      install_hooks)

STRATEGY = "hooks"
NONSQUARE = "3x5 k=1"  # diag's sample that takes the in-place copy_ branch


@pytest.fixture
def st():
    return get_strategy(STRATEGY)


# ------------------------------------------------------------------------------ correctness
@pytest.mark.parametrize("op", ["diag", "index_select", "topk"])
def test_passes_vmap_cotangents_where_plain_fails(op):
    spec = registry.get_op(op)
    sample = spec.sample(NONSQUARE) if op == "diag" else spec.samples()[0]
    assert runner.run(spec, "vmap_cotangents", "plain", sample).status == "fail"
    r = runner.run(spec, "vmap_cotangents", STRATEGY, sample)
    assert r.status == "pass", r.message


def test_masked_select_shows_the_saved_tensor_limit_as_a_classified_failure():
    # zeros_like(input.expand(...)) is built from a saved tensor: not functional, and
    # masked_scatter_ mutates it with the functional grad.
    r = runner.run("masked_select", "vmap_cotangents", STRATEGY)
    assert (r.status, r.reason) == ("fail", "functionalization_assert"), r.message


def test_hooks_on_a_builtin_cpp_node_give_correct_vmapped_grads():
    x = torch.randn(4, 3)
    index = torch.tensor([0, 2, 2, 1])
    seen = []

    def f(x):
        out = torch.index_select(x, 0, index)
        hooks = install_hooks(out, stop_at=x)
        assert type(out.grad_fn).__name__ == "IndexSelectBackward0"
        assert hooks.node_count == 1
        # a spy registered after our pre-hook sees what the C++ formula will receive
        out.grad_fn.register_prehook(lambda g: seen.append(internals.is_functional(g[0])))
        return out

    out, vjp_fn = vjp(f, x)
    cts = torch.randn(5, *out.shape)
    got = vmap(vjp_fn)(cts)[0]
    expected = torch.stack([torch.zeros(4, 3).index_add_(0, index, c) for c in cts])
    torch.testing.assert_close(got, expected)
    assert seen == [True]  # functionalized under vmap
    vjp_fn(cts[0])
    assert seen == [True, False]  # plain without vmap


def test_strategy_wrap_of_builtin_op_matches_builtin_under_vmap(st):
    x = torch.randn(3, 5)
    wrapped = st.wrap(torch.diag)
    out, vjp_fn = vjp(lambda x: wrapped(x, 1), x)
    cts = torch.randn(4, *out.shape)
    got = vmap(lambda c: vjp_fn(c)[0])(cts)
    _, ref_fn = vjp(lambda x: torch.diag(x, 1), x)
    torch.testing.assert_close(got, vmap(lambda c: ref_fn(c)[0])(cts))


def _spy_spec(record: list):
    spec = registry.get_op("diag")

    def spy(grad, sizes, k):
        record.append((internals.is_functional(grad), internals.top_is_functionalize()))
        return spec.formula(grad, sizes, k)

    return dataclasses.replace(spec, formula=spy)


def test_hooks_return_early_when_vmap_is_inactive(st):
    record: list = []
    spec = _spy_spec(record)
    x = torch.randn(3, 5)
    fn = st.function(spec)
    out, vjp_fn = vjp(lambda x: fn(x, 1), x)
    ct = torch.randn(out.shape)
    before = internals.dispatch_state()
    (g,) = vjp_fn(ct)
    vmap(vjp_fn)(ct.expand(2, *ct.shape))
    assert record == [(False, False), (True, True)]
    torch.testing.assert_close(g, torch.zeros(3, 5).diagonal_scatter(ct, 1))
    # the pre-hook itself: no vmap -> None, nothing pushed
    assert functionalize_prehook((ct,)) is None
    assert internals.dispatch_state() == before


def test_hooks_do_not_break_plain_autograd():
    x = torch.randn(3, 5, requires_grad=True)
    y = functionalize_backward(legacy.function_for("diag").apply)(x, 1)
    (y * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(x.grad, torch.zeros(3, 5).diagonal_scatter(torch.arange(3.0), 1))


def test_each_node_is_hooked_at_most_once(st):
    x = torch.randn(3, 5)
    sets: list[HookSet] = []

    def f(x):
        out = legacy.diag(x.sin(), 1)
        sets.extend([install_hooks(out, stop_at=x), install_hooks(out, stop_at=x)])
        return out

    twice = functionalize_backward(f)  # a third install, through the decorator
    out, vjp_fn = vjp(twice, x)
    first, second = sets
    assert (first.node_count, first.live_hooks(), second.node_count) == (2, 4, 0)
    cts = torch.randn(3, *out.shape)
    got = vmap(lambda c: vjp_fn(c)[0])(cts)
    expected = torch.stack([torch.zeros(3, 5).diagonal_scatter(c, 1) * x.cos() for c in cts])
    torch.testing.assert_close(got, expected)
    assert st.bookkeeping() == {"functionalize_levels": []}


def test_hooks_leave_a_callers_own_functionalize_level_alone():
    # vmap(functionalize(vjp_fn)): grads arrive functional at the caller's (top) level, so the
    # pre-hook adds nothing and the post-hook must not pop the caller's level.
    x = torch.randn(3, 5)
    levels = []

    def f(x):
        out = functionalize_backward(legacy.function_for("diag").apply)(x.sin(), 1)
        # a spy after our post-hook: the grad it passes on must still be the caller's
        out.grad_fn.register_hook(lambda gi, go: levels.append(internals.functional_level(gi[0])))
        return out

    out, vjp_fn = vjp(f, x)
    cts = torch.randn(2, *out.shape)
    got = vmap(torch.func.functionalize(vjp_fn))(cts)[0]
    assert levels == [2]  # Vmap(1) > Functionalize(2): the caller's level, not unwrapped
    expected = torch.stack([torch.zeros(3, 5).diagonal_scatter(c, 1) * x.cos() for c in cts])
    torch.testing.assert_close(got, expected)


def test_under_functionalize_of_vmap_hooks_hit_torchs_nesting_limit():
    # functionalize(vmap(functionalize(f))) with a factory in f asserts in torch itself (no hooks
    # involved); hooks recreate that nesting, so the cell fails, classified, and leaves no trace.
    x = torch.randn(3, 5)
    out, vjp_fn = vjp(functionalize_backward(lambda x: legacy.diag(x, 1)), x)
    with pytest.raises(RuntimeError) as info:
        torch.func.functionalize(vmap(vjp_fn))(torch.randn(2, *out.shape))
    assert outcomes.classify(info.value) == "functionalization_assert"
    # builtin-only graphs (no factory in a formula) nest fine
    out, vjp_fn = vjp(functionalize_backward(lambda x: x.sin() * 2), x)
    cts = torch.randn(2, *out.shape)
    got = torch.func.functionalize(vmap(vjp_fn))(cts)[0]
    torch.testing.assert_close(got, cts * 2 * x.cos())


def test_torch_own_jacrev_reaches_the_hooks():
    # hooks sit on the graph, so torch.func.jacrev (not just the strategy's) is reached
    x = torch.randn(3, 5)
    jac = torch.func.jacrev(functionalize_backward(lambda x: legacy.diag(x, 1)))(x)
    torch.testing.assert_close(jac, torch.func.jacrev(lambda x: torch.diag(x, 1))(x))


def test_hookset_remove_takes_the_hooks_off():
    x = torch.randn(3, 5, requires_grad=True)
    y = legacy.diag(x.sin(), 1)
    hooks = install_hooks(y, stop_at=x)
    assert hooks.node_count == 2  # the legacy node and SinBackward0; AccumulateGrad skipped
    assert hooks.live_hooks() == 4
    with hooks:
        pass
    assert hooks.live_hooks() == 0


# ------------------------------------------------------------------------------ reliability
# Raising formulas at every point x scenario x strategy: tests/test_reliability.py (funcbwd_lab.ops.inject).
# Here, what only hooks can get wrong: hooks left on (or removed from) the graph.
def test_hooks_stay_exactly_installed_after_a_raising_backward(st):
    spec = inject.raising_op("after_last_op")
    fn = legacy.function_for(spec).apply
    holder: list[HookSet] = []

    def f(x):
        out = fn(x, 1)
        holder.append(install_hooks(out, stop_at=x))
        return out

    out, vjp_fn = vjp(f, torch.randn(3, 5))
    with pytest.raises(inject.InjectedError):
        vmap(vjp_fn)(torch.randn(2, *out.shape))
    (hooks,) = holder
    assert hooks.live_hooks() == 2 * hooks.node_count == 2  # none removed, none added
    hooks.remove()
    assert hooks.live_hooks() == 0
    assert st.bookkeeping() == {"functionalize_levels": []}


def test_the_engine_drops_a_level_a_node_left_pushed():
    # What the design relies on for "disabled even if the backward raises": post-hooks do not
    # run when a node raises, but the engine restores the interpreter stack around every node.
    stacks = []

    def f(x):
        y = x.sin().cos()
        y.grad_fn.register_prehook(lambda g: internals.push_functionalize() and None)
        y.grad_fn.next_functions[0][0].register_prehook(
            lambda g: stacks.append(internals.format_stack()))
        return y

    _, vjp_fn = vjp(f, torch.randn(3))
    before = internals.dispatch_state()
    vmap(vjp_fn)(torch.randn(2, 3))
    assert stacks == ["Vmap(1)"]
    assert internals.dispatch_state() == before
