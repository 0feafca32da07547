"""Objection 7 (issue 28): the functionalized cache's hit rates on call sequences
(funcbwd_lab.studies.review.cache_hits, saved in data/review-cache-hits.json). The saved training-loop
numbers are a fresh run; the finding is pinned: a float scalar that changes per call misses on
every call, the same value as a 0-dim tensor misses once."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcbwd_lab.studies.review import cache_hits

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def saved():
    doc = cache_hits.load(DATA)
    assert doc is not None and doc["schema"] == cache_hits.SCHEMA
    return doc


@pytest.mark.parametrize("name", ["float_scalar_per_step", "tensor_scalar_per_step"])
def test_saved_loop_is_a_fresh_run(saved, name):
    assert saved["loops"][name] == cache_hits.run_loop(name)


def test_a_changing_float_misses_every_call_and_a_tensor_scalar_once(saved):
    loops = saved["loops"]
    assert loops["float_scalar_per_step"]["hits"] == 0
    assert loops["float_scalar_per_step"]["misses"] == loops["float_scalar_per_step"]["calls"]
    assert loops["tensor_scalar_per_step"]["misses"] == 1
    assert loops["per_sample_grads"]["misses"] == 1  # the vmapped batch size is not in the key


def test_corpus_summary_is_recomputed_from_its_rows(saved):
    assert cache_hits.summarize_corpus(saved["corpus"]) == saved["corpus_summary"]


def test_bounded_caches_change_no_result_of_the_traced_evidence():
    """The traced column re-run with the bounded default and with maxsize=1 (eviction on nearly
    every call) equals the saved unbounded run; a fresh maxsize=1 run of diag agrees."""
    import json

    from funcbwd_lab.studies.matrix import matrix
    from funcbwd_lab.studies.matrix.records import stable_records
    from funcbwd_lab.studies.review import cache_bound

    saved = cache_bound.load(DATA)
    assert saved is not None and saved["schema"] == cache_bound.SCHEMA
    assert all(r["differ_from_unbounded"] == [] for r in saved["runs"].values())
    assert saved["runs"]["1"]["traces"] > saved["runs"]["None"]["traces"]
    assert saved["runs"]["256"]["largest_cache"] < 256
    want = {(r["sample"], r["scenario"]): r["status"]
            for r in json.loads((DATA / cache_bound.MATRIX_FILE).read_text())
            if r["strategy"] == "traced" and r["op"] == "diag"}
    with cache_bound.traced_maxsize(1) as built:
        got = {(r["sample"], r["scenario"]): r["status"] for r in
               stable_records(matrix.run_matrix(ops=["diag"], strategies=["traced"]))}
    assert got == want
    assert built and max(w.cache_info().currsize for w in built) == 1
