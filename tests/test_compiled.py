"""The ``compiled`` reference row (funcbwd_lab.strategies.compiled): torch.compile of the whole
transform call, legacy formula as written, with what dynamo compiled in its provenance.

* diag's non-square sample under vmap_cotangents is computed, classified and explained for each
  backend; prod (a pass) is compared with the per-sample loop and with torch's own gradient, and a
  deliberately wrong legacy formula shows that the pass does not come from the legacy formula.
* Mutations: a ``compiled`` whose transform does not compile is told apart by its provenance; a
  compiled call without the fresh compiler state hits dynamo's recompile limit and falls back.
* The recorder can see a captured autograd.Function (positive control), so "not in the graph" is
  an observation; the verdict logic, every branch.
* No leaked state: dispatch state, dynamo's code caches and graph-break log after each cell.

About 20 s on 2 cores (the inductor cell fails in dynamo before any C++ is generated).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from torch.func import vjp, vmap

from funcbwd import internals
from funcbwd.internals import dynamo
from funcbwd_lab.ops import registry
from funcbwd_lab.run import backward as scenarios
from funcbwd_lab.run import runner
from funcbwd.compare import check_close
from funcbwd_lab.strategies import get_strategy
from funcbwd_lab.strategies import compiled as C
from funcbwd_lab.studies.compiled import outcomes, report

NON_SQUARE = "3x5 k=1"
DATA = Path(__file__).resolve().parents[1] / "data" / report.FILE_NAME


def _cell(op, scenario, strategy, sample=None):
    with C.collecting_reports() as reports:
        r = runner.run(op, scenario, strategy, sample)
    return r, reports


def _composed_code(scenario_fn):
    return next(c for c in scenario_fn.__code__.co_consts
                if getattr(c, "co_name", "") == "composed")


@pytest.mark.parametrize("backend", C.BACKENDS)
def test_diag_non_square_vmap_cotangents_per_backend(backend):
    st = C.for_backend(backend)
    before = internals.dispatch_state()
    r, reports = _cell("diag", "vmap_cotangents", st, NON_SQUARE)
    assert internals.dispatch_state() == before
    # computed and classified: dynamo's inline path hands our forward(*args) the ctx
    assert (r.status, r.reason, r.error_class) == ("fail", "other", "InternalTorchDynamoError"), r.record()
    assert "AutogradFunctionContextVariable" in r.message
    assert r.mechanism == f"torch.compile[{backend}]: dynamo raised while tracing"
    assert not r.mechanism_ran
    (rep,) = reports
    assert rep.error_stage == "dynamo" and rep.graphs == 0 and not rep.transform_in_graph
    assert any("function_for" in b.where for b in rep.graph_breaks)
    # plain fails the same cell on vmap's in-place check: compile does not get that far
    assert runner.run("diag", "vmap_cotangents", "plain", NON_SQUARE).reason == "vmap_inplace"
    # reset after the cell: no compiled code kept, no graph-break log left
    assert dynamo.dynamo_cache_entries(_composed_code(scenarios.vmap_cotangents)) == 0
    assert dynamo.graph_break_reasons() == []


def test_prod_passes_on_torchs_formula_not_the_legacy_one():
    st = C.for_backend("eager")
    r, (rep,) = _cell("prod", "vmap_cotangents", st)
    assert r.status == "pass" and not r.mechanism_ran, r.record()  # compared with the loop
    assert rep.transform_in_graph and not rep.function_in_graph
    assert "without the legacy backward" in r.mechanism and C.DROP_ISSUE in r.mechanism
    # the result is torch's own gradient
    spec = registry.get_op("prod")
    case = scenarios.Case(spec, spec.samples()[0], st)
    (actual,) = scenarios.BACKWARD["vmap_cotangents"].run(case)
    x = spec.samples()[0].args[0]
    cts = torch.randn(3, generator=torch.Generator().manual_seed(100))  # the scenario's seed
    _, fn = vjp(torch.prod, x)
    check_close(actual, vmap(fn)(cts))
    # mutation: a wrong legacy formula (twice the gradient) changes plain, not compiled
    orig = spec.formula
    twice = dataclasses.replace(spec, name="prod_twice", formula=lambda *a: 2 * orig(*a))
    plain = runner.run(twice, "vmap_cotangents", "plain")  # agrees with its loop, not with torch
    assert (plain.status, plain.reason, plain.max_abs_err) == ("mismatch", "legacy_wrong", 0.0)
    ignores = runner.run(twice, "vmap_cotangents", st)  # torch's gradient whatever the formula says
    assert ignores.status == "pass" and ignores.legacy_wrong and ignores.max_abs_err > 0, ignores.record()
    assert not ignores.mechanism_ran


class NotCompiled(C.Compiled):
    """Mutation: the transform is not compiled (the base class's identity)."""

    name = "compiled_mutant"

    def transform(self, composed):
        return composed


def test_a_transform_that_does_not_compile_is_told_apart_by_provenance():
    real, reports = _cell("diag", "vmap_cotangents", C.for_backend("eager"), NON_SQUARE)
    mutant, none = _cell("diag", "vmap_cotangents", NotCompiled(), NON_SQUARE)
    assert "torch.compile[eager]" in real.mechanism and len(reports) == 1
    assert "torch.compile" not in mutant.mechanism and none == []
    assert mutant.mechanism == "legacy formula ran eagerly under vmap"
    assert (mutant.status, mutant.reason) == ("fail", "vmap_inplace")  # plain's failure
    assert not mutant.mechanism_ran and not real.mechanism_ran


def test_fresh_compiler_state_per_call_never_hits_the_recompile_limit():
    def f(x):
        return vmap(torch.sin)(x)

    def graphs():
        with dynamo.dynamo_recompile_limit(2):
            return [C.compile_call(f, "eager", torch.randn(n, 2))[1].graphs for n in (1, 2, 3)]

    assert graphs() == [1, 1, 1]
    assert dynamo.dynamo_cache_entries(f.__code__) == 0
    # mutation: no reset between calls: the third shape is past the limit and runs eagerly
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(dynamo, "fresh_compiler", contextlib.nullcontext)
            assert graphs() == [1, 1, 0]
    finally:
        torch.compiler.reset()


def test_the_recorder_sees_a_captured_autograd_function():
    # positive control: outside torch.func, dynamo captures a well-formed Function with its
    # backward (autograd_function_apply); under the transforms it does not
    fn = outcomes._probe_function(inplace=False).apply
    x = torch.randn(3, 5, requires_grad=True)
    _, rep = C.compile_call(lambda t: fn(t, 1), "eager", x)
    assert rep.function_in_graph and not rep.transform_in_graph
    _, rep = C.compile_call(lambda c: vmap(vjp(lambda t: fn(t, 1), x.detach())[1])(c), "eager",
                            torch.randn(4, 3))
    assert rep.transform_in_graph and not rep.function_in_graph


def test_drop_probe_shows_which_backward_ran():
    (twice, inplace) = outcomes.drop_probe(["eager"])
    assert twice["eager"]["err_vs_twice_torch"] == 0 < twice["eager"]["err_vs_torch"]
    assert twice["compiled"]["err_vs_torch"] == 0 < twice["compiled"]["err_vs_twice_torch"]
    assert "inplace arithmetic" in inplace["eager"]["error"]
    assert inplace["compiled"]["err_vs_torch"] == 0


def test_verdict_every_branch():
    def rep(**kw):
        return C.CompileReport("aot_eager", **kw)

    inside = C.GraphBreak("r", "f.py:1 in g", True)
    assert rep(function_in_transform_graph=True, transform_in_graph=True,
               function_in_graph=True).compiled_legacy_backward
    assert not rep(function_in_transform_graph=True, graph_breaks=[inside]).compiled_legacy_backward
    assert not rep(function_in_transform_graph=True, error="E: x", error_stage="run").compiled_legacy_backward
    texts = [rep(function_in_transform_graph=True).verdict(), rep().verdict(),
             rep(transform_in_graph=True).verdict(),
             rep(transform_in_graph=True, graph_breaks=[inside]).verdict(),
             rep(error="E", error_stage="dynamo").verdict(),
             rep(error="E", error_stage="backend").verdict(),
             rep(error="E", error_stage="run").verdict(),
             rep(error="E", error_stage="run", transform_in_graph=True).verdict()]
    assert len(set(texts)) == len(texts) and all(t.startswith("torch.compile[aot_eager]") for t in texts)


def test_registration_and_variants():
    st = get_strategy("compiled")
    assert st.backend == "aot_eager" and type(C.for_backend("aot_eager")) is type(st)
    assert [C.for_backend(b).name for b in C.BACKENDS] == ["compiled_eager", "compiled", "compiled_inductor"]
    assert "(inductor)" in C.for_backend("inductor").summary
    with pytest.raises(ValueError, match="unknown torch.compile backend 'cudagraphs'"):
        C.for_backend("cudagraphs")


@pytest.mark.skipif(not DATA.exists(), reason="data/compiled.json not generated yet")
def test_saved_study_renders_and_matches_a_fresh_cell():
    data = report.load(DATA)
    text = report.render(data)
    assert max(len(line) for line in text.splitlines()) <= report.WIDTH
    saved = next(r for r in data["outcomes"] if (r["backend"], r["op"], r["scenario"])
                 == ("eager", "diag", "vmap_cotangents"))
    fresh = outcomes.outcome("eager", "diag", "vmap_cotangents")
    keys = ("status", "reason", "error_class", "mechanism_ran", "verdict", "error_stage")
    assert {k: fresh[k] for k in keys} == {k: saved[k] for k in keys}
    assert json.loads(json.dumps(data)) == data


# ------------------------------------------------------------------------------ wrong compiled results
def test_a_wrong_compiled_result_is_recorded_not_timed(monkeypatch):
    """cost.measure with a compiled call that returns the wrong values (a mutation: eager's
    result plus one) records ``wrong`` and times nothing."""
    from funcbwd_lab.studies.compiled import cost

    real = cost.compiled_with_report

    def off_by_one(fn, backend):
        compiled, rep = real(fn, backend)
        return (lambda *a: tuple(t + 1 for t in compiled(*a))), rep

    monkeypatch.setattr(cost, "compiled_with_report", off_by_one)
    row = cost.measure("diag", "small", "eager", batch=4, pairs=3)
    assert "ratio" not in row and row["max_abs_err"] == pytest.approx(1.0)
    assert row["wrong"].startswith("compiled result differs from eager")
    assert "known torch bug" not in row["wrong"]  # diag under eager: no known bug explains it


@pytest.mark.skipif(not DATA.exists(), reason="data/compiled.json not generated yet")
def test_the_saved_cost_counts_inductors_wrong_index_select_as_wrong():
    """The compiled study's verdicts count pytorch#183986: inductor's index_select cases are wrong,
    cite the bug, are not timed, and the answer says so; no other case is wrong."""
    from funcbwd_lab.studies.review import compiled_answer

    data = report.load(DATA)
    wrong = [(r["backend"], r["variant"], r["op"], r["size"]) for r in data["cost"] if "wrong" in r]
    assert wrong == [("inductor", "whole call", "index_select", "small"),
                     ("inductor", "whole call", "index_select", "large")]
    for r in data["cost"]:
        if "wrong" in r:
            assert "ratio" not in r and r["max_abs_err"] > 1 and "pytorch#183986" in r["wrong"]
    row = next(c for c in compiled_answer.cost(data)
               if (c["variant"], c["backend"]) == ("whole call", "inductor"))
    assert row["wrong"] == 2 and row["timed"] == row["cases"] - 2
    assert any("wrong values in 2 of 10" in s and "pytorch#184488" in s
               for s in compiled_answer.answer(data))
    assert "WRONG: compiled result differs" in report.render(data)
