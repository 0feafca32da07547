"""Every cell of a fresh test-op matrix against the reviewed table (funcbwd_lab.studies.matrix.expectations), and
what each strategy fixes over plain (funcbwd_lab.studies.matrix.summary), computed from the same run.

The matrix runs once per session (``test_ops_matrix`` in tests/conftest.py, shared with
tests/test_readme.py). Mutations: a wrong table entry and a pass whose mechanism did not run are
both reported by the comparison; a pass without mechanism never counts as a fix.
"""

from __future__ import annotations

import dataclasses

import pytest

from pathlib import Path

from funcbwd_lab.studies.matrix import expectations
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.studies.matrix import records
from funcbwd_lab.studies.matrix import summary
from funcbwd_lab.run.outcomes import REASONS, STATUSES
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab.strategies import available, get_strategy

TABLE = expectations.table()


MATRIX_FILE = Path(__file__).resolve().parents[1] / "data" / "matrix-test-ops.json"


@pytest.fixture(scope="module")
def cells(test_ops_matrix):
    """The session's fresh matrix, and the slow strategies' cells from the saved one (checked
    against a fresh run there by tests/test_compiled.py's live cells)."""
    saved = [r for r in records.load(MATRIX_FILE) if get_strategy(r.strategy).slow]
    return {**matrix.summarize(test_ops_matrix), **matrix.summarize(saved)}


@pytest.mark.parametrize("strategy,op,scenario", sorted(TABLE), ids=lambda x: x)
def test_cell_matches_the_reviewed_expectation(cells, strategy, op, scenario):
    e = TABLE[strategy, op, scenario]
    c = cells[op, scenario, strategy]
    got = (c["status"], c["reason"] if c["status"] != "pass" else "", c["mechanism_ran"])
    assert got == (e.status, e.reason, e.mechanism_ran), f"{e.why or 'expected a pass'}; got {c}"


def test_the_table_covers_exactly_the_matrix(cells):
    assert set(expectations.STRATEGIES) == set(available()), "review the new strategy's cells"
    assert {(st, op, sc) for op, sc, st in cells} == set(TABLE)


def test_every_exception_says_why():
    for key, e in TABLE.items():
        assert e.status in STATUSES and (e.reason in REASONS)
        assert (e.status == "fail") <= bool(e.reason) and (e.status != "pass" or not e.reason), key
        if e.status != "pass" or not e.mechanism_ran:
            assert e.why.strip(), f"{key}: a non-pass or plain-path pass needs a why"


def test_the_comparison_can_fail(cells, monkeypatch):
    assert expectations.differences(cells) == []
    wrong = expectations.RULES + [(["per_formula"], ["diag"], ["vmap_cotangents"],
                                   expectations.Expected("fail", "vmap_inplace", True, "mutation"))]
    monkeypatch.setattr(expectations, "RULES", wrong)
    assert len(expectations.differences(cells)) == 1
    monkeypatch.undo()
    no_mechanism = dict(cells)
    no_mechanism["diag", "vmap_cotangents", "per_formula"] = {
        **cells["diag", "vmap_cotangents", "per_formula"], "mechanism_ran": False}
    assert expectations.differences(no_mechanism) == [
        "per_formula diag vmap_cotangents: got ('pass', '', False), expected ('pass', '', True) (pass)"]


# ------------------------------------------------------------------------------ fixes over plain
def test_fixes_over_plain_partition_the_applicable_cells(test_ops_matrix, cells):
    fixes = summary.fixes_over_plain(test_ops_matrix)
    for st, kinds in fixes.items():
        listed = [c for k in summary.KINDS for c in kinds[k]]
        applicable = [(op, sc) for (op, sc, s), c in cells.items() if s == st and c["status"] != "not_applicable"]
        assert sorted(listed) == sorted(applicable), st
    assert fixes["plain"]["fixes"] == [] and ("diag", "vmap_cotangents") in fixes["per_formula"]["fixes"]
    assert ("masked_select", "grad_inside_vmap") in fixes["composite"]["without_mechanism"]
    assert ("diag", "vjp_of_vjp") in fixes["per_formula"]["without_mechanism"]
    text = summary.format_fixes(test_ops_matrix)
    assert all(st in text for st in fixes)


def _cell(strategy: str, status: str, ran: bool, op: str = "diag") -> CellResult:
    return CellResult(op, "s", "vmap_cotangents", strategy, status, mechanism_ran=ran)


def test_fixes_over_plain_kinds_and_mutation():
    results = [_cell("plain", "fail", True), _cell("x", "pass", True),
               _cell("plain", "pass", True, "sort"), _cell("x", "pass", True, "sort"),
               _cell("plain", "fail", True, "topk"), _cell("x", "mismatch", True, "topk")]
    got = summary.counts(results)["x"]
    assert (got["fixes"], got["also_plain"], got["not_passing"]) == (1, 1, 1)
    results[1] = dataclasses.replace(results[1], mechanism_ran=False)  # mutation: mechanism did not run
    got = summary.counts(results)["x"]
    assert (got["fixes"], got["without_mechanism"]) == (0, 1)
