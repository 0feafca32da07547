"""The README's strategies table is generated from the saved matrix, and the saved matrix is what
a fresh run computes (so neither can drift, and the matrix JSON is deterministic across runs)."""

from __future__ import annotations

import json
from pathlib import Path

from funcbwd.studies.matrix import records
from funcbwd.views import readme

# The repository's files (the library renders; paths are the repository's, tools/update_readme.py).
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MATRIX_FILE = ROOT / "data" / readme.MATRIX_FILE_NAME
BENCH_FILE = ROOT / "data" / readme.BENCH_FILE_NAME


def test_readme_strategies_table_is_generated_from_the_saved_matrix():
    text = README.read_text()
    assert readme.block(text, "strategies") == readme.strategies_markdown(records.load(MATRIX_FILE))


def test_saved_matrix_equals_a_fresh_run(test_ops_matrix):
    """``test_ops_matrix`` (tests/conftest.py) is the session's one fresh run of the matrix."""
    fresh = records.stable_records(test_ops_matrix)
    ran = {r["strategy"] for r in fresh}  # the slow strategies' saved cells: tests/test_expectations.py
    saved = [r for r in json.loads(MATRIX_FILE.read_text()) if r["strategy"] in ran]
    assert len(saved) == len(fresh)
    diffs = [(s["op"], s["sample"], s["scenario"], s["strategy"], s["status"], f["status"])
             for s, f in zip(saved, fresh) if s != f]
    assert not diffs, f"{len(diffs)} records differ; regenerate with tools/update_readme.py: {diffs[:5]}"


def test_readme_bench_headline_is_generated_from_the_saved_run():
    from funcbwd.studies.bench import results as bench_results

    text = README.read_text()
    assert readme.block(text, "bench") == readme.bench_markdown(bench_results.load(BENCH_FILE))


EVIDENCE_FILE = ROOT / "data" / readme.EVIDENCE_FILE_NAME


def test_readme_decision_block_is_generated_from_the_saved_evidence():
    from funcbwd.studies.review import review

    text = README.read_text()
    assert readme.block(text, "decision") == readme.decision_markdown(review.load_evidence(EVIDENCE_FILE))


def test_saved_evidence_counts_are_the_saved_matrix_counts():
    """The evidence's counts (what the decision weighs) are those of the saved matrix, which
    test_saved_matrix_equals_a_fresh_run compares with a fresh run; a stale evidence file fails."""
    from funcbwd.studies.review import review

    evidence = review.load_evidence(EVIDENCE_FILE)
    results = records.load(MATRIX_FILE)
    assert evidence.basis == review.basis(results) and evidence.basis["samples"] == "all"
    counts = review.matrix_evidence(results)
    keys = ("fixes", "plain_failures", "wrong", "no_fallback", "applicable", "passed", "without_mechanism")
    diffs = [f"{st}.{k}: evidence {evidence.strategies[st][k]} vs matrix {counts[st][k]}"
             for st in counts for k in keys if evidence.strategies[st][k] != counts[st][k]]
    assert not diffs, "regenerate with python tools/update_readme.py: " + "; ".join(diffs)
    assert evidence.unsolved == review.unsolved_cells(results, evidence.candidates)


def test_notebooks_show_the_decision_of_the_saved_evidence():
    """00_overview and design_review open with the decision block; their stored outputs name the
    pick the saved evidence gives (the README's)."""
    import re

    from funcbwd.studies.review import review

    pick = review.decision(review.load_evidence(EVIDENCE_FILE)).pick
    for name in ("00_overview", "design_review"):
        nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
        texts = ["".join(o.get("data", {}).get("text/plain", "")) for c in nb["cells"]
                 if c["cell_type"] == "code" for o in c.get("outputs", [])]
        shown = {m.group(1) for t in texts for m in [re.match(r"'?Decision: (\w+)", t)] if m}
        assert shown == {pick}, f"{name}.ipynb shows decision {shown or 'none'}, the evidence gives {pick}"


def test_readme_live_block_is_generated_from_the_saved_table():
    from funcbwd.studies.deletable import render as live

    saved = json.loads((ROOT / "data" / live.LIVE_FILE_NAME).read_text())
    assert readme.block(README.read_text(), "live") == live.markdown(saved)
    assert "of 36 hand-written branches" in readme.block(README.read_text(), "live")


def test_readme_coverage_block_is_generated_from_the_saved_sweep():
    from funcbwd.measure import coverage_summary
    from funcbwd.views import coverage

    cov = str(ROOT / "data" / coverage.COVERAGE_FILE_NAME)
    expected = coverage.markdown(coverage_summary.load(cov), coverage_summary.load_meta(cov),
                                 coverage_summary.load_cost(cov))
    assert readme.block(README.read_text(), "coverage") == expected
