"""The OpInfo sweep on a handful of ops (not the whole database): the run/ core's comparison,
classification, leak policy and distinct batch entries; the scoped batching rules; the Dask path
equal to the serial one; the per-op cost; summaries, files and views."""

from __future__ import annotations

import json
import math

import pytest
import torch

from funcbwd import cli, internals
from funcbwd.errors import BadInputError, UnknownNameError
from funcbwd.measure import coverage_cost, coverage_ops, coverage_summary, coverage_sweep
from funcbwd.strategies import get_strategy
from funcbwd.strategies.whole import Whole

OPS = "atan2,cummax,bernoulli,argmax"
STRATS = ("builtin", "whole", "hooks")


@pytest.fixture(scope="module")
def records():
    before = internals.dispatch_state()
    recs, costs = coverage_sweep.run_sweep(OPS, strategies=STRATS)
    assert internals.dispatch_state() == before  # the sweep leaves no functorch/dispatch state
    assert costs == []  # not asked for
    return recs


def _rec(records, op, strategy):
    return next(r for r in records if r["op"] == op and r["strategy"] == strategy)


def _prepared(name, max_in_dims=8):
    op = coverage_ops.op_by_id(name)
    return coverage_ops.prepare(op, coverage_ops.samples(op, False)[0], max_in_dims)


def test_one_record_per_op_sample_strategy(records):
    assert {(r["op"], r["strategy"]) for r in records} == {
        (o, s) for o in OPS.split(",") for s in STRATS}
    assert all(tuple(r) == coverage_sweep.RECORD_KEYS for r in records)
    assert {r["scenario"] for r in records} == {"vmap_all_args"}


def test_pass_runs_every_in_dims_choice_and_says_which_mechanism_ran(records):
    for s in STRATS:
        r = _rec(records, "atan2", s)
        assert r["status"] == "pass" and r["fallback_ops"] == [] and r["max_abs_err"] == 0.0
        assert r["in_dims_tried"] == r["in_dims_total"] == 8  # 3 tensors: (0,0,0) + 7 combos
        assert r["entries"] == "distinct" and r["mechanism_ran"]
    assert _rec(records, "atan2", "whole")["mechanism"] == "vjp_fn functionalized under vmap"
    assert _rec(records, "atan2", "hooks")["mechanism"] == "hooks pushed Functionalize under vmap"
    assert _rec(records, "atan2", "whole")["rules"] == ["aten::copy", "aten::as_strided_scatter"]
    assert _rec(records, "atan2", "builtin")["rules"] == []  # torch as is


def test_batch_entries_are_distinct_and_the_reference_is_a_per_sample_loop():
    p = _prepared("atan2")
    for e in p.entries:
        assert len(e) == coverage_ops.BATCH and not torch.equal(e[0], e[1])
    # entry b of the expected result is torch's unbatched vjp on entry b of every arg
    h = p.vjp_function(get_strategy("builtin"))
    exp = p.expected((0,) * len(p.entries))
    for b in range(p.batch):
        for got, want in zip(h(*[e[b] for e in p.entries]), exp):
            assert torch.allclose(got, want[b])


class _Off(Whole):
    """Mutation: grads slightly wrong."""

    name = "whole"

    def vjp(self, fn, *primals):
        out, vjp_fn = super().vjp(fn, *primals)
        return out, lambda ct: tuple(g + 1e-2 for g in vjp_fn(ct))


class _FirstEntry(Whole):
    """Mutation: every batch entry gets entry 0's cotangent (a 'works only for copies' bug)."""

    name = "whole"

    def vjp(self, fn, *primals):
        out, vjp_fn = super().vjp(fn, *primals)

        def first(ct):
            return vjp_fn(tuple(torch.zeros_like(c) + internals.first_batch_entry(c)
                                if internals.is_batched(c) else c for c in ct))

        return out, first


class _Leaky(Whole):
    """Mutation: leaves a Functionalize level on the stack."""

    name = "whole"

    def vjp(self, fn, *primals):
        internals.push_functionalize()
        return super().vjp(fn, *primals)


@pytest.mark.parametrize("broken, status, reason", [
    (_Off(), "mismatch", ""), (_FirstEntry(), "mismatch", ""), (_Leaky(), "fail", "leaked_state")])
def test_broken_strategies_fail_the_same_checks(broken, status, reason):
    p = _prepared("atan2")
    before = internals.dispatch_state()
    r = coverage_sweep.run_strategy(p, "atan2", "0", broken)
    assert (r["status"], r["reason"]) == (status, reason), r
    assert internals.dispatch_state() == before  # a leak is recorded, then restored
    if status == "mismatch":
        assert r["max_abs_err"] > 1e-4 and "in_dims=" in r["detail"]


def test_known_fallback_is_detected(records):
    # cummax's backward helper has no batching rule: vmap loops over the batch.
    assert _rec(records, "cummax", "builtin")["fallback_ops"] == ["aten::cummaxmin_backward"]


def test_warning_detection_agrees_with_disabling_the_fallback():
    p = _prepared("cummax", max_in_dims=1)
    with internals.vmap_fallback_disabled():
        r = coverage_sweep.run_strategy(p, "cummax", "0", "builtin")
    assert r["status"] == "fail" and "fallback" in r["message"]


def test_known_failure_is_classified(records):
    r = _rec(records, "bernoulli", "builtin")
    assert (r["status"], r["reason"]) == ("fail", "randomness")
    assert r["detail"].startswith("in_dims=(0")


def test_op_without_autograd_is_not_applicable(records):
    r = _rec(records, "argmax", "whole")
    assert r["status"] == "not_applicable" and "autograd" in r["message"]


def test_budget_skips_remaining_in_dims():
    (rec, *_), _ = coverage_sweep.run_sweep("atan2", strategies="builtin", budget_s=1e-9)
    assert rec["timed_out"] and rec["in_dims_tried"] == 1 and rec["status"] == "pass"
    assert "budget spent" in rec["detail"]


def test_missing_strategy_module_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr(coverage_ops, "available", lambda: ["plain", "builtin"])
    recs, _ = coverage_sweep.run_sweep("atan2", strategies=("builtin", "hooks"))
    assert [r["status"] for r in recs] == ["pass", "not_applicable"]
    assert "no module" in recs[1]["message"]


def test_scoped_rules_turn_the_as_strided_regressions_into_passes():
    # Without the rules functionalization emits as_strided_scatter, which vmap cannot batch.
    off, _ = coverage_sweep.run_sweep("as_strided", strategies=("builtin", "whole"), rules=False,
                                      max_in_dims=1)
    on, _ = coverage_sweep.run_sweep("as_strided", strategies=("builtin", "whole"), max_in_dims=1)
    by = {(r["op"], r["strategy"]): r for r in off}
    assert by[("as_strided", "builtin")]["status"] == "pass"
    assert (by[("as_strided", "whole")]["status"], by[("as_strided", "whole")]["reason"]) == \
        ("fail", "no_batch_rule")
    assert [r["status"] for r in on if r["op"] == "as_strided"] == ["pass", "pass"]
    from funcbwd import batching
    assert not batching.rules_active()  # scoped: gone after the sweep


def test_in_dims_choices_follow_pytorch():
    choices, total = coverage_ops.in_dims_choices(2, cap=None)
    assert choices == [(0, 0), (-1, -1), (-1, None), (None, -1)] and total == 4
    assert coverage_ops.in_dims_choices(5, cap=8)[0][:1] == [(0,) * 5]
    assert coverage_ops.in_dims_choices(5, 8)[1] == 32


def test_dask_workers_give_the_serial_records():
    kw = dict(strategies=STRATS, budget_s=None, max_in_dims=2)
    serial, _ = coverage_sweep.run_sweep("atan2,argmax", workers=0, **kw)
    dask, _ = coverage_sweep.run_sweep("atan2,argmax", workers=2, **kw)
    assert coverage_sweep.stable(dask) == coverage_sweep.stable(serial)
    assert len(serial) == 6 and sum(r["status"] == "pass" for r in serial) == 3


def test_a_failed_worker_gives_that_ops_failed_records():
    out = coverage_sweep.failed_op(["builtin", "whole"])("atan2", "timeout", "still running after 5 s")
    assert [(r["op"], r["strategy"], r["status"], r["reason"]) for r in out["records"]] == \
        [("atan2", "builtin", "fail", "timeout"), ("atan2", "whole", "fail", "timeout")]
    assert all(tuple(r) == coverage_sweep.RECORD_KEYS for r in out["records"])


def _r(op, strategy, status, fallback=(), reason=""):
    return {"op": op, "sample": "0", "scenario": "vmap_all_args", "strategy": strategy,
            "status": status, "reason": reason, "message": "m", "fallback_ops": list(fallback),
            "seconds": 0.1, "max_abs_err": None, "detail": "", "mechanism": "x",
            "mechanism_ran": True, "error_class": "", "in_dims_tried": 1, "in_dims_total": 4,
            "timed_out": False, "entries": "distinct", "rules": []}


def test_summary_finds_regressions_fixes_and_removed_fallbacks():
    recs = [_r("a", "builtin", "pass"), _r("a", "whole", "fail", reason="leaked_state"),
            _r("b", "builtin", "fail"), _r("b", "whole", "pass"),
            _r("c", "builtin", "pass", ["aten::x"]), _r("c", "whole", "pass"),
            _r("d", "builtin", "pass"), _r("d", "whole", "pass", ["aten::copy"])]
    s = coverage_summary.summarize(recs)
    assert [(r["op"], r["strategy"]) for r in s["regressions"]] == [("a", "whole")]
    assert "state" in s["regressions"][0]["explanation"]
    assert [r["op"] for r in s["fixes"]] == ["b"]
    assert s["fallback_removed"]["whole"] == ["c[0] (aten::x)"]
    assert s["fallback_introduced"]["whole"] == ["d[0] (aten::copy)"]
    assert s["counts"]["builtin"]["fallback"] == 1 and s["counts"]["whole"]["fail"] == 1


def test_files_round_trip(records, tmp_path):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    cost = [{"op": "atan2", "ratio": 1.5}]
    j.write_text(coverage_summary.to_json(records, {"torch": torch.__version__}, cost))
    c.write_text(coverage_summary.to_csv(records))
    assert coverage_summary.load(str(j)) == records
    gz = tmp_path / "r.json.gz"
    coverage_summary.write(str(gz), records, {"torch": torch.__version__}, cost)
    assert coverage_summary.load(str(gz)) == records and coverage_summary.load_cost(str(gz)) == cost
    assert gz.read_bytes()[:2] == b"\x1f\x8b"  # gzip, not plain text
    assert coverage_summary.load_cost(str(j)) == cost
    assert coverage_summary.load_meta(str(j)) == {"torch": torch.__version__}
    assert [(r["op"], r["status"], r["fallback_ops"], r["mechanism_ran"]) for r in
            coverage_summary.load(str(c))] == \
        [(r["op"], r["status"], r["fallback_ops"], r["mechanism_ran"]) for r in records]


def test_views(records):
    page = coverage_summary.table_html(records)
    assert page.count("<tr>") == 1 + len({(r["op"], r["sample"]) for r in records})
    assert "funcbwdSort" in page and "http" not in page
    fig = coverage_summary.summary_figure(records)
    assert {t.name for t in fig.data} >= {"pass", "fail", "slow fallback"}


def test_cost_is_measured_where_both_pass_and_checked_first(records):
    assert coverage_cost.op_cost("bernoulli", [r for r in records if r["op"] == "bernoulli"]) is None
    c = coverage_cost.op_cost("atan2", [r for r in records if r["op"] == "atan2"], rounds=2)
    assert c["error"] == "" and c["ratio"] > 0 and len(c["whole_samples"]) == 2
    assert c["fallback_ops_whole"] == []
    s = coverage_cost.summarize_cost([c, {"op": "x", "ratio": math.nan, "error": "boom"},
                                      {**c, "op": "y", "ratio": c["ratio"] * 10}])
    assert s["measured"] == 2 and s["worst"][0]["op"] == "y" and s["unmeasured"][0]["op"] == "x"
    fig = coverage_cost.cost_figure([c])
    assert "ratio" in fig.layout.xaxis.title.text and fig.layout.yaxis.title.text


def test_cost_refuses_arms_that_disagree(monkeypatch):
    recs = [_r("atan2", "builtin", "pass"), _r("atan2", "whole", "pass")]
    monkeypatch.setattr(coverage_cost, "get_strategy", lambda name: _Off())
    c = coverage_cost.op_cost("atan2", recs, rounds=1)
    assert "Mismatch" in c["error"] and math.isnan(c["ratio"])


def test_bad_input_names_the_choices(tmp_path):
    with pytest.raises(UnknownNameError, match=r"'no_such_op'\nvalid OpInfo ops \(\d+\): "):
        coverage_sweep.run_sweep("no_such_op")
    with pytest.raises(UnknownNameError, match="did you mean .*atan2"):
        coverage_sweep.run_sweep("atan3")
    with pytest.raises(BadInputError, match="valid for coverage"):
        coverage_sweep.run_sweep("atan2", strategies="per_formula")
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"a": 1}))
    with pytest.raises(BadInputError):
        coverage_summary.load(str(bad))
    assert cli.main(["coverage", "--ops", "no_such_op"]) == 2
    assert cli.main(["coverage", "--ops", "atan2", "--workers", "-1"]) == 2


# ------------------------------------------------------------------------------ traced_backward
def test_traced_backward_runs_a_graph_of_torchs_nodes_over_all_args():
    recs, _ = coverage_sweep.run_sweep("cummax", strategies=("builtin", "traced_backward"))
    by = {(r["strategy"], r["scenario"]): r for r in recs}
    assert set(by) == {("builtin", "vmap_all_args"), ("traced_backward", "vmap_all_args")}
    tb = by[("traced_backward", "vmap_all_args")]
    assert tb["status"] == "pass" and tb["mechanism"] == "traced backward graph ran"
    assert "tracing" in tb["detail"] and tb["in_dims_tried"] == tb["in_dims_total"] == 4
    # the joint graph of cummax's vjp has no cummaxmin_backward, hence no slow fallback
    base = by[("builtin", "vmap_all_args")]
    assert base["status"] == "pass" and base["fallback_ops"] == ["aten::cummaxmin_backward"]
    assert tb["fallback_ops"] == []


def test_a_broken_traced_graph_is_refused_by_its_check_or_fails_the_comparison(monkeypatch):
    from funcbwd.strategies import traced_backward

    real = traced_backward.trace_joint

    def broken(joint, flat):  # mutation: the graph's first output scaled by 1.01
        gm = real(joint, flat)
        out = next(n for n in gm.graph.nodes if n.op == "output")
        with gm.graph.inserting_before(out):
            m = gm.graph.call_function(torch.ops.aten.mul.Tensor, (out.args[0][0], 1.01))
        out.args = ((m, *out.args[0][1:]),)
        gm.recompile()
        return gm

    monkeypatch.setattr(traced_backward, "trace_joint", broken)
    p = _prepared("atan2")
    r = coverage_sweep.run_strategy(p, "atan2", "0", traced_backward.TracedBackward(check=False))
    assert r["status"] == "mismatch" and r["scenario"] == "vmap_all_args"
    r = coverage_sweep.run_strategy(p, "atan2", "0", traced_backward.TracedBackward())
    assert r["status"] == "pass" and not r["mechanism_ran"]  # refused: whole's mechanism ran
    assert r["mechanism"] == traced_backward.FALLBACK


def test_an_untraceable_backward_falls_back_and_says_so():
    # scatter_reduce.prod's backward branches on values: fake tracing refuses it (only the
    # cotangents batched: with batched primals the eager backward's .item() fails under vmap)
    from funcbwd.strategies.traced_backward import FALLBACK, TracedBackward

    p = _prepared("scatter_reduce.prod")
    r = coverage_sweep.run_strategy(p, "scatter_reduce.prod", "0", TracedBackward(),
                                    cotangents_only=True)
    assert r["status"] == "pass" and not r["mechanism_ran"]  # passed, but not by a graph
    assert r["mechanism"] == FALLBACK
