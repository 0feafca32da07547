"""Each correction issue 39 asked of the RFC, recomputed from its data or from the installed torch's
own source, and shown able to fail (a mutation of the input changes the verdict)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from funcbwd_lab.studies.review import (branches, budget_resample, cpp_decision, corrections,
                                        rfc, rfc_core, rfc_evidence, trigger)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


@pytest.fixture(scope="module")
def inputs():
    return rfc.load(DATA)


@pytest.fixture(scope="module")
def text():
    """docs/rfc.md with its line breaks folded (a phrase may wrap)."""
    return " ".join((ROOT / "docs" / "rfc.md").read_text().split())


def _fallback(inputs):
    return inputs["cpp"]["fallback"]


# ------------------------------------------------------------------------------ retired entries
def test_index_fill_is_withdrawn_because_its_graph_still_falls_back(inputs, text):
    r = rfc.retired(inputs["coverage"], "traced", _fallback(inputs))
    assert [v["op"] for v in r["withdrawn"]] == ["index_fill"]
    assert r["withdrawn"][0]["falls_back"] == ["aten::_unique"]
    assert "index_fill" not in [v["op"] for v in r["fixed"]]
    assert "1 of them withdrawn: `index_fill`" in text
    # mutation: a fallback study that saw no fallback would keep index_fill "fixed"
    fb = copy.deepcopy(_fallback(inputs))
    for row in fb["ops"]:
        row["traced_fallback_ops"] = []
    assert "index_fill" in [v["op"] for v in rfc.retired(inputs["coverage"], "traced", fb)["fixed"]]


def test_skip_entries_are_listed_apart_from_the_expected_failures(inputs, text):
    r = rfc.retired(inputs["coverage"], "traced", _fallback(inputs))
    kinds = rfc_evidence.split_kinds(r["stale"])
    assert {x["op"] for x in kinds["skip"]} == {"nn.functional.feature_alpha_dropout.without_train",
                                                "linalg.svdvals"}
    assert all(e.on_linux_cpu() == "skip" for e in
               (rfc_evidence.entry_of(x["test"], x["op"]) for x in kinds["skip"]))
    again = rfc_evidence.split_kinds([{**x, "kind": "xfail", "reason": ""}
                                      for x in inputs["objections"]["stale_reruns"]])
    assert len(again["skip"]) == 5 and len(again["xfail"]) == 3
    assert "are `skip()` entries, which are not expected failures" in text
    assert "CPU only: CUDA is not measured" in text
    # mutation: what upstream's entry is decides the list, not the sweep's verdict row
    forged = [{**x, "test": "test_vmapvjp", "op": "nanquantile", "variant": ""} for x in r["stale"][:1]]
    assert rfc_evidence.split_kinds(forged)["xfail"] and not rfc_evidence.split_kinds(forged)["skip"]


# ------------------------------------------------------------------------------ candidates
def test_the_status_quo_is_ranked_with_the_candidates(inputs, text):
    rows = {r["strategy"]: r for r in corrections.with_baselines(inputs["evidence"])}
    b, t = rows["builtin"], rows["traced"]
    st = inputs["evidence"].strategies
    assert b["no_fallback"] == st["builtin"]["no_fallback"] > t["no_fallback"]
    assert t["wrong"] == st["traced"]["wrong"] - st["traced"]["wrong_inherited"]  # its own only
    assert (f"The status quo (torch's own formulas) passes {b['no_fallback']} of "
            f"{b['details']['applicable']} cells") in text
    assert "the status quo on: passes without slow fallback" in text
    # mutation: a status quo that passes fewer cells without the fallback is no longer ahead
    ev = copy.deepcopy(inputs["evidence"])
    ev.strategies["builtin"]["no_fallback"] = t["no_fallback"] - 1
    moved = {r["strategy"]: r for r in corrections.with_baselines(ev)}
    assert moved["traced"]["rank"] < moved["builtin"]["rank"]


def _cpp(values):
    """A data/cpp.json of the announced shape; values: name -> (role, fixes, wrong, no_fallback,
    off_instr, on_instr, on_time)."""
    doc = {"schema": cpp_decision.SCHEMA, "torch": "2.13.0+cpu", "approaches": {}}
    for name, (role, fixes, wrong, nf, off, on, t) in values.items():
        doc["approaches"][name] = {
            "role": role, "matrix": {"applicable": 64, "passed": 40, "fixes": fixes,
                                     "plain_failures": 45, "wrong": wrong, "no_fallback": nf},
            "cost": {"vmap_off": {"instructions": off, "time": off},
                     "vmap_on": {"instructions": on, "time": t}}}
    return doc


def test_the_pick_follows_the_cpp_numbers(inputs):
    doc = _cpp({"builtin": ("reference", 29, 1, 44, 1.0, 1.0, 1.0),
                "guard": ("candidate", 29, 1, 44, 1.01, 1.2, 1.3),
                "composite": ("candidate", 29, 1, 44, 1.0, 1.1, 1.1),
                "legacy": ("reference", 0, 3, 12, 1.0, 1.0, 1.0)})
    d = cpp_decision.decide(cpp_decision.normalize(doc))
    assert d["pick"] == "composite" and d["status_quo_ahead_on"] == ["on_instructions", "on_time"]
    assert "legacy" not in [r["approach"] for r in d["rows"]]  # references are not candidates
    doc["approaches"]["guard"]["matrix"]["no_fallback"] = 50  # mutation: the guard ahead
    d = cpp_decision.decide(cpp_decision.normalize(doc))
    assert d["pick"] == "guard" and d["status_quo_ahead_on"] == ["on_instructions",
                                                                  "on_time"]  # 1.01x: a tie
    assert d["pick_ahead_on"] == ["no_fallback"]
    text = rfc.document({**inputs, "cpp_study": doc})
    assert text.startswith("# RFC: functionalize in-place backward formulas under vmap (`guard`)")
    assert "| 1 | `guard` |" in text and cpp_decision.NOT_MEASURED not in text
    doc["approaches"]["guard"]["cost"]["vmap_on"]["time"] = None
    assert "Not measured for every approach: time vs builtin under vmap." in "\n".join(
        cpp_decision.markdown(cpp_decision.decide(cpp_decision.normalize(doc))))
    with pytest.raises(ValueError):
        cpp_decision.normalize({**doc, "schema": "other"})


def test_the_cpp_decision_reads_the_cpp_studys_file(inputs):
    """data/cpp.json (the C++ study's own shape) read through the study's reader: every candidate
    has every criterion, the status quo's matrix is the Python matrix's builtin column."""
    doc = inputs["cpp_study"]
    assert doc is not None and set(doc["approaches"]) == {
        "cpp_composite", "cpp_guard", "cpp_whole", "cpp_traced", "builtin"}
    norm = cpp_decision.normalize(doc)
    assert all(v is not None for n, row in norm.items() for v in
               (row[c.name] for c in cpp_decision.CRITERIA)), norm
    b = inputs["evidence"].strategies["builtin"]
    assert norm["builtin"]["no_fallback"] == b["no_fallback"]
    d = cpp_decision.decide(norm)
    pick = norm[d["pick"]]
    assert all(cpp_decision._compare(pick, norm[n])[0] <= 0 for n in norm
               if norm[n]["role"] == "candidate")
    text = rfc.document(inputs)
    assert text.startswith(f"# RFC: functionalize in-place backward formulas under vmap "
                           f"(`{d['pick']}`)")
    assert cpp_decision.NOT_MEASURED not in text


# ------------------------------------------------------------------------------ the change in core
def test_the_prologue_is_placed_in_todays_node_template_and_forward_mode_is_dropped(text):
    repo, commit, _ = rfc_core.UPSTREAM["tools/autograd/gen_autograd_functions.py"]
    assert (repo, commit[:10]) == ("cyyever/pytorch", "23eadd2ab9")
    core = text[text.index("## The change in core"):text.index("## The tests it retires")]
    core = core.replace("`${op}_apply_functional(grads, needs_input_grad, saved...)`",
                        "`${op}_apply_functional(grads, needs_input_grad, saved...)`")
    assert "`${op}_apply_functional(grads, needs_input_grad," in core
    assert "**dropped** from this change" in core and "0088d90bab" not in core
    assert "scalars as graph inputs" in core and "withdraws" in core


def test_the_trigger_is_a_vmap_level(inputs, text):
    tr = inputs["trigger"]
    assert trigger.summary(tr["rows"]) == tr["summary"]
    s = tr["summary"]
    assert s["jvp"] == {"pass": sum(s["jvp"].values())}  # every jvp-alone run passes
    assert all(k in ("pass", "reference raises") for k in s["vjp"])
    assert s["vmap_cotangents"].get("fail: vmap_inplace", 0) > 0
    assert f"under `vjp` alone in {s['vjp']['pass']} of {s['vjp']['pass']} sample runs" in text


def test_the_trigger_study_can_tell_vmap_from_vjp():
    """Live, two cells: the legacy diag formula passes under vjp alone and fails under vmap."""
    from funcbwd_lab.ops import registry

    spec = registry.get_op("diag")
    smp = next(s for s in spec.samples() if s.args[0].shape[0] != s.args[0].shape[-1])
    assert trigger._one(spec, smp, "vjp") == "pass"
    assert trigger._one(spec, smp, "vmap_cotangents").startswith("fail")


def test_formulas_branch_on_scalars(inputs):
    saved = inputs["branches"]["scalar_branches"]
    fresh = branches.scalar_branches()
    assert fresh == saved and not fresh["same"]


def test_is_tensor_subclass_like_is_read_from_torchs_header(inputs):
    saved, fresh = inputs["branches"]["subclass_like"], branches.subclass_like()
    assert fresh == saved and fresh["dispatch_mode_makes_true"]
    assert {"Python", "Sparse", "MetaBit", "FuncTorchBatched"} <= set(fresh["keys"])


def test_branch_baselines_summary_and_compliance_can_fail(inputs, text):
    s = branches.summary(inputs["branches"])
    assert s["compliance_fast_fail"] > s["compliance_slow_fail"]
    assert f"CompositeCompliance fails on {s['compliance_fast_fail']} of {s['sites']}" in text
    # live: one site's fast path fails CompositeCompliance, its out-of-place path passes
    spec, site = next((sp, si) for sp, si in branches._sites()
                      if si.site_id == "binary_cross_entropy_double_backward#1")
    fa, fast, slow = branches._calls(spec, spec.samples()[0])
    assert branches._compliance(fast, fa).startswith("fail")
    assert branches._compliance(slow, fa) == "pass"


# ------------------------------------------------------------------------------ unknown cells
def test_the_budget_bound_is_exact():
    N, n = 809, 100
    K = budget_resample.upper_bound(0, N, n)
    assert budget_resample.hypergeom_cdf(0, N, K, n) >= 0.05 > \
        budget_resample.hypergeom_cdf(0, N, K + 1, n)
    assert budget_resample.upper_bound(0, N, N) == 0  # the whole population: exact counts
    assert budget_resample.upper_bound(3, N, N) == 3
    assert math.isclose(sum(budget_resample.hypergeom_cdf(k, 20, 5, 6) -
                            budget_resample.hypergeom_cdf(k - 1, 20, 5, 6) for k in range(7)), 1.0)


def test_the_resampled_cells_are_the_saved_sweeps_and_the_rfc_reports_them(inputs, text):
    from funcbwd_lab.studies.coverage import data

    rs = inputs["budget_resample"]
    cells = budget_resample.population(data.load(DATA / "coverage.json.gz")["records"])
    assert rs["bound"]["population"] == len(cells)
    assert [tuple(r["cell"]) for r in rs["rows"]] == [tuple(c) for c in
                                                      budget_resample.draw(cells, rs["bound"]["sampled"])]
    assert rs["bound"] == budget_resample.bound(rs["rows"], len(cells))
    six = text[text.index("### 6. "):text.index("### 7. ")]
    assert f"with {rs['budget_s']:.0f} s per cell on Dask" in six


def test_every_data_file_the_rfc_cites_exists(text):
    import re

    cited = set(re.findall(r"data/([\w.-]+\.json(?:\.gz)?)", text))
    missing = [c for c in cited if not (DATA / c).exists() and c != cpp_decision.FILE]
    assert not missing, missing


def test_pytorch_103329s_own_repro_is_not_the_copy_rules_evidence(inputs, text):
    rows = {r["composition"]: r for r in inputs["copy_repro"]["rows"]}
    repro = next(r for k, r in rows.items() if "repro" in k)
    assert all("inplace arithmetic" in repro[k] for k in ("neither", "all three rules"))
    fn = rows["vmap(jacrev(functionalize(f)))"]
    assert fn["neither"] != "pass" and fn["all three rules"] == "pass"
    assert "the issue's own repro, `vmap(jacrev(f))`, still raises (vmap's in-place error)" in text
