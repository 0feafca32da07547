"""The design review's decision (funcbwd_lab.studies.review.review) and its rendering (funcbwd_lab.studies.review.decision).

The pick is computed from evidence, never typed: each test changes the evidence and watches the
pick, the sentences or the counts follow (a mutation the check must see). Counts come from cells
over every sample, with fixes only where the strategy's own mechanism ran.
"""

from __future__ import annotations

import copy

import pytest

from funcbwd_lab.studies.review import review
from funcbwd_lab.studies.review import text as review_text
from funcbwd_lab.run.runner import CellResult


def _cell(op, sc, st, status, sample="s0", reason="", fb=(), ran=True):
    return CellResult(op, sample, sc, st, status, reason=reason, fallback_ops=list(fb),
                      mechanism="ran" if ran else "plain path", mechanism_ran=ran,
                      message="boom" if status == "fail" else "")


# plain fails diag/vmap (both samples) and prod/vmap; passes diag/jacrev.
CELLS = [
    _cell("diag", "vmap", "plain", "fail", reason="vmap_inplace"),
    _cell("diag", "vmap", "plain", "fail", "s1", reason="vmap_inplace"),
    _cell("diag", "jacrev", "plain", "pass"),
    _cell("prod", "vmap", "plain", "fail", reason="data_dependent"),
    # a: fixes diag/vmap on both samples, through the slow fallback; prod stays data-dependent
    _cell("diag", "vmap", "a", "pass", fb=["aten::copy."]),
    _cell("diag", "vmap", "a", "pass", "s1", fb=["aten::copy."]),
    _cell("diag", "jacrev", "a", "pass", ran=False),
    _cell("prod", "vmap", "a", "fail", reason="data_dependent"),
    # b: passes diag/vmap on s0 only: the cell (worst over samples) fails
    _cell("diag", "vmap", "b", "pass"),
    _cell("diag", "vmap", "b", "fail", "s1", reason="other"),
    _cell("diag", "jacrev", "b", "pass", ran=False),
    _cell("prod", "vmap", "b", "fail", reason="data_dependent"),
    # c: passes diag/vmap without its mechanism running: not a fix
    _cell("diag", "vmap", "c", "pass", ran=False),
    _cell("diag", "vmap", "c", "pass", "s1", ran=False),
    _cell("diag", "jacrev", "c", "pass", ran=False),
    _cell("prod", "vmap", "c", "fail", reason="data_dependent"),
]


def test_matrix_evidence_counts_cells_over_every_sample_and_needs_the_mechanism():
    ev = review.matrix_evidence(CELLS)
    assert ev["plain"]["plain_failures"] == 2
    assert ev["a"]["fixes"] == 1 and ev["a"]["fallback_cells"] == 1 and ev["a"]["no_fallback"] == 1
    assert ev["b"]["fixes"] == 0, "one failing sample makes the cell fail"
    assert ev["c"]["fixes"] == 0 and ev["c"]["without_mechanism"] == 2, "a pass without the mechanism is no fix"
    # mutation: the same pass with the mechanism ran is a fix
    ran = [_cell(r.op, r.scenario, r.strategy, r.status, r.sample, r.reason, r.fallback_ops, True)
           if r.strategy == "c" else r for r in CELLS]
    assert review.matrix_evidence(ran)["c"]["fixes"] == 1


def test_unsolved_cells_are_those_no_candidate_passes():
    assert review.unsolved_cells(CELLS, ["a", "b", "c"]) == [
        {"op": "prod", "reason": "data_dependent", "scenarios": ["vmap"], "builtin_passes": []}]
    fixed = CELLS + [_cell("prod", "vmap", "d", "pass")]
    assert review.unsolved_cells(fixed, ["a", "d"]) == []
    # a cell whose truth is zero (every candidate uninformative) is no evidence, not unsolved, and
    # never a fix where plain fails
    zero = [_cell("sort", "hess", "plain", "fail", reason="vmap_inplace"),
            *[_cell("sort", "hess", st, "uninformative") for st in ("a", "b")]]
    assert review.unsolved_cells(zero, ["a", "b"]) == []
    assert review.matrix_evidence(zero)["a"]["fixes"] == 0


def test_basis_says_which_samples():
    from funcbwd_lab.run.runner import run

    assert review.basis(CELLS)["samples"] == "some"  # not registered sample names
    first = [run("diag", "vmap_cotangents", "plain")]
    assert review.basis(first)["samples"] == "first"
    assert "the first sample of each op" in review.basis_text(review.basis(first))


def _evidence(**changes) -> review.Evidence:
    """Synthetic evidence: x and y fix everything; y has fewer fallback-free cells; z fixes less."""
    base = {"fixes": 10, "plain_failures": 10, "wrong": 0, "applicable": 20, "leaks": 0, "checked": 16,
            "no_fallback": 18, "new_ops": 0, "cost_vs_handfixed": 1.2, "cost_vs_builtin": 1.5,
            "vmap_off_us": 0.5, "vmap_off_noise_us": 3.0, "ops_timed": ["diag", "topk"],
            "without_mechanism": 0}
    st = {"x": dict(base), "y": {**base, "no_fallback": 12}, "z": {**base, "fixes": 7},
          "w": {**base, "new_ops": 9}, "builtin": {**base, "vmap_off_us": -40.0}}
    for key, value in changes.items():
        name, field = key.split("__")
        st[name][field] = value
    return review.Evidence(basis={"samples": "all", "ops": ["diag"], "scenarios": ["vmap"],
                                  "strategies": list(st), "sample_runs": 40, "cells": 20},
                           strategies=st, unsolved=[{"op": "prod", "reason": "data_dependent",
                                                     "scenarios": ["vmap"], "builtin_passes": ["vmap"]}],
                           sources={"costs": "bench.json", "probes": "live"}, candidates=["w", "x", "y", "z"])


def test_decision_pick_follows_the_evidence():
    d = review.decision(_evidence())
    assert d.pick == "x" and d.ranking == ["x", "w", "y", "z"]
    assert {r["strategy"]: r["behind_on"] for r in d.rows} == {"x": "", "w": "new_ops", "y": "no_fallback",
                                                               "z": "fixes"}
    # mutations: the evidence changes, so does the pick
    assert review.decision(_evidence(x__leaks=1)).pick == "w"
    assert review.decision(_evidence(y__no_fallback=19)).pick == "y"
    assert review.decision(_evidence(x__wrong=2)).pick == "w"


def test_timings_only_break_ties():
    d = review.decision(_evidence(w__new_ops=0, w__cost_vs_handfixed=1.1))
    assert d.pick == "w" and d.rows[0]["ahead_of_next_by"] == "cost_vs_handfixed"
    # a faster candidate that fixes less still loses
    assert review.decision(_evidence(z__cost_vs_handfixed=0.5)).pick == "x"


def test_sentences_are_written_from_the_numbers():
    d = review.decision(_evidence())
    s1, s2, s3 = d.sentences
    assert s1.startswith("Pick `x`: over all samples, it fixes 10 of the 10 cells")
    assert "with no wrong result" in s1 and "the most of any candidate" not in s1  # w ties on it
    assert "`y` passes fewer cells without vmap's slow fallback (12 vs 18 cells)" in s2
    assert "`z` fixes fewer of the cells where plain fails (7 vs 10 cells)" in s2
    assert "`w` ranks second, ahead of `y` on passes without slow fallback" in s2
    assert "1.20x the hand-fixed formula's time and 1.50x builtin's" in s3
    assert "prod (data-dependent shape or control flow: vmap; torch's builtin passes 1 of them)" in s3
    unmeasured = {f"{st}__{f}": None for st in ("w", "x", "y", "z")
                  for f in ("leaks", "cost_vs_handfixed", "cost_vs_builtin", "vmap_off_us")}
    mutated = review.decision(_evidence(**unmeasured))
    assert mutated.pick == "x"
    assert "not measured" in mutated.sentences[2] and "raising backwards" not in mutated.sentences[0]
    assert any("below zero beyond the run's spread (`builtin`)" in n for n in d.notes)
    noisy = review.decision(_evidence(builtin__vmap_off_us=-2.0))  # within its 3 µs spread
    assert any("`builtin` are within the run's spread" in n for n in noisy.notes)


def test_value_text_units():
    by = review.CRITERION
    assert review_text.value_text(by["fixes"], 3, {"plain_failures": 5}) == "3/5"
    assert review_text.value_text(by["cost_vs_builtin"], 1.234) == "1.23x"
    assert review_text.value_text(by["vmap_off_us"], 2.34) == "2.3"
    assert review_text.value_text(by["new_ops"], None) == review_text.NOT_MEASURED


def test_evidence_round_trip_and_compare(tmp_path):
    ev = _evidence()
    path = tmp_path / "ev.json"
    review.save_evidence(ev, path)
    back = review.load_evidence(path)
    assert back == ev and review.compare_evidence(ev, back) == []
    other = copy.deepcopy(ev)
    other.strategies["x"]["fixes"] = 9
    assert review.compare_evidence(ev, other) == ["x.fixes: 10 != 9"]
    other.strategies["x"]["fixes"] = 10
    other.strategies["x"]["cost_vs_builtin"] = 9.0
    assert review.compare_evidence(ev, other) == [] and review.compare_evidence(ev, other, timing=True)


def test_load_evidence_rejects_other_files(tmp_path):
    from funcbwd.errors import BadInputError

    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(BadInputError, match="not review evidence"):
        review.load_evidence(tmp_path / "x.json")
    with pytest.raises(BadInputError, match="tools/update_readme.py"):
        review.load_evidence(tmp_path / "missing.json")


def test_cost_evidence_without_a_bench_is_not_measured():
    costs, source = review.cost_evidence(None)
    assert costs == {} and "not measured" in source


def test_rank_strategies_orders_by_criteria_and_says_why():
    c = review.CRITERION
    crit = [c["fixes"], c["no_fallback"], c["new_ops"]]
    ev = {"a": {"fixes": 4, "no_fallback": 3, "new_ops": 0}, "b": {"fixes": 4, "no_fallback": 5, "new_ops": 5},
          "c": {"fixes": 2, "no_fallback": 9, "new_ops": 0}, "d": {"fixes": None}}
    rows = review.rank_strategies(ev, crit)
    assert [r["strategy"] for r in rows] == ["b", "a", "c", "d"]
    assert rows[0]["ahead_of_next_by"] == "no_fallback" and rows[1]["ahead_of_next_by"] == "fixes"


# ------------------------------------------------------------------------------ rendering
def test_decision_block_renders_the_decision():
    from funcbwd_lab.studies.review import decision as dv

    d = review.decision(_evidence())
    block = dv.block(d)
    assert repr(block).startswith("Decision: x (runner-up: w)")
    page = block._repr_html_()
    assert 'data-pick="x"' in page and "fixes over plain [cells]" in page and "10/10" in page
    assert "Counts over all samples" in page
    md = dv.markdown(d)
    assert md.startswith("**Decision: `x`** (runner-up `w`).") and "| 1 | `x` |" in md


def test_decision_chart_is_categorical_with_units():
    from funcbwd_lab.studies.review import decision as dv

    fig = dv.chart(review.decision(_evidence()))
    bars = [t for t in fig.data if t.type == "bar" and t.showlegend is False]
    assert len(bars) == len(review.CRITERIA)
    assert {t.name for t in fig.data if t.showlegend} == {"pick", dv.BEHIND, "other candidate"}
    layout = fig.layout.to_plotly_json()
    titles = {ax.get("title", {}).get("text") for k, ax in layout.items() if k.startswith("xaxis")}
    assert {"cells", "x time", "µs/node", "ops", "cases"} <= titles
    assert fig.layout.title.x == 0 and fig.layout.title.xanchor == "left"


def test_heatmap_legend_is_categorical():
    from funcbwd_lab.views import display

    fig = display.matrix_heatmap(CELLS)
    assert fig.data[0].type == "heatmap" and fig.data[0].showscale is False
    legend = {t.name for t in fig.data[1:]}
    assert {"FAIL", "pass (slow fallback)", "pass, mechanism not run"} <= legend
    assert fig.layout.xaxis.title.text == "strategy" and fig.layout.yaxis.title.text == "op · scenario"


def test_explorer_stored_view_is_static_html_not_the_widget_repr():
    pytest.importorskip("ipywidgets")
    from funcbwd_lab.views.widgets import Explorer

    view = lambda op, st, sc: f"<pre>{op}/{st}/{sc}</pre>"  # noqa: E731
    ex = Explorer(CELLS, ops=["diag", "prod"], strategies=["plain", "a", "b", "c"],
                  scenarios=["vmap", "jacrev"], op="diag", strategy="plain", scenario="vmap",
                  trace_view=view, graph_view=view)
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "run this cell" in bundle["text/html"] and "diag / vmap: every strategy" in bundle["text/html"]
    assert "VBox(" not in bundle["text/plain"] and "VBox(" not in bundle["text/html"]
    assert "FAIL 0/2" in bundle["text/html"]  # plain's failing cell, drawn as a failure


# ------------------------------------------------------------------------------ the compiled row
def _with_compiled(**timings) -> review.Evidence:
    e = _evidence()
    e.strategies["compiled"] = {**e.strategies["x"], "fixes": 0, "leaks": None, "new_ops": None,
                                "cost_vs_handfixed": None, "cost_vs_builtin": None,
                                "vmap_off_us": None, "vmap_off_noise_us": None, **timings}
    return e


def test_compiled_is_a_reference_row_whose_untimed_columns_say_why():
    from funcbwd_lab.studies.review import decision as dv

    d = review.decision(_with_compiled())
    assert [r["strategy"] for r in d.references] == ["builtin", "compiled"]
    assert "compiled" not in d.ranking  # a reference, never ranked
    note = [n for n in d.notes if n.startswith("`compiled`'s timings are not measured")]
    assert note and "slow strategy" in note[0] and "data/compiled.json" in note[0]
    row = dv.table_rows(d)[-1]
    assert row[:2] == ["ref", "compiled"] and row[-3:] == [review_text.NOT_MEASURED] * 3
    # mutations: timed, the note goes; with no bench at all, the sentence says so instead
    timed = review.decision(_with_compiled(cost_vs_handfixed=1.0, cost_vs_builtin=1.1, vmap_off_us=0.1))
    assert not [n for n in timed.notes if "timings are not measured" in n]
    unmeasured = {f"{st}__{f}": None for st in ("w", "x", "y", "z", "builtin")
                  for f in ("cost_vs_handfixed", "cost_vs_builtin", "vmap_off_us")}
    e = _evidence(**unmeasured)
    e.strategies["compiled"] = _with_compiled().strategies["compiled"]
    assert not [n for n in review.decision(e).notes if "timings are not measured" in n]


def test_decision_text_fits_100_columns_with_every_reference():
    from funcbwd_lab.studies.review import decision as dv

    d = review.decision(_with_compiled())
    text = dv.text(d)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "compiled" in text and text.count("passes without slow fallback [cells]") >= 1
    assert dv.text(d, width=70).count("\nrank ") > text.count("\nrank ")  # narrower: more blocks


def test_bench_text_names_the_untimed_slow_strategy():
    from funcbwd_lab.studies.bench import text as bench_text

    results = {"config": {"strategies": ["plain", "builtin", "handfixed", "traced"]}}
    line = bench_text.format_untimed(results)
    assert line.startswith("not timed here: compiled (a slow strategy") and "data/compiled.json" in line
    results["config"]["strategies"].append("compiled")  # mutation: timed after all
    assert bench_text.format_untimed(results) == ""


def test_the_compiled_answer_is_computed_from_the_study():
    import json
    from pathlib import Path

    from funcbwd_lab.studies.review import compiled_answer as ca

    data = json.loads((Path(__file__).resolve().parents[1] / "data" / "compiled.json").read_text())
    n = len(data["outcomes"])
    ran = sum(r["mechanism_ran"] for r in data["outcomes"])
    assert ca.answer(data)[0].startswith(f"No, not on torch {data['meta']['torch']}: in {ran} of {n} cells")
    kinds = ca.failure_kinds(data)
    failing = [r for r in data["outcomes"] if r["status"] not in ("pass", "not_applicable")]
    assert sum(sum(k["cells"].values()) for k in kinds) == len(failing)
    assert all(k["reason"] and k["meaning"] for k in kinds)
    mutated = copy.deepcopy(data)  # mutation: one cell where the compiled graph ran the formula
    row = next(r for r in mutated["outcomes"] if r["status"] == "fail")
    row.update(status="pass", mechanism_ran=True)
    assert f"in {ran + 1} of {n} cells" in ca.answer(mutated)[0]
    drops = ca.drop_control(data)
    probe = copy.deepcopy(data)  # mutation: compiled returns twice the gradient (the backward ran)
    probe["drop_probe"][0]["compiled"] = dict(probe["drop_probe"][0]["eager"])
    assert drops[0]["dropped"] and not ca.drop_control(probe)[0]["dropped"]
    assert max(len(line) for line in ca.text(data).splitlines()) <= 100
