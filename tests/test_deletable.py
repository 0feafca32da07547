"""The deletable-branches table (funcbwd.measure.deletable): its verdicts come from computed cells,
and each condition can fail (a bypassed mechanism, an extra slow fallback, a data-dependent
control, the fast path without any mechanism, a cost above the limit).

First samples, a few scenarios, no timing except one smoke run (timings are never asserted).
"""

from __future__ import annotations

import json
import math

import pytest

from funcbwd.measure import deletable as D
from funcbwd.ops import registry
from funcbwd.strategies import provenance
from funcbwd.strategies.per_formula import PerFormula

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
    problems, unjudged, judged = D.judge(cells, spec, Bypass(), smp, ["vmap_cotangents"])
    assert cells.by_strategy["bypass"][(smp[0].name, "vmap_cotangents")].status == "pass"
    assert judged == 1 and not unjudged
    assert problems and "bypass's mechanism did not run" in problems[0]
    # control: the real per_formula on the same cell has no such problem
    assert not D.judge(cells, spec, "per_formula", smp, ["vmap_cotangents"])[0]


def test_a_slow_fallback_the_hand_written_path_does_not_take_is_not_deletable():
    row = _row("live_linalg_matrix_exp_differential_jvp_1", ["per_formula", "traced"], ["vmap_jvp"])
    pf, traced = row["strategies"]["per_formula"], row["strategies"]["traced"]
    assert pf["verdict"].startswith("not deletable: slow fallback in vmap_jvp"), pf["verdict"]
    assert "aten::copy" in pf["verdict"]
    assert traced["verdict"] == "deletable", traced  # the copy elided: no fallback
    assert row["counted"] is False  # the forward use of a site counted as backward


def test_cells_are_checked_against_the_out_of_place_path():
    st = D.against_out_of_place("traced")
    assert st.name == "traced" and type(st).__mro__[1] is type(D.get_strategy("traced"))
    assert st.reference().name == "handfixed" and D.get_strategy("traced").reference().name == "plain"


def test_verdict_rules():
    assert D.verdict([], [], 3, 1.1) == "deletable"
    assert D.verdict([], [], 3, None) == "deletable"
    assert D.verdict([], [], 3, 1.3) == "not deletable: cost 1.30x above 1.2x"
    assert D.verdict([], ["the out-of-place path fails x too"], 0, 1.0).startswith("undetermined")
    assert D.verdict([], ["the out-of-place path fails x too"], 2, 1.0) == "deletable"
    assert D.verdict(["fails a", "data-dependent (b)"], [], 3, 1.0) == "not deletable: data-dependent (b)"


def _synthetic(verdicts: list[tuple[str, str, bool, float | None]]) -> dict:
    rows = [{"op": f"op{i}", "site": f"f#{i}", "kind": kind, "counted": counted,
             "strategies": {"traced": {"verdict": v, "cost_ratio": r, "unjudged": []}}}
            for i, (kind, v, counted, r) in enumerate(verdicts)]
    return {"rows": rows, "strategies": ["traced"], "timed": True}


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
    cost = D.measure_cost(registry.get_op("live_take_backward_1"), ["traced"], batch=4, rounds=2,
                          target_s=0.002, max_number=5)
    assert set(cost) == {"handfixed", "traced"}
    assert cost["handfixed"]["ratio"] == pytest.approx(1.0)
    assert all(c["rounds"] == 2 and c["median_s"] > 0 and not c["error"] for c in cost.values())
    assert math.isfinite(cost["traced"]["ratio"])


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys):
    from funcbwd.cli import deletable as cli
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
    with pytest.raises(Exception, match="unknown op"):
        cli.main(p.parse_args(["--ops", "nope", "--no-timing", "--quiet"]))
