"""The ``whole`` strategy: the whole vjp_fn functionalized under vmap; its reach (only its own
vjp/grad/jacrev), torch's C++ nodes, and reliability when a backward formula raises."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.func import vmap

from funcbwd import internals
from funcbwd_lab import legacy
from funcbwd_lab.ops import registry
from funcbwd_lab.run import outcomes, runner
from funcbwd.errors import BadInputError
from funcbwd_lab.strategies import get_strategy
# the reliability harness is shared with the hooks tests (same checks, other strategy)
NONSQUARE = "3x5 k=1"  # diag's sample that takes the in-place copy_ branch

STRATEGY = "whole"


@pytest.fixture
def st():
    return get_strategy(STRATEGY)


@pytest.mark.parametrize("op", ["diag", "index_select", "topk"])
def test_passes_vmap_cotangents(op):
    spec = registry.get_op(op)
    sample = spec.sample(NONSQUARE) if op == "diag" else spec.samples()[0]
    r = runner.run(spec, "vmap_cotangents", STRATEGY, sample)
    assert r.status == "pass", r.message


def test_the_backward_is_functionalized_only_under_vmap(st):
    record = []
    spec = registry.get_op("diag")

    def spy(grad, sizes, k):
        record.append((internals.is_functional(grad), internals.top_is_functionalize()))
        return spec.formula(grad, sizes, k)

    fn = st.function(dataclasses.replace(spec, formula=spy))
    out, vjp_fn = st.vjp(lambda x: fn(x, 1), torch.randn(3, 5))
    ct = torch.randn(out.shape)
    (g,) = vjp_fn(ct)
    vmap(vjp_fn)(ct.expand(2, *ct.shape))
    assert record == [(False, False), (True, True)]
    torch.testing.assert_close(g, torch.zeros(3, 5).diagonal_scatter(ct, 1))


def test_reaches_torch_cpp_nodes(st):
    x, index = torch.randn(4, 3), torch.tensor([0, 2, 2, 1])
    seen = []

    def f(x):
        out = torch.index_select(x, 0, index)
        out.grad_fn.register_prehook(lambda g: seen.append(internals.is_functional(g[0])))
        return out

    out, vjp_fn = st.vjp(f, x)
    cts = torch.randn(5, *out.shape)
    got = vmap(vjp_fn)(cts)[0]
    torch.testing.assert_close(got, torch.stack([torch.zeros(4, 3).index_add_(0, index, c) for c in cts]))
    assert seen == [True]


def test_torch_own_jacrev_is_not_reached_but_whole_jacrev_is(st):
    x = torch.randn(3, 5)
    f = lambda x: legacy.diag(x, 1)  # noqa: E731
    expected = torch.func.jacrev(lambda x: torch.diag(x, 1))(x)
    with pytest.raises(RuntimeError) as info:
        torch.func.jacrev(f)(x)
    assert outcomes.classify(info.value) == "vmap_inplace"
    torch.testing.assert_close(st.jacrev(f)(x), expected)


def test_jacrev_and_grad_match_torch_on_tuple_outputs_and_argnums(st):
    x, y = torch.randn(3), torch.randn(3)
    f = lambda x, y: (x * y, (x.sin() * 2).sum())  # noqa: E731
    got, ref = st.jacrev(f, argnums=(0, 1))(x, y), torch.func.jacrev(f, argnums=(0, 1))(x, y)
    for g_row, r_row in zip(got, ref):
        for g, r in zip(g_row, r_row):
            torch.testing.assert_close(g, r)
    torch.testing.assert_close(st.jacrev(lambda x: x.cos())(x), torch.func.jacrev(torch.cos)(x))
    loss = lambda x, y: (x.sin() * y).sum()  # noqa: E731
    torch.testing.assert_close(st.grad(loss, argnums=1)(x, y), torch.func.grad(loss, argnums=1)(x, y))
    for g, r in zip(st.grad(loss, (0, 1))(x, y), torch.func.grad(loss, (0, 1))(x, y)):
        torch.testing.assert_close(g, r)


def test_bad_input_names_what_was_wrong(st):
    x = torch.randn(3)
    with pytest.raises(BadInputError, match="argnums 2"):
        st.grad(lambda x: x.sum(), argnums=2)(x)
    with pytest.raises(BadInputError, match="one-element tensor"):
        st.grad(lambda x: x * 2)(x)
    with pytest.raises(BadInputError, match="non-empty tuple"):
        st.jacrev(lambda x: x * 2, argnums=())(x)


# ------------------------------------------------------------------------------ reliability
# Raising formulas at every point x scenario: tests/test_reliability.py (funcbwd_lab.ops.inject).
def test_no_functionalize_level_outlives_a_vjp_fn_call(st):
    out, vjp_fn = st.vjp(lambda x: legacy.diag(x, 1), torch.randn(3, 5))
    vmap(vjp_fn)(torch.randn(2, *out.shape))
    assert st.bookkeeping() == {"functionalize_levels": []}
