"""Where handfixed is not the floor, and the floor column (the cheaper of handfixed and builtin),
on synthetic samples: each verdict computed, and each flipped by a mutation of the samples."""

from __future__ import annotations

import copy
import math

import pytest

from funcbwd_lab.studies.bench import profile_section as bench_profile
from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.bench import text as bench_text
from funcbwd_lab import figstyle
from funcbwd_lab.studies.bench import charts as plots
from test_bench import _rec, _row, _synthetic


def _large(hf: float, builtin: float, traced: float, spread: float = 0.01) -> dict:
    """diag at large inputs, batches 64 and 256, with the three medians given (samples spread by
    ``spread`` around each, so IQR/median is about ``spread``)."""
    res = _synthetic()
    res["batched"] = [r for r in res["batched"] if r["size"] == "small"]
    for batch in (64, 256):
        for label, m in (("handfixed", hf), ("builtin", builtin), ("traced", traced)):
            res["batched"].append(_rec("diag", batch, label, "vmap",
                                       [m * (1 - spread), m, m * (1 + spread)], size="large"))
    return res


def _check(res, size="large"):
    (row,) = [r for r in bench_results.reference_check(res) if r["op"] == "diag" and r["size"] == size]
    return row


def test_floor_is_the_cheaper_reference_at_each_point():
    rows = bench_results.ratios(_large(hf=10.0, builtin=4.0, traced=5.0))
    traced = _row(rows, batch=64, label="traced", size="large")
    assert traced["floor_label"] == "builtin" and traced["ratio_vs_floor"] == pytest.approx(5 / 4)
    assert traced["ratio_vs_handfixed"] == pytest.approx(0.5)
    cheap_hf = bench_results.ratios(_large(hf=3.0, builtin=4.0, traced=5.0))
    t = _row(cheap_hf, batch=64, label="traced", size="large")
    assert t["floor_label"] == "handfixed" and t["ratio_vs_floor"] == pytest.approx(5 / 3)
    # no builtin timed at small B=8 in the synthetic run: no floor there, never a guess
    small8 = _row(bench_results.ratios(_synthetic()), batch=8, label="traced", size="small")
    assert math.isnan(small8["ratio_vs_floor"]) and small8["floor_label"] == ""


def test_handfixed_not_the_floor_where_a_functional_formula_beats_it():
    row = _check(_large(hf=10.0, builtin=4.0, traced=5.0))
    assert row["beaten_by"] == ["traced", "builtin"] and not row["handfixed_is_floor"]
    assert row["traced_vs_handfixed"] == pytest.approx(0.5) and "NOT the floor" in row["text"]
    # mutation: traced as slow as handfixed -> only builtin beats it
    only_builtin = _check(_large(hf=10.0, builtin=4.0, traced=10.0))
    assert only_builtin["beaten_by"] == ["builtin"] and "NOT" not in only_builtin["text"]
    # mutation: all three alike -> handfixed is the floor
    same = _check(_large(hf=10.0, builtin=10.0, traced=10.0))
    assert same["handfixed_is_floor"] and same["text"].endswith("none faster beyond the noise")


def test_noise_decides_what_counts_as_faster():
    quiet = _check(_large(hf=10.0, builtin=10.0, traced=8.5, spread=0.01))
    assert quiet["beaten_by"] == ["traced"]
    noisy = _check(_large(hf=10.0, builtin=10.0, traced=8.5, spread=0.2))  # 15% inside the noise
    assert noisy["handfixed_is_floor"]


def test_large_target_and_headline_use_the_floor():
    res = _large(hf=10.0, builtin=4.0, traced=5.0)
    (t,) = [t for t in bench_results.targets(res, ops=("diag",)) if t["name"] == "traced_vs_floor_large"]
    assert t["status"] == "missed" and t["value"] == pytest.approx(1.25)
    fast = _large(hf=10.0, builtin=4.0, traced=4.2)
    (t,) = [t for t in bench_results.targets(fast, ops=("diag",)) if t["name"] == "traced_vs_floor_large"]
    assert t["status"] == "met"
    big = bench_results.headline(res, ops=("diag",), size="large")["per_op"]["diag"]
    assert big["worst_ratio_vs_floor"] == pytest.approx(1.25)
    assert "min(handfixed, builtin)" in bench_text.format_headline(
        bench_results.headline(res, ops=("diag",), size="large"))
    # the small-input target no longer reads large inputs
    (small,) = [t for t in bench_results.targets(res, ops=("diag",)) if t["name"] == "traced_vs_handfixed"]
    assert small["where"]["size"] == "small"


def test_floor_chart_draws_both_references_and_reads_well():
    res = _large(hf=10.0, builtin=4.0, traced=5.0)
    fig = plots.ratio_vs_batch(res, "large", "ratio_vs_floor")
    assert {"handfixed", "builtin", "traced"} <= {t.name for t in fig.data}
    notes = [a.text for a in fig.layout.annotations]
    assert any(n.startswith("min(handfixed, builtin) = 1.0") for n in notes)
    assert not figstyle.layout_problems(fig)
    assert "ratio_vs_floor_large" in plots.all_figures(res)
    assert "x floor" in bench_text.format_ratios(res, "large")
    assert "NOT the floor" in bench_text.format_reference_check(res)


def test_saved_profile_section_reads_back():
    res = _synthetic()
    assert bench_profile.breakdowns(res) == {} and "no profile section" in bench_profile.missing(res)[0]
    with_profile = copy.deepcopy(res)
    with_profile["profile"] = {"status": "ok", "op": "diag", "batch": 64, "breakdowns": [
        {"status": "ok", "op": "diag", "strategy": "traced", "sample": "3x5", "batch": 64,
         "total_us": 100.0, "parts": {"aten kernels": 10.0}, "kernels": {"aten::copy_": [2.0, 1]},
         "python_frames": {}, "fallback_ops": [], "calls": 5, "overlap_us": 0.0},
        {"strategy": "hooks", "status": "fail", "reason": "cannot profile"}]}
    got = bench_profile.breakdowns(with_profile)
    assert list(got) == ["traced"] and got["traced"].kernels == {"aten::copy_": (2.0, 1)}
    assert bench_profile.missing(with_profile) == ["hooks: cannot profile"]
