"""Reliability: a backward formula that raises leaves nothing behind, in every strategy and
scenario where the strategy runs; strategies work from two threads at once."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.func import vjp, vmap

from funcbwd import internals
from funcbwd_lab.ops import inject
from funcbwd_lab.run import runner
from funcbwd_lab.run.scenarios import SCENARIOS, Case
from funcbwd_lab.strategies import available, get_strategy

FORMULA_STRATEGIES = [s for s in available() if s not in ("builtin", "compiled")]  # compiled: tests/test_compiled.py
SCENARIOS_RUN = ["vmap_cotangents", "vmap_all_args", "vjp_of_vjp", "grad_inside_vmap", "jacrev"]


def _builtin_vmap_vjp_is_correct() -> None:
    x = torch.randn(3, 5)
    _, fn = vjp(lambda t: torch.diag(t, 1), x)
    ct = torch.randn(4, 3)
    (g,) = vmap(fn)(ct)
    expected = torch.zeros(4, 3, 5)
    expected.diagonal(1, 1, 2).copy_(ct)
    torch.testing.assert_close(g, expected)


def _snapshot(strategy):
    return internals.dispatch_state(), get_strategy(strategy).bookkeeping()


@pytest.mark.parametrize("point", inject.POINTS)
@pytest.mark.parametrize("scenario", SCENARIOS_RUN)
@pytest.mark.parametrize("strategy", FORMULA_STRATEGIES)
def test_raising_formula_leaves_no_state(strategy, scenario, point):
    spec = inject.raising_op(point)
    before = _snapshot(strategy)
    with pytest.raises(BaseException) as info:
        SCENARIOS[scenario].run(Case(spec, inject.non_square_sample(), get_strategy(strategy)))
    after = _snapshot(strategy)
    assert before == after, before[0].describe_difference(after[0])
    # plain may fail on vmap's in-place check before reaching the injected failure
    assert isinstance(info.value, (inject.InjectedError, RuntimeError))
    _builtin_vmap_vjp_is_correct()
    # and a fixing strategy still works on the real formula afterwards
    if strategy != "plain":
        real = runner.run("diag", scenario, strategy, inject.non_square_sample())
        assert real.status == "pass", real.record()


@pytest.mark.parametrize("point", inject.POINTS)
@pytest.mark.parametrize("strategy", FORMULA_STRATEGIES)
def test_base_exception_in_formula_leaves_no_state(strategy, point):
    spec = inject.raising_op(point, base_exception=True)
    before = _snapshot(strategy)
    with pytest.raises((KeyboardInterrupt, RuntimeError)):
        SCENARIOS["vmap_cotangents"].run(Case(spec, inject.non_square_sample(), get_strategy(strategy)))
    assert _snapshot(strategy) == before
    _builtin_vmap_vjp_is_correct()


@pytest.mark.parametrize("strategy", FORMULA_STRATEGIES)
def test_user_code_raising_inside_vmapped_function_leaves_no_state(strategy):
    st = get_strategy(strategy)
    from funcbwd_lab import legacy

    before = _snapshot(strategy)
    x = torch.randn(3, 5)

    def user_fn(ct):
        _, fn = st.vjp(lambda t: st.function("diag")(t, 1), x)
        if strategy != "plain":  # plain raises vmap's in-place error here, which is fine too
            fn(ct)
        raise ValueError("user code failed after the backward")

    with pytest.raises(ValueError, match="user code failed"):
        vmap(user_fn)(torch.randn(4, 3))
    assert _snapshot(strategy) == before
    _builtin_vmap_vjp_is_correct()


def test_matrix_runner_reports_injected_failures_as_classified_cells():
    r = runner.run(inject.raising_op("mid_formula"), "vmap_cotangents", "per_formula",
                   inject.non_square_sample())
    assert r.status == "fail" and r.error_class == "InjectedError" and r.reason == "other"


@pytest.mark.parametrize("pair", [("per_formula", "plain"), ("per_formula", "traced"),
                                  ("hooks", "whole"), ("composite", "per_formula")])
def test_two_threads_with_different_strategies(pair):
    missing = [s for s in pair if s not in available()]
    if missing:
        pytest.skip(f"strategy not available: {missing}")
    from funcbwd_lab import legacy

    x = torch.randn(3, 5)
    cts = torch.randn(6, 3)
    expected = torch.zeros(6, 3, 5)
    expected.diagonal(1, 1, 2).copy_(cts)
    errors: list[BaseException] = []
    states: list[object] = []

    def work(name: str) -> None:
        try:
            st = get_strategy(name)
            before = internals.dispatch_state()
            for _ in range(15):
                _, fn = st.vjp(lambda t: st.function("diag")(t, 1), x)
                if name == "plain":  # plain cannot batch: loop, as users do
                    g = torch.stack([fn(c)[0] for c in cts])
                else:
                    (g,) = vmap(fn)(cts)
                torch.testing.assert_close(g, expected)
            states.append(before == internals.dispatch_state())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in pair]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert states == [True, True]
    _builtin_vmap_vjp_is_correct()
