"""Objection 2 (issue 28): the re-created formulas on a wrapper subclass (TwoTensor), meta and
fake tensors, eagerly and outside transforms. The saved table (data/review-subclass.json) is a
fresh run; the finding it carries is pinned on diag: the legacy in-place formula's result escapes
the subclass (a plain Tensor), the modern out-of-place one stays a TwoTensor."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.testing._internal.two_tensor import TwoTensor

import funcbwd_lab.ops as O
from funcbwd.fx.formula_graphs import formula_args_for
from funcbwd_lab.studies.review import subclass

DATA = Path(__file__).resolve().parents[1] / "data"


def test_saved_table_is_a_fresh_run():
    saved = subclass.load(DATA)
    assert saved is not None, "python -m funcbwd_lab.studies.review.subclass --out data/review-subclass.json"
    fresh = subclass.run()
    assert saved["rows"] == fresh["rows"] and saved["summary"] == fresh["summary"]


def test_legacy_diag_escapes_the_subclass_and_modern_does_not():
    op = O.get_op("diag")
    args = formula_args_for(op, op.sample("3x5 k=0"))  # non-square: the in-place copy_ path
    plain = op.formula(*args)
    legacy = op.formula(*[TwoTensor(a, a.clone()) if isinstance(a, torch.Tensor) else a
                          for a in args])
    modern = op.handfixed(*[TwoTensor(a, a.clone()) if isinstance(a, torch.Tensor) else a
                            for a in args])
    assert type(legacy) is torch.Tensor and torch.equal(legacy, plain)  # right values, wrong type
    assert type(modern) is TwoTensor and torch.equal(modern.a, plain) and torch.equal(modern.b, plain)
    meta = op.formula(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    assert meta.device.type == "meta" and meta.shape == plain.shape


def test_the_summary_counts_escapes_as_not_correct():
    """Mutation check: a row whose legacy TwoTensor cell returned a plain Tensor is counted as
    'plain Tensor', never 'correct'."""
    cell = {"type": "Tensor", "correct": False}
    assert subclass.outcome(cell) == "plain Tensor"
    rows = [{"op": "x", "legacy": {"two_tensor": cell, "meta": {"type": "Tensor", "correct": True},
                                   "fake": {"error": "E", "correct": False}}}]
    assert subclass.summarize(rows)["legacy"] == {"two_tensor": {"plain Tensor": 1},
                                                  "meta": {"correct": 1}, "fake": {"error": 1}}
