"""Objection 7 (issue 28): the functionalized cache's hit rates on call sequences
(funcbwd.studies.review.cache_hits, saved in data/review-cache-hits.json). The saved training-loop
numbers are a fresh run; the finding is pinned: a float scalar that changes per call misses on
every call, the same value as a 0-dim tensor misses once."""

from __future__ import annotations

from pathlib import Path

import pytest

from funcbwd.studies.review import cache_hits

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
