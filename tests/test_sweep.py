"""The OpInfo sweep on a handful of ops (the whole database is ``python -m funcbwd_lab coverage``):
it runs the engine's cells (breaking the runner's comparison breaks it too), every functorch
composition with its records' composition and dtype, resumes to the same result, runs on Dask
like serially, and turns records into summaries and upstream verdicts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from funcbwd import internals
from funcbwd_lab.run import runner
from funcbwd.compare import Comparison
from funcbwd_lab.studies.coverage import data, render, summary, sweep, verdicts, upstream

#: the cheap compositions (vmapvjpvjp/vmapjvpvjp: builtin only, in their own tests)
PLAN = sweep.Plan({"float32": {"vmapvjp": 1, "vmapjvpall": 1, "vjpvmap": 1}}, budget_s=60.0)
OPS = "atan2,index_select"


@pytest.fixture(scope="module")
def records():
    before = internals.dispatch_state()
    results = sweep.run_sweep(OPS, PLAN, progress=False)
    assert internals.dispatch_state() == before  # the sweep leaves no functorch/dispatch state
    return [r for res in results for r in res["records"]]


def _rec(records, op, comp, st):
    return next(r for r in records if (r["op"], r["composition"], r["strategy"]) == (op, comp, st))


def test_every_composition_and_strategy_has_a_record_with_its_composition_and_dtype(records):
    assert {(r["op"], r["composition"], r["strategy"]) for r in records} == {
        (o, c, s) for o in OPS.split(",") for c in PLAN.compositions() for s in sweep.STRATEGIES}
    assert all(r["dtype"] == "float32" and r["composition"] == r["scenario"] for r in records)


def test_a_pass_ran_every_in_dims_choice_with_the_mechanism_and_the_rules(records):
    for comp in ("vmapvjp", "vjpvmap"):
        for st in sweep.STRATEGIES:
            r = _rec(records, "atan2", comp, st)
            assert r["status"] == "pass" and r["trials_run"] == r["trials_total"] > 1, r
            assert r["rules"] == ([] if st == "builtin" else ["aten::copy", "aten::as_strided_scatter"])
    r = _rec(records, "atan2", "vmapvjp", "whole")
    assert r["mechanism_ran"] and r["mechanism"] == "vjp_fn functionalized under vmap"
    # traced_backward builds a graph only where torch's backward falls back or raises under vmap
    # (issue 30): atan2's does neither, so torch's backward runs as is (a pass without the graph)
    r = _rec(records, "atan2", "vmapvjp", "traced_backward")
    assert not r["mechanism_ran"] and r["mechanism"].startswith("torch's backward ran as is"), r


def test_forward_only_compositions_are_not_applicable_to_backward_strategies(records):
    for st in ("whole", "hooks", "traced_backward"):
        r = _rec(records, "atan2", "vmapjvpall", st)
        assert r["status"] == "not_applicable" and "forward mode only" in r["message"]
    assert _rec(records, "atan2", "vmapjvpall", "builtin")["status"] == "pass"


def test_the_sweep_is_the_runners_cells(monkeypatch):
    """A broken comparison in the engine breaks the sweep: nothing else decides a record."""
    def never(actual, expected, tol=None):
        return Comparison(False, 1.0, 1.0, "output 0: broken on purpose")

    monkeypatch.setattr(runner, "compare", never)
    res = sweep.sweep_op("atan2", dataclasses.replace(
        PLAN, samples={"float32": {"vmapvjp": 1}}, strategies=("builtin",)))
    (rec,) = res["records"]
    assert rec["status"] == "mismatch" and "broken on purpose" in rec["message"]


def test_second_order_compositions_run_and_upstreams_inplace_failure_shows():
    # binary_cross_entropy's double backward writes a batched grad into an unbatched one in place
    # when only the first cotangent is batched (2 of its 32 in_dims choices per sample)
    res = sweep.sweep_op("nn.functional.binary_cross_entropy", dataclasses.replace(
        PLAN, samples={"float32": {"vmapvjpvjp": 1}}, strategies=("builtin", "whole")))
    base, whole = res["records"]
    assert (base["status"], base["reason"]) == ("fail", "vmap_inplace"), base
    assert whole["status"] in ("pass", "timeout") and whole["trials_run"] >= 1
    if whole["status"] == "pass":
        assert whole["mechanism_ran"]


def test_a_spent_budget_is_a_timeout_never_a_pass():
    res = sweep.sweep_op("atan2", dataclasses.replace(
        PLAN, samples={"float32": {"vmapvjpvjp": 1}}, strategies=("builtin",), budget_s=1e-9))
    (rec,) = res["records"]
    assert rec["status"] == "timeout" and rec["trials_run"] == 1 < rec["trials_total"]


def test_resume_gives_the_same_records_as_one_run(tmp_path, records):
    out = tmp_path / "c.json.gz"
    first = sweep.run_sweep("atan2", PLAN, out=out, progress=False)  # "interrupted" after one op
    assert list(sweep.done_ops(out)) == ["atan2"]
    resumed = sweep.run_sweep(OPS, PLAN, out=out, resume=True, progress=False)
    assert resumed[0] == first[0]  # read back, not recomputed

    def stable(rs):
        return [{k: v for k, v in r.items() if k != "seconds"} for res in rs for r in res["records"]]

    assert stable(resumed) == [{k: v for k, v in r.items() if k != "seconds"} for r in records]
    other = dataclasses.replace(PLAN, budget_s=1.0)
    with pytest.raises(Exception, match="another plan"):
        sweep.run_sweep(OPS, other, out=out, resume=True, progress=False)


def test_dask_workers_give_the_serial_records(records):
    results = sweep.run_sweep("atan2", PLAN, workers=2, progress=False)
    dask = [{k: v for k, v in r.items() if k != "seconds"} for res in results for r in res["records"]]
    serial = [{k: v for k, v in r.items() if k != "seconds"} for r in records if r["op"] == "atan2"]
    assert dask == serial


# ------------------------------------------------------------------------------ from records
def _r(op, comp, st, status, reason="", ran=True, fb=(), sample="0"):
    return {"op": op, "sample": sample, "dtype": "float32", "composition": comp, "scenario": comp,
            "strategy": st, "status": status, "reason": reason, "mechanism_ran": ran,
            "fallback_ops": list(fb), "message": reason, "detail": "", "trials_run": 1,
            "trials_total": 1}


def test_regressions_and_fixes_pair_records_by_cell():
    recs = [_r("a", "vmapvjpvjp", "builtin", "fail", "vmap_inplace"),
            _r("a", "vmapvjpvjp", "whole", "pass"),
            _r("a", "vmapvjpvjp", "hooks", "pass", ran=False),  # no mechanism: not a fix
            _r("b", "vmapvjp", "builtin", "pass"), _r("b", "vmapvjp", "whole", "mismatch"),
            _r("c", "vmapvjp", "builtin", "timeout"), _r("c", "vmapvjp", "whole", "pass")]
    s = summary.summarize(recs)
    assert [(f["cell"][0], f["strategy"], f["inplace"]) for f in s["fixes"]] == [("a", "whole", True)]
    assert [(r["cell"][0], r["strategy"]) for r in s["regressions"]] == [("b", "whole")]
    assert s["compositions"]["vmapvjp"]["whole"]["unresolved"] == 1
    assert summary.inplace_fixed_by(recs, "whole") == {"fixed": 1}
    assert summary.inplace_fixed_by(recs, "hooks") == {"not_fixed": 1}


def test_unfinished_cells_are_their_own_columns_and_make_regressions_a_lower_bound():
    spent = dict(_r("d", "vmapvjp", "traced_backward", "timeout"), trials_run=2, trials_total=4)
    never = [dict(_r("e", "vmapvjp", st, "timeout"), trials_run=0) for st in ("builtin", "whole")]
    recs = [_r("b", "vmapvjp", "builtin", "pass"), _r("b", "vmapvjp", "whole", "mismatch"),
            _r("d", "vmapvjp", "builtin", "pass"), spent, *never]
    s = summary.summarize(recs)
    c = s["compositions"]["vmapvjp"]
    assert (c["traced_backward"]["budget_spent"], c["traced_backward"]["unknown"]) == (1, 1)
    assert (c["builtin"]["not_started"], c["whole"]["not_started"], c["whole"]["budget_spent"]) == (1, 1, 0)
    assert c["whole"]["pass"] == 0 and s["unknown"] == 1
    row = {tuple(r[:2]): r for r in render.composition_rows(s)}
    cols = dict(zip(render.COLUMNS, row["vmapvjp", "traced_backward"][2:]))
    assert cols["regressions"] == ">=0" and cols["budget_spent"] == "1" and cols["unknown"] == "1"
    md = render.markdown({"meta": PLAN.meta()}, s)
    assert "**At least 1 regressions against builtin**" in md and "1 budget spent" in md
    assert "| budget spent | not started |" in md


def _entry(test, op, kind="xfail", variant=""):
    return upstream.Entry(test, op, variant, kind, "a reason", "inline", 1, (1,), ("s",))


def test_each_upstream_entry_gets_a_verdict_from_the_records():
    recs = [_r("layer_norm", "vmapvjpvjp", "builtin", "fail", "vmap_inplace"),
            *[_r("layer_norm", "vmapvjpvjp", s, "pass") for s in ("whole", "hooks", "traced_backward")],
            _r("sin", "vmapvjp", "builtin", "pass"),
            _r("roll", "vmapvjp", "builtin", "mismatch"),
            _r("slow", "vmapvjp", "builtin", "timeout"),
            _r("fb", "vmapvjp", "builtin", "pass", fb=["aten::copy"]),
            _r("fb", "vmapvjp", "traced_backward", "pass"),
            _r("bad", "vmapvjpvjp", "builtin", "fail", "other"),
            *[_r("bad", "vmapvjpvjp", s, "fail", "other") for s in ("whole", "hooks", "traced_backward")]]
    entries = [_entry("test_vmapvjpvjp", "layer_norm"), _entry("test_vmapvjp", "sin"),
               _entry("test_vmapvjp", "roll"), _entry("test_vmapvjp", "slow"),
               _entry("test_vmapvjp_has_batch_rule", "fb"), _entry("test_vmapvjpvjp", "bad"),
               _entry("test_vmapvjp", "gone")]
    got = [v["verdict"] for v in verdicts.upstream_verdicts(recs, entries)]
    assert got == ["fixed", "stale", "torch_bug", "unresolved", "fixed", "reproduced", "harness"]
    # mutation: a regression of the fixing strategy elsewhere on the op withdraws its "fixed"
    recs += [_r("layer_norm", "vmapvjpvjp", "builtin", "pass", sample="1"),
             *[_r("layer_norm", "vmapvjpvjp", s, "fail", "other", sample="1")
               for s in ("whole", "hooks", "traced_backward")]]
    assert verdicts.upstream_verdicts(recs, entries[:1])[0]["verdict"] == "reproduced"


def test_the_data_file_round_trips_and_renders_in_100_columns(tmp_path, records):
    path = tmp_path / "c.json.gz"
    meta = {**PLAN.meta(), "ops": 2, "torch": "x", "seconds": 1.0, "workers": 0}
    data.save(path, records, meta, verdicts.upstream_verdicts(records))
    doc = data.load(path)
    assert doc["records"] == records and doc["meta"]["max_in_dims"] is None
    assert {"test", "op", "variant", "kind", "reason", "source", "verdict"} <= set(doc["upstream_xfails"][0])
    text = render.text(doc, summary.summarize(records))
    assert all(len(line) <= 100 for line in text.splitlines()), text
    bad = tmp_path / "old.json.gz"
    data.save(bad, [], {})
    raw = json.loads(__import__("gzip").open(bad, "rt").read())
    raw["schema"] = "old"
    __import__("gzip").open(bad, "wt").write(json.dumps(raw))
    with pytest.raises(Exception, match="schema"):
        data.load(bad)


def test_the_deep_pass_covers_every_inplace_cell_of_the_saved_sweep():
    """data/coverage-deep.json re-ran exactly the saved sweep's in-place cells (a cell missing
    from it, or one it has that the sweep does not, fails here)."""
    from pathlib import Path

    from funcbwd_lab.studies.coverage import deep

    root = Path(__file__).resolve().parents[1] / "data"
    doc = json.loads((root / deep.FILE_NAME).read_text())
    records = data.load(root / data.FILE_NAME)["records"]
    cells = deep.inplace_cells(records)
    left = deep.pending(records, doc)
    # the in-place shape error's cells (native_group_norm, vmapvjp) were found after the deep
    # pass ran: listed as pending, never silently covered
    assert {c[0] for c in left} <= {"native_group_norm"} and all(c[1] != "0" for c in left)
    # ... and re-run apart: every pending cell has its records there
    apart = json.loads((root / "coverage-deep-pending.json").read_text())
    assert sorted(apart["records"]) == sorted(f"{c[0]} {c[3]} sample {c[1]}" for c in left)
    assert {r["status"] for rs in apart["records"].values() for r in rs
            if r["strategy"] != "builtin"} == {"pass", "uninformative"}
    assert sorted(doc["records"]) == sorted(f"{c[0]} {c[3]}" for c in cells if c not in left)
    assert doc["schema"] == deep.SCHEMA and doc["meta"]["budget_s"] > PLAN.budget_s
    text = deep.format_result(doc)
    assert all(len(line) <= 100 for line in text.splitlines()), text
    assert all(r["trials_run"] <= r["trials_total"] for rs in doc["records"].values() for r in rs)


def test_a_fallback_inside_a_graph_is_recorded_where_it_happens(capfd):
    # traced_backward's graph calls _unique (index_fill's backward: no batching rule and no
    # decomposition, so it stays in the graph) through an OpOverload: vmap's fallback warning
    # goes from C++ to the process's stderr, never to Python's warnings; it must still be counted
    from funcbwd_lab.studies.coverage import opinfo

    op = opinfo.op_by_id("index_fill")  # sample 1: a tensor fill value (its grad takes _unique)
    spec, smp = opinfo.case_for(op, opinfo.samples(op, __import__("torch").float32, 2)[1], "1")
    cells = {s: sweep.run_cell(spec, smp, "vmapvjp", s, PLAN) for s in ("builtin", "traced_backward")}
    for s, c in cells.items():
        assert c.status == "pass" and c.fallback_ops == ["aten::_unique"], (s, c.record())
    assert cells["traced_backward"].mechanism_ran
    assert "batching rule for aten::_unique" not in capfd.readouterr().err  # taken, not echoed


def test_stale_needs_every_sample_and_the_cap_is_in_the_records():
    entry = [_entry("test_vjpvmap", "sin")]
    one = [dict(_r("sin", "vjpvmap", "builtin", "pass"), sample_cap=1, samples_total=5)]
    got = verdicts.upstream_verdicts(one, entry)[0]
    assert got["verdict"] == "unresolved" and "first 1 of 5 samples" in got["evidence"]
    # records saved before they carried the cap: the plan's cap (meta) counts
    bare = [_r("sin", "vjpvmap", "builtin", "pass")]
    meta = {"samples": {"float32": {"vjpvmap": 1}}}
    assert verdicts.upstream_verdicts(bare, entry, meta=meta)[0]["verdict"] == "unresolved"
    every = [dict(_r("sin", "vjpvmap", "builtin", "pass", sample=str(i)), sample_cap=None,
                  samples_total=5) for i in range(5)]
    assert verdicts.upstream_verdicts(every, entry)[0]["verdict"] == "stale"
    # the sweep itself: every sample by default, the cap (for speed) written into every record
    plan = sweep.Plan({"float32": {"vjpvmap": None}}, strategies=("builtin",), budget_s=60.0)
    assert sweep.DEFAULT_PLAN.samples["float32"] == dict.fromkeys(sweep.COMPOSITIONS)
    recs = sweep.sweep_op("atan2", plan)["records"]
    total = recs[0]["samples_total"]
    assert total > 1 and [r["sample"] for r in recs] == [str(i) for i in range(total)]
    assert all(r["sample_cap"] is None and r["samples_total"] == total for r in recs)
    capped = sweep.sweep_op("atan2", sweep.capped(plan, 2))["records"]
    assert [(r["sample"], r["sample_cap"], r["samples_total"]) for r in capped] == [
        ("0", 2, total), ("1", 2, total)]


def test_the_inplace_shape_error_is_an_inplace_failure():
    from funcbwd_lab.run.outcomes import classify, is_inplace

    msg = "output with shape [2, 2, 3, 3] doesn't match the broadcast shape [3, 2, 2, 3, 3]"
    assert classify(RuntimeError(msg)) == "inplace_shape"
    assert is_inplace("inplace_shape") and is_inplace("other", msg) and not is_inplace("other", "x")
    # records saved with reason "other" count as in-place failures and in-place fixes
    recs = [dict(_r("gn", "vmapvjp", "builtin", "fail", "other"), message=msg),
            _r("gn", "vmapvjp", "whole", "pass")]
    s = summary.summarize(recs)
    assert [f["cell"][0] for f in s["inplace_failures"]] == ["gn"]
    assert s["compositions"]["vmapvjp"]["whole"]["inplace_fixes"] == 1


def test_the_stale_rerun_ran_every_sample_and_its_block_is_generated():
    """data/coverage-stale-rerun.json.gz: builtin on every float32 sample of the cells behind the
    committed sweep's stale verdicts; docs/opinfo-sweep.md shows what changed."""
    from pathlib import Path

    from funcbwd_lab.studies.coverage import stale_rerun
    from funcbwd_lab.views import readme

    root = Path(__file__).resolve().parents[1]
    old = data.load(root / "data" / data.FILE_NAME)
    new = data.load(root / "data" / stale_rerun.FILE_NAME)
    assert all(r["sample_cap"] is None and r["strategy"] == "builtin" for r in new["records"])
    rows = stale_rerun.changes(old, new)
    assert len(rows) == sum(len(o) for o in stale_rerun.stale_cells(old).values())
    # a stale verdict now rests on every sample
    by = summary.by_cell(new["records"])
    for r in rows:
        if r["verdict"] == "stale":
            comp = verdicts.COMPOSITION_OF[r["test"]]
            recs = [per["builtin"] for (op, _, _, c), per in by.items() if op == r["op"] and c == comp]
            assert len(recs) == recs[0]["samples_total"] and all(x["status"] == "pass" for x in recs)
    text = (root / "docs" / "opinfo-sweep.md").read_text()
    assert readme.block(text, "stale-rerun") == stale_rerun.markdown(rows)
    # the functionalizing strategies ran on every in-place cell the re-run found
    inplace = data.load(root / "data" / stale_rerun.INPLACE_FILE_NAME)["records"]
    found = {tuple(f["cell"]) for f in summary.summarize(new["records"])["inplace_failures"]}
    assert {summary.cell_of(r) for r in inplace} == found
    assert {r["strategy"] for r in inplace} == set(sweep.STRATEGIES)
    fixed = summary.summarize(inplace)["compositions"]["vmapjvpvjp"]
    assert {st: fixed[st]["inplace_fixes"] for st in ("whole", "hooks", "traced_backward")} == dict.fromkeys(
        ("whole", "hooks", "traced_backward"), 15)


def test_the_rest_rerun_covers_the_other_stale_cells_and_its_block_is_generated():
    from funcbwd_lab.studies.coverage import stale_rerun
    from funcbwd_lab.views import readme

    root = Path(__file__).resolve().parents[1]
    old = data.load(root / "data" / data.FILE_NAME)
    new = data.load(root / "data" / stale_rerun.REST_FILE_NAME)
    assert all(r["sample_cap"] is None and r["strategy"] == "builtin" for r in new["records"])
    rows = stale_rerun.changes(old, new, stale_rerun.rest_cells(old))
    assert len(rows) == sum(len(o) for o in stale_rerun.rest_cells(old).values())
    assert not any(r["verdict"] == "reproduced" and "crash" in r["evidence"] for r in rows)
    text = (root / "docs" / "opinfo-sweep.md").read_text()
    assert readme.block(text, "stale-rerun-rest") == stale_rerun.markdown(rows)


def test_a_worker_that_died_is_unresolved_not_a_reproduced_failure():
    from funcbwd_lab.studies.coverage import data, verdicts

    doc = data.load(Path(__file__).resolve().parents[1] / "data" / data.FILE_NAME)
    mha = [v for v in doc["upstream_xfails"] if v["op"] == "nn.functional.multi_head_attention_forward"]
    assert mha and all(v["verdict"] == "unresolved" for v in mha)  # its worker died (memory)
    crash = {"status": "fail", "reason": "crash", "fallback_ops": []}
    assert not verdicts._failing(crash, batch_rule=False)
    assert verdicts._failing({**crash, "reason": "other"}, batch_rule=False)  # a real failure


def test_the_rest_of_the_stale_cells_complete_the_named_ones():
    from funcbwd_lab.studies.coverage import stale_rerun

    doc = data.load(Path(__file__).resolve().parents[1] / "data" / data.FILE_NAME)
    named, rest = stale_rerun.stale_cells(doc), stale_rerun.rest_cells(doc)
    every = stale_rerun.stale_cells(doc, None)
    pairs = lambda cells: {(c, o) for c, ops in cells.items() for o in ops}  # noqa: E731
    assert pairs(named) | pairs(rest) == pairs(every) and not pairs(named) & pairs(rest)
    assert pairs(rest)  # what the first re-run left: 21 cells on this data


def test_saved_upstream_verdicts_are_the_every_sample_recomputation():
    # The file's upstream_xfails are derived state: they must equal the verdicts recomputed with
    # the sweep's sample caps, so no "stale" rests on one sample where upstream loops over all.
    from funcbwd_lab.studies.coverage import data, verdicts

    doc = data.load(Path(__file__).resolve().parents[1] / "data" / "coverage.json.gz")
    saved = [(v["test"], v["op"], v["variant"], v["verdict"]) for v in doc["upstream_xfails"]]
    again = [(v["test"], v["op"], v["variant"], v["verdict"]) for v in verdicts.of_document(doc)]
    assert saved == again
    stale = [v for v in doc["upstream_xfails"] if v["verdict"] == "stale"]
    assert stale and all("cap" not in v["evidence"] for v in stale)
    # mutation: without the caps, entries passing their one sample are called stale again
    capless = verdicts.upstream_verdicts(doc["records"])
    assert sum(v["verdict"] == "stale" for v in capless) > len(stale)


def test_the_verdict_and_regression_tables_keep_every_word_whole():
    """The notebook's long tables: verdicts grouped by verdict in collapsible tables (the short
    groups open), regressions grouped by strategy, composition and first line with their ops;
    no field truncated, no layout that breaks words (a mutation: the old fixed layout with
    break-word is what cut cells mid-word at 1280 px, tests/test_browser_layout.py)."""
    long_reason = "a reason long enough that a cut at sixty characters would end inside a word"
    vs = [{"test": "test_vmapvjp", "op": "nn.functional.scaled_dot_product_attention", "variant": "",
           "kind": "xfail", "reason": long_reason, "verdict": v, "evidence": "builtin: " + "x" * 120}
          for v in ("reproduced", "stale")]
    page = render.verdicts_html(vs)
    assert long_reason in page and "x" * 120 in page
    assert "break-word" not in page and "table-layout:fixed" not in page and "word-break:normal" in page
    assert page.count("<details") == 2 and page.count("<details open>") == 1  # stale open
    regs = [{"cell": (op, "0", "float32", "vmapvjpvjp"), "strategy": "whole", "status": "fail",
             "reason": "other", "message": "slice_scatter does not support automatic "
                                           "differentiation for outputs with complex dtype.\nmore"}
            for op in ("fft.rfft", "fft.rfft", "stft")]
    groups = render.regression_groups(regs)
    assert len(groups) == 1 and groups[0]["ops"] == {"fft.rfft": 2, "stft": 1}
    text = render.regressions_text(regs)
    assert "complex dtype." in text and "fft.rfft (2), stft" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "complex dtype.</td>" in render.regressions_html(regs)


def test_the_rfc_lists_what_the_every_sample_reruns_find_stale(tmp_path):
    from funcbwd_lab.studies.review import objections

    root = Path(__file__).resolve().parents[1] / "data"
    doc = data.load(root / data.FILE_NAME)
    found = objections.stale_reruns(root, doc)
    assert found and all(r["verdict"] == "stale" and "passes" in r["evidence"] for r in found)
    assert objections.stale_reruns(tmp_path, doc) is None  # without the re-runs: nothing claimed
