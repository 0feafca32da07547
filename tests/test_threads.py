"""Objection 9 (issue 28): backward through traced strategy graphs on several threads at once
(:func:`funcbwd_lab.studies.review.threads.stress`): 4 threads x 12 calls under one cold ``traced``
strategy, results bit-equal to a single-threaded run, no thread hung (joined with a timeout), one
trace per signature across threads, the trace lock at rest after. Without the process-wide trace
lock the threads trace the same signatures more than once and the last assertion fails."""

from __future__ import annotations

from pathlib import Path

from funcbwd_lab.studies.review import threads

DATA = Path(__file__).resolve().parents[1] / "data"


def test_backward_on_four_threads_equals_single_threaded_and_does_not_deadlock():
    r = threads.stress(threads=4, calls=12, timeout_s=180)
    assert r["hung_threads"] == 0, "deadlock: a thread did not finish"
    assert r["errors"] == [] and r["finished"] == r["calls"] == 48
    assert r["unequal_ops"] == []
    assert r["lock_at_rest"]
    assert r["traces"] == r["traces_single_threaded"]


def test_saved_run_is_clean():
    saved = threads.load(DATA)
    assert saved is not None and saved["schema"] == threads.SCHEMA
    assert saved["hung_threads"] == 0 and saved["unequal_ops"] == [] and saved["errors"] == []
    assert saved["traces"] == saved["traces_single_threaded"]
