"""The OpInfo sweep harness on a handful of ops (not the whole database)."""

from __future__ import annotations

import json

import pytest
import torch

from funcbwd import cli, internals
from funcbwd.measure import coverage
from funcbwd.errors import BadInputError, UnknownNameError

OPS = "atan2,cummax,bernoulli,argmax"


@pytest.fixture(scope="module")
def records():
    before = internals.dispatch_state()
    recs = coverage.run_sweep(OPS, strategies=("builtin", "whole", "hooks"))
    assert internals.dispatch_state() == before  # the sweep leaves no functorch/dispatch state
    return recs


def _rec(records, op, strategy):
    return next(r for r in records if r["op"] == op and r["strategy"] == strategy)


def test_one_record_per_op_sample_strategy(records):
    assert {(r["op"], r["strategy"]) for r in records} == {
        (o, s) for o in OPS.split(",") for s in ("builtin", "whole", "hooks")}
    assert all(set(r) == set(coverage.RECORD_KEYS) for r in records)


def test_pass_runs_every_in_dims_choice(records):
    r = _rec(records, "atan2", "builtin")
    assert r["status"] == "pass" and r["fallback_ops"] == []
    assert r["in_dims_tried"] == r["in_dims_total"] == 8  # 3 tensors: (0,0,0) + 7 (-1, None) combos


def test_known_fallback_is_detected(records):
    # cummax's backward helper has no batching rule: vmap loops over the batch.
    assert _rec(records, "cummax", "builtin")["fallback_ops"] == ["aten::cummaxmin_backward"]


def test_warning_detection_agrees_with_disabling_the_fallback():
    (op,) = coverage.select_ops("cummax")
    p = coverage.prepare(op, next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=True))))
    ref = coverage._reference(p)
    with internals.vmap_fallback_disabled():
        r = coverage.run_strategy(p, "builtin", ref, max_in_dims=1)
    assert r["status"] == "fail" and "fallback" in r["message"]


def test_known_failure_is_classified(records):
    r = _rec(records, "bernoulli", "builtin")
    assert (r["status"], r["reason"]) == ("fail", "randomness")
    assert r["bad_in_dims"].startswith("(0")


def test_op_without_autograd_is_skipped(records):
    assert _rec(records, "argmax", "whole")["status"] == "skipped"


def test_budget_skips_remaining_in_dims():
    (rec, *_) = coverage.run_sweep("atan2", strategies="builtin", budget_s=1e-9)
    assert rec["timed_out"] and rec["in_dims_tried"] == 1 and rec["status"] == "pass"


def test_unavailable_strategy_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr(coverage, "available", lambda: ["plain", "builtin"])
    recs = coverage.run_sweep("atan2", strategies=("builtin", "hooks"))
    assert [r["status"] for r in recs] == ["pass", "unavailable"]


def test_in_dims_choices_follow_pytorch():
    choices, total = coverage.in_dims_choices(2, cap=None)
    assert choices == [(0, 0), (-1, -1), (-1, None), (None, -1)] and total == 4
    assert coverage.in_dims_choices(5, cap=8)[0][:1] == [(0,) * 5] and coverage.in_dims_choices(5, 8)[1] == 32


def _r(op, strategy, status, fallback=()):
    return {"op": op, "sample": "0", "strategy": strategy, "status": status, "reason": "",
            "message": "m", "error_class": "", "fallback_ops": list(fallback), "in_dims_tried": 1,
            "in_dims_total": 4, "bad_in_dims": "", "timed_out": False, "seconds": 0.1,
            "max_abs_err": None}


def test_summary_finds_regressions_fixes_and_removed_fallbacks():
    recs = [_r("a", "builtin", "pass"), _r("a", "whole", "fail"),
            _r("b", "builtin", "fail"), _r("b", "whole", "pass"),
            _r("c", "builtin", "pass", ["aten::x"]), _r("c", "whole", "pass"),
            _r("d", "builtin", "pass"), _r("d", "whole", "pass", ["aten::copy"])]
    s = coverage.summarize(recs)
    assert [(r["op"], r["strategy"]) for r in s["regressions"]] == [("a", "whole")]
    assert [r["op"] for r in s["fixes"]] == ["b"]
    assert s["fallback_removed"]["whole"] == ["c[0] (aten::x)"]
    assert s["fallback_introduced"]["whole"] == ["d[0] (aten::copy)"]
    assert s["counts"]["builtin"]["fallback"] == 1 and s["counts"]["whole"]["fail"] == 1


def test_files_round_trip(records, tmp_path):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    j.write_text(coverage.to_json(records, {"torch": torch.__version__}))
    c.write_text(coverage.to_csv(records))
    assert coverage.load(str(j)) == records
    assert [(r["op"], r["status"], r["fallback_ops"]) for r in coverage.load(str(c))] == \
        [(r["op"], r["status"], r["fallback_ops"]) for r in records]


def test_views(records):
    page = coverage.table_html(records)
    assert page.count("<tr>") == 1 + len({(r["op"], r["sample"]) for r in records})
    assert "funcbwdSort" in page and "http" not in page
    fig = coverage.summary_figure(records)
    assert {t.name for t in fig.data} >= {"pass", "fail", "slow fallback"}


def test_bad_input_names_the_choices(tmp_path):
    with pytest.raises(UnknownNameError, match="atan2"):
        coverage.run_sweep("no_such_op")
    with pytest.raises(BadInputError, match="valid for coverage"):
        coverage.run_sweep("atan2", strategies="per_formula")
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"a": 1}))
    with pytest.raises(BadInputError):
        coverage.load(str(bad))
    assert cli.main(["coverage", "--ops", "no_such_op"]) == 2
