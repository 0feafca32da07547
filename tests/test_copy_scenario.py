"""Objection 4 (issue 28): the aten::copy scenario, re-ranked from the saved matrix. Its rewrite
drops only aten::copy from the slow fallbacks (a mutation check), and on the saved data
per_formula ties traced on every matrix criterion while the pick stays traced on cost."""

from __future__ import annotations

from pathlib import Path

from funcbwd_lab.studies.review import copy_scenario, review

DATA = Path(__file__).resolve().parents[1] / "data"


def test_rewrite_drops_only_copy_from_fallbacks():
    recs = [{"status": "pass", "fallback_ops": ["aten::copy"], "message": ""},
            {"status": "pass", "fallback_ops": ["aten::copy", "aten::masked_scatter"], "message": ""},
            {"status": "fail", "fallback_ops": [], "message": "derivative for aten::copy is not implemented",
             "reason": "other"}]
    out = copy_scenario.rewrite(recs, copy_failures_pass=False)
    assert [r["fallback_ops"] for r in out] == [[], ["aten::masked_scatter"], []]
    assert out[2]["status"] == "fail"
    assert copy_scenario.rewrite(recs, copy_failures_pass=True)[2]["status"] == "pass"


def test_saved_matrix_ties_per_formula_and_the_pick_rests_on_cost():
    ev = review.load_evidence(DATA / review.EVIDENCE_FILE)
    s = copy_scenario.load(DATA, ev)
    today, after = s["values"]["today"], s["values"]["copy_failures_fail"]
    assert today["per_formula"]["no_fallback"] < today["traced"]["no_fallback"]
    assert after["per_formula"] == after["traced"]
    assert s["picks"]["copy_failures_fail"] == "traced"
    assert s["per_formula_cost"]["with_copy_rule"]["cost_vs_handfixed"] > \
        s["traced_cost"]["cost_vs_handfixed"]
