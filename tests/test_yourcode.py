"""Real code nobody here wrote (studies/yourcode/cases.py): each public case fails plain as its
report says, and passes wrapped against a per-sample loop and against torch's own gradient (an
out-of-place rewrite). The passes that make two of them work are shown to be needed."""

from __future__ import annotations

import pytest

from funcbwd.fx import formula_graphs
from funcbwd_lab.studies.yourcode import issue_cases as cases

CELLS = [(c, t) for c in cases.CASES for t in cases.TRANSFORMS]
#: where each upstream report says plain torch.func fails (the rest pass plain too)
PLAIN_FAILS = {
    "pytorch#103329": {"vmap", "vmap_vjp", "vmap_jacrev"},
    "pytorch#97248 (x batched)": {"vmap", "vmap_vjp", "vmap_jacrev"},
    "pytorch#97248 (y batched)": {"vmap", "vmap_vjp", "vmap_jacrev"},
    "functorch#105": {"vmap", "vmap_vjp", "vmap_jacrev"},
    "functorch#207": {"vmap_vjp", "vmap_jacrev"},
}


@pytest.mark.parametrize("name,transform", CELLS)
def test_case_cell(name, transform):
    r = cases.evaluate(cases.CASES[name], transform)
    if not r["defined"]:
        assert transform in ("jacfwd", "hessian") and "jvp" in r["why"]
        return
    assert r["plain"] == ("fail" if transform in PLAIN_FAILS[name] else "ok"), r["plain_error"]
    assert r["wrapped"] == "ok", r["wrapped_error"]
    assert r["vs_loop"] == "ok" and r["vs_torch"] == "ok", (r["vs_loop"], r["vs_torch"])


def test_the_comparison_can_fail(monkeypatch):
    # Mutation: a rewrite that is off by a factor is caught by the vs-torch comparison.
    case = cases.CASES["pytorch#103329"]
    wrong = cases.dataclasses.replace(case, rewrite=lambda x, y: 2 * case.rewrite(x, y))
    r = cases.evaluate(wrong, "vmap_jacrev")
    assert r["vs_loop"] == "ok" and "max abs error" in r["vs_torch"]


def test_slice_end_clamp_is_what_makes_functorch_105_batch(monkeypatch):
    monkeypatch.setattr(formula_graphs, "clamp_slice_ends", lambda gm: 0)
    monkeypatch.setattr("funcbwd.fx.passes.PASSES", ())  # its stack would remove the scatters
    r = cases.evaluate(cases.CASES["functorch#105"], "vmap")
    assert r["wrapped"] == "fail" and "overflow" in r["wrapped_error"]


def test_mask_write_rewrite_is_what_makes_functorch_207_batch(monkeypatch):
    monkeypatch.setattr(formula_graphs, "rewrite_mask_writes", lambda gm: 0)
    cases._FUNCTION_REWRAPS.clear()
    try:
        r = cases.evaluate(cases.CASES["functorch#207"], "vmap_jacrev")
    finally:
        cases._FUNCTION_REWRAPS.clear()
    assert r["wrapped"] == "fail" and "dynamic shape" in r["wrapped_error"]


def test_saved_bench_has_its_meta_and_renders_in_100_columns():
    import json
    from pathlib import Path

    from funcbwd_lab.studies.yourcode import bench

    saved = json.loads((Path(__file__).resolve().parents[1] / "data/yourcode-bench.json").read_text())
    assert {"torch", "batches", "pairs", "quick"} <= set(saved["meta"])
    assert {r["case"] for r in saved["cost"]} == set(cases.CASES)
    assert all(min(r["ratio_ci95"]) <= r["ratio"] <= max(r["ratio_ci95"]) for r in saved["cost"])
    text = bench.render(saved)
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.count("MISSED") + text.count(" met") >= len(saved["cost"])
    assert saved["memory"]["samples"][-1]["cached"] == saved["memory"]["maxsize"]
