"""The C++ cost estimates (funcbwd_lab.studies.review.cpp_cost) are computed from the saved data:
each figure equals what its source gives, a change in the input changes the figure, a missing
input is "not measured", and the renders fit 100 columns."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.review import cpp_cost

DATA = Path(__file__).resolve().parents[1] / "data"


def _costs(ratios):
    """Synthetic sweep cost entries (the shape coverage_cost.op_cost writes)."""
    return [{"op": f"op{i}", "ratio": r, "builtin_s": 1e-4, "whole_s": r * 1e-4, "error": "",
             "fallback_ops_whole": [], "fallback_ops_builtin": []} for i, r in enumerate(ratios)]


@pytest.fixture(scope="module")
def inputs():
    return {"sources": dict(cpp_cost.FILES),
            "bench": bench_results.load(str(DATA / cpp_cost.FILES["bench"])),
            "coverage_cost": _costs([1.1, 1.3, 1.4, 1.6, 2.0]),
            "fallback": json.loads((DATA / cpp_cost.FILES["fallback"]).read_text()),
            "live": json.loads((DATA / cpp_cost.FILES["live"]).read_text())}


def _by(ests, candidate, figure_start=""):
    return next(e for e in ests if e.candidate == candidate and e.figure.startswith(figure_start))


def test_figures_are_their_sources_numbers(inputs):
    ests = cpp_cost.estimates(inputs)
    summary = bench_results.cost_summary(inputs["bench"])
    assert _by(ests, "python floor").value == summary["handfixed"]["batched_vs_builtin"]
    assert _by(ests, "traced", "batched, vs the C++").value == summary["traced"]["batched_vs_handfixed"]
    # the sweep's median (of 1.1, 1.3, 1.4, 1.6, 2.0) and p90 for run-time functionalization
    rt = _by(ests, "per_formula", "batched")
    assert rt.value == pytest.approx(1.4) and rt.high == pytest.approx(1.84)
    nodes = _by(ests, "traced", "batched, traced graph")
    assert nodes.value == pytest.approx(1 / inputs["fallback"]["summary"]["median_speedup"])
    every = [e for e in ests if e.candidate != "python floor"]
    assert {e.candidate for e in every} == set(cpp_cost.CANDIDATES)
    assert all(e.basis and e.value is not None for e in ests if e.candidate != "composite" or e.unit != "ops")


def test_a_change_in_the_input_changes_the_estimate(inputs):
    base = cpp_cost.estimates(inputs)
    doubled = dict(inputs, coverage_cost=_costs([2.2, 2.6, 2.8, 3.2, 4.0]))
    assert _by(cpp_cost.estimates(doubled), "whole").value == pytest.approx(2 * _by(base, "whole").value)
    slower = copy.deepcopy(inputs)
    for r in slower["bench"]["batched"]:  # traced 1.5x slower: ratios are recomputed from samples
        if r["label"] == "traced":
            r["samples"] = [s * 1.5 for s in r["samples"]]
    assert _by(cpp_cost.estimates(slower), "traced").value == pytest.approx(
        1.5 * _by(base, "traced").value, rel=1e-6)
    fast = copy.deepcopy(inputs)
    fast["fallback"]["summary"]["median_speedup"] = 2.0
    assert _by(cpp_cost.estimates(fast), "traced", "batched, traced graph").value == 0.5


def test_missing_inputs_are_not_measured(inputs):
    empty = {"sources": dict(cpp_cost.FILES), **{k: None for k in cpp_cost.FILES}}
    ests = cpp_cost.estimates(empty)
    assert all(e.value is None for e in ests)
    text = cpp_cost.text(ests, empty)
    assert "not measured" in text and "Not found (not measured): data/bench-quick.json" in text
    partial = dict(inputs, coverage_cost=None)
    assert _by(cpp_cost.estimates(partial), "hooks", "batched").value is None
    assert _by(cpp_cost.estimates(partial), "traced").value is not None


def test_estimates_are_deterministic_and_fit_100_columns(inputs):
    a, b = cpp_cost.estimates(inputs), cpp_cost.estimates(copy.deepcopy(inputs))
    assert a == b
    for render in (cpp_cost.text(a, inputs), cpp_cost.markdown(a, inputs)):
        too_wide = [line for line in render.splitlines() if len(line) > 100]
        assert not too_wide, too_wide[:3]
    assert "assumes:" in cpp_cost.text(a, inputs) and "falsified by:" in cpp_cost.text(a, inputs)
    narrow = cpp_cost.text(a, inputs, width=70)
    assert max(len(line) for line in narrow.splitlines()) <= 70


def test_load_inputs_reads_the_saved_files(tmp_path):
    (tmp_path / cpp_cost.FILES["fallback"]).write_text((DATA / cpp_cost.FILES["fallback"]).read_text())
    got = cpp_cost.load_inputs(tmp_path)
    assert got["fallback"]["summary"]["measured"] > 0
    assert got["bench"] is None and got["coverage_cost"] is None and got["live"] is None
    assert not math.isnan(_by(cpp_cost.estimates(got), "traced", "batched, traced graph").value)
