"""The deletable-branches table (funcbwd_lab.studies.deletable.deletable): its verdicts come from computed cells,
and each condition can fail (a bypassed mechanism, an extra slow fallback, a data-dependent
control, the fast path without any mechanism, a cost above the limit).

First samples, a few scenarios, no timing except one smoke run (timings are never asserted).
"""

from __future__ import annotations

import json
import math

import pytest

from funcbwd_lab.studies.deletable import deletable as D
from funcbwd_lab.ops import registry
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.per_formula import PerFormula

FEW = ["vmap_cotangents", "vmap_all_args", "vmap_jvp"]


def _row(op: str, strategies, scenarios=FEW, **kw):
    site = next(s for s in D.live_sites() if s.op_name == op)
    return D.site_row(site, strategies, samples="first", time_it=False, scenarios=scenarios, **kw)


def test_every_live_site_is_in_the_table_once():
    sites = D.live_sites()
    assert len({s.op_name for s in sites}) == len(sites) == len(registry.op_names("live")) == 43
    counted = [s for s in sites if s.counted and s.kind in ("backward", "jvp")]
    assert len(counted) == D.IN_PLACE_SITES
    assert sum(s.kind == "control" for s in sites) == 6


def test_the_fast_path_with_a_mechanism_is_deletable_and_without_one_is_not():
    row = _row("live_take_backward_1", ["traced", "plain"])
    traced, plain = row["strategies"]["traced"], row["strategies"]["plain"]
    assert traced["verdict"] == "deletable", traced
    assert all(c["status"] == "pass" and c["mechanism_ran"] for c in traced["cells"])
    # mutation: the fast path as written (no mechanism) is judged by the same cells
    assert plain["verdict"].startswith("not deletable: fails vmap_cotangents"), plain["verdict"]
    assert "vmap_inplace" in plain["verdict"]


def test_a_data_dependent_control_is_not_deletable():
    row = _row("live_prod_backward_2", ["traced"])
    assert row["kind"] == "control"
    assert row["strategies"]["traced"]["verdict"].startswith("not deletable: data-dependent")


class Bypass(PerFormula):
    """A broken strategy: passes by running the out-of-place path, its mechanism never acts."""

    name = "bypass"

    def run_formula(self, op, args):
        provenance.record(self.name, "bypassed: ran the out-of-place formula", False)
        return op.handfixed(*args)


def test_a_pass_without_the_mechanism_is_not_deletable():
    spec = registry.get_op("live_take_backward_1")
    cells = D.Cells(spec.name)
    smp = spec.samples()[:1]
    j = D.judge(cells, spec, Bypass(), smp, ["vmap_cotangents"])
    assert cells.by_strategy["bypass"][(smp[0].name, "vmap_cotangents")].status == "pass"
    assert j.judged == 1 and not j.unjudged
    assert j.problems and "bypass's mechanism did not run" in j.problems[0]["text"]
    assert j.problems[0]["reason"] == "mechanism_not_run"
    # control: the real per_formula on the same cell has no such problem
    assert not D.judge(cells, spec, "per_formula", smp, ["vmap_cotangents"]).problems


def test_a_slow_fallback_the_hand_written_path_does_not_take_is_not_deletable():
    row = _row("live_linalg_matrix_exp_differential_jvp_1", ["per_formula", "traced"], ["vmap_jvp"])
    pf, traced = row["strategies"]["per_formula"], row["strategies"]["traced"]
    assert pf["verdict"].startswith("not deletable: slow fallback in vmap_jvp"), pf["verdict"]
    assert "aten::copy" in pf["verdict"]
    assert pf["blocker"]["reason"] == "slow_fallback" and pf["blocker"]["ops"] == ["aten::copy"]
    assert traced["verdict"] == "deletable", traced  # the copy elided: no fallback
    assert row["counted"] is False  # the forward use of a site counted as backward


def test_cells_are_checked_against_the_out_of_place_path():
    st = D.against_out_of_place("traced")
    assert st.name == "traced" and type(st).__mro__[1] is type(D.get_strategy("traced"))
    assert st.reference() == "handfixed" and D.get_strategy("traced").reference() == "plain"


def test_verdict_rules():
    assert D.verdict([], [], 3, 1.1) == "deletable"
    assert D.verdict([], [], 3, None) == "deletable"
    assert D.verdict([], [], 3, 1.3) == "not deletable: cost 1.30x above 1.2x"
    assert D.blocker([], 3, 1.3)["reason"] == "cost" and D.blocker([], 3, 1.1) is None
    assert D.verdict([], ["the out-of-place path fails x too"], 0, 1.0).startswith("undetermined")
    assert D.blocker([], 0, 1.0)["reason"] == "undetermined"
    assert D.verdict([], ["the out-of-place path fails x too"], 2, 1.0) == "deletable"
    problems = [D._problem("other", "a", "fails a"), D._problem("data_dependent", "b", "data-dependent (b)")]
    assert D.verdict(problems, [], 3, 1.0) == "not deletable: data-dependent (b)"
    assert D.blocker(problems, 3, 1.0)["reason"] == "data_dependent"


def _synthetic(verdicts: list[tuple[str, str, bool, float | None]]) -> dict:
    def blocker(v, r):
        reason = "cost" if v.startswith("not deletable: cost") else "other"
        return None if v == "deletable" else {"reason": reason, "where": "", "ops": [], "text": v,
                                              "cost_ratio": r}

    rows = [{"op": f"op{i}", "site": f"f#{i}", "kind": kind, "counted": counted,
             "strategies": {"traced": {"verdict": v, "cost_ratio": r, "unjudged": [], "blocker": blocker(v, r),
                                       "shared_fallbacks": []}}}
            for i, (kind, v, counted, r) in enumerate(verdicts)]
    return {"schema": D.SCHEMA, "rows": rows, "strategies": ["traced"], "timed": True}


def test_headline_counts_the_in_place_sites_and_keeps_controls_apart():
    rows = ([("backward", "deletable", True, 1.0)] * 20 + [("jvp", "deletable", True, 1.1)] * 10
            + [("jvp", "not deletable: fails x", True, None)] * 4
            + [("jvp", "not deletable: cost 1.30x above 1.2x", True, 1.3)] * 2
            + [("control", "deletable", True, 1.0)]
            + [("control", "not deletable: data-dependent", True, None)] * 5
            + [("jvp", "deletable", False, 9.0)])
    text = D.headline(_synthetic(rows), "traced")
    assert text.startswith("30 of 36 hand-written branches in PyTorch's backward/JVP formulas would be "
                           "unnecessary under traced; median cost 1.00x, worst 1.10x"), text
    assert "; 2 more pass every check but cost more than 1.2x the hand-written path" in text
    assert "Negative controls (data-dependent): 1 of 6 deletable" in text


def test_cost_is_measured_interleaved_against_the_hand_written_path():
    cost = D.measure_cost(registry.get_op("live_take_backward_1"), ["traced"], D.BASELINE, batch=4,
                          rounds=2, target_s=0.002, max_number=5)
    assert set(cost) == {"handfixed", "traced"}
    assert cost["handfixed"]["ratio"] == pytest.approx(1.0)
    assert all(c["rounds"] == 2 and c["median_s"] > 0 and not c["error"] for c in cost.values())
    assert math.isfinite(cost["traced"]["ratio"])


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys):
    from funcbwd_lab.studies.deletable import cli
    import argparse

    p = argparse.ArgumentParser()
    cli.configure(p)
    out = tmp_path / "d.json"
    args = p.parse_args(["--ops", "live_rms_norm_rstd_jvp_1", "--samples", "first", "--no-timing",
                         "--strategies", "traced", "--out", str(out), "--quiet"])
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["schema"] == D.SCHEMA and [r["op"] for r in data["rows"]] == ["live_rms_norm_rstd_jvp_1"]
    assert data["rows"][0]["strategies"]["traced"]["verdict"] == "deletable"
    assert "rms_norm_rstd_jvp#1" in printed  # the headline, wrapped to 100 columns:
    assert " ".join(data["headlines"]["traced"].split()) in " ".join(printed.split())
    assert " ".join(D.CRITERION.split()) in " ".join(printed.split())
    with pytest.raises(Exception, match="unknown op"):
        cli.main(p.parse_args(["--ops", "nope", "--no-timing", "--quiet"]))


# ------------------------------------------------------------------------------ the fallback rule
def _cell(fallback_ops, status="pass", mechanism_ran=True):
    return {"sample": "s0", "scenario": "vmap_cotangents", "status": status, "reason": "", "message": "",
            "fallback_ops": list(fallback_ops), "seconds": 0.0, "mechanism": "m", "mechanism_ran": mechanism_ran}


def _judge_site(generic_ops, handwritten_ops) -> tuple[str, dict]:
    j = D.Judgement()
    D.judge_cell(_cell(generic_ops), _cell(handwritten_ops), lambda: "fail", "traced", j)
    return D.verdict(j.problems, j.unjudged, j.judged, 1.0), j


def test_a_shared_fallback_is_deletable_and_counted_apart_a_generic_only_one_is_not():
    """CRITERION on two synthetic sites: vmap falls back on aten::put for both paths (deleting the
    branch loses nothing: deletable, listed apart), or on aten::copy only for the generic path
    (not deletable, classified slow_fallback with the op)."""
    shared, j = _judge_site(["aten::put"], ["aten::put"])
    assert shared == "deletable" and j.shared == [{"where": "vmap_cotangents [s0]", "ops": ["aten::put"]}]
    generic, j = _judge_site(["aten::copy", "aten::put"], ["aten::put"])
    assert generic == "not deletable: slow fallback in vmap_cotangents [s0] (aten::copy)"
    assert j.problems[0]["reason"] == "slow_fallback" and j.problems[0]["ops"] == ["aten::copy"]
    assert j.shared == [{"where": "vmap_cotangents [s0]", "ops": ["aten::put"]}]
    # the headline counts the shared one apart
    rows = [{"op": "a", "site": "shared#1", "kind": "backward", "counted": True, "baseline_cells": [_cell(["aten::put"])],
             "strategies": {"traced": {"verdict": "deletable", "cost_ratio": 1.0, "unjudged": [], "blocker": None,
                                       "cells": [_cell(["aten::put"])], "shared_fallbacks": j.shared}}}]
    table = {"schema": D.SCHEMA, "rows": rows, "strategies": ["traced"], "timed": True}
    assert "1 of 1 hand-written branches" in D.headline(table, "traced")
    assert "(1 of them shares a slow fallback with today's hand-written path)" in D.headline(table, "traced")
    assert D.shared_fallback_sites(table, "traced") == [("shared#1", ["aten::put"])]


def test_the_fallback_rule_can_fail(monkeypatch):
    """Mutation: flip the rule (every fallback disqualifies, or none does); the verdicts of the
    two synthetic sites must change, so the test above could not pass with the other rule."""
    monkeypatch.setattr(D, "fallback_split", lambda mine, base: (sorted(set(mine)), []))
    assert _judge_site(["aten::put"], ["aten::put"])[0].startswith("not deletable: slow fallback")
    monkeypatch.setattr(D, "fallback_split", lambda mine, base: ([], sorted(set(mine))))
    assert _judge_site(["aten::copy"], [])[0] == "deletable"


def test_the_criterion_is_stated_once_and_the_docs_quote_it():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "live-sites.md").read_text()
    quoted = " ".join(line[2:] for line in docs.splitlines() if line.startswith("> "))
    assert " ".join(D.CRITERION.split()) in " ".join(quoted.split())
    assert f"{D.COST_LIMIT}x" in D.CRITERION


# ------------------------------------------------------------------------------ the saved table
def _saved() -> dict:
    from pathlib import Path

    return json.loads((Path(__file__).resolve().parents[1] / "data" / "live-deletable.json").read_text())


def test_the_saved_verdicts_follow_from_their_saved_records():
    """Every saved verdict, blocker and shared-fallback list is what the criterion gives on the
    saved problems and cells (the file cannot say one thing and hold another)."""
    saved = _saved()
    D.check_schema(saved)
    assert D.rejudge(json.loads(json.dumps(saved))) == saved
    for r in saved["rows"]:
        for st, v in r["strategies"].items():
            assert v["shared_fallbacks"] == D.shared_fallbacks(v, r["baseline_cells"]), r["site"]
            assert all(p["reason"] in D.BLOCKERS for p in v["problems"])


def test_rejudging_a_table_applies_todays_criterion(small_table, monkeypatch):
    """Mutation: rejudge the small table with a rule under which every fallback disqualifies;
    the site that shares its fallback with the hand-written path is no longer deletable."""
    table = json.loads(json.dumps(small_table))
    assert D.rejudge(json.loads(json.dumps(table))) == table
    monkeypatch.setattr(D, "fallback_split", lambda mine, base: (sorted(set(mine)), []))
    flipped = D.rejudge(table)
    take = next(r for r in flipped["rows"] if r["site"] == "take_backward#1")["strategies"]["traced"]
    assert take["blocker"]["reason"] == "slow_fallback" and "aten::put" in take["blocker"]["ops"]


def test_an_old_schema_is_refused_with_what_to_do():
    from funcbwd import BadInputError

    with pytest.raises(BadInputError, match="recompute it: python -m funcbwd_lab deletable"):
        D.check_schema({"schema": "funcbwd-deletable/1"})


# ------------------------------------------------------------------------------ the views
VIEW_OPS = ["live_take_backward_1", "live_index_backward_1", "live_linalg_eig_backward_2",
            "live_prod_backward_2", "live_rms_norm_rstd_jvp_1"]


@pytest.fixture(scope="module")
def small_table() -> dict:
    """A real table of five sites (first samples, a few scenarios, no timing): a deletable site
    with a shared fallback, a failing one, one with a generic-only fallback, a control, a clean one."""
    return D.run_table(["traced", "per_formula"], ops=VIEW_OPS, samples="first", time_it=False,
                       scenarios=FEW + ["vmap_jvp_all_args"])


def _not_cleared_sites(table, st="traced"):
    return {b["site"] for b in D.not_cleared(table, st)}


def test_the_views_list_only_the_sites_not_cleared_with_a_classified_reason(small_table):
    from funcbwd_lab.studies.deletable import render as live

    blocked = D.not_cleared(small_table, "traced")
    deletable_sites = {r["site"] for r in small_table["rows"] if r["strategies"]["traced"]["verdict"] == "deletable"}
    assert deletable_sites and blocked and not deletable_sites & _not_cleared_sites(small_table)
    assert all(b["reason"] in D.BLOCKERS for b in blocked)
    md, page = live.markdown(small_table), live.html_block(small_table)
    for site in deletable_sites:
        assert f"| `{site}` |" not in md and f"<code>{site}</code></td>" not in page
    for b in blocked:
        assert f"| `{b['site']}` | {b['kind']} | {live.reason_text(b)} |" in md
        assert live.reason_text(b) in page
    # no raw error text (messages stay in the JSON)
    for r in small_table["rows"]:
        for c in r["strategies"]["traced"]["cells"]:
            if len(c["message"]) > 40:
                assert c["message"][:40] not in md and c["message"][:40] not in page


def test_the_html_wraps_in_its_container(small_table):
    from funcbwd_lab.studies.deletable import render as live

    page = live.html_block(small_table)
    assert "table-layout:fixed;width:100%" in page and page.count("overflow-wrap:anywhere") > 5
    assert "<colgroup>" in page


def test_the_text_fits_100_columns_without_breaking_words(small_table):
    from funcbwd_lab.studies.deletable import render as live

    out = live.text(small_table)
    assert max(len(line) for line in out.splitlines()) <= 100, [l for l in out.splitlines() if len(l) > 100]
    words = set(out.split())
    for b in D.not_cleared(small_table, "traced"):
        assert b["site"] in words and all(op in " ".join(out.split()) for op in b["ops"])
    assert set(D.CRITERION.split()) <= words  # wrapped whole


def test_a_shared_fallback_site_is_shown_apart(small_table):
    from funcbwd_lab.studies.deletable import render as live

    shared = dict(D.shared_fallback_sites(small_table, "traced"))
    assert "take_backward#1" in shared and "aten::put" in shared["take_backward#1"], shared
    assert "take_backward#1" not in _not_cleared_sites(small_table)
    assert "share a slow fallback" in D.headline(small_table, "traced") or \
        "shares a slow fallback" in D.headline(small_table, "traced")
    assert "`take_backward#1` (" in live.markdown(small_table)
