"""Objection 8 (issue 28): the saved instruction counts (data/review-callgrind.json, from
valgrind's callgrind; minutes to re-run, so not re-run here) are consistent: the wrapper's cost
is the difference of its two counts, and the wrapped call costs more than the formula alone."""

from __future__ import annotations

from pathlib import Path

from funcbwd_lab.studies.review import callgrind

DATA = Path(__file__).resolve().parents[1] / "data"


def test_saved_counts_are_consistent():
    saved = callgrind.load(DATA)
    assert saved is not None and saved["schema"] == callgrind.SCHEMA
    i = saved["instructions_per_call"]
    assert set(i) == set(callgrind.STATEMENTS)
    assert saved["wrapper_adds"] == i["wrapped"] - i["formula"] > 0
    assert 0 < i["depth"] < saved["wrapper_adds"]
