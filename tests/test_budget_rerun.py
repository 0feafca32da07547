"""Objection 6 (issue 28): the re-run sample of the sweep's out-of-budget cells
(data/review-budget-rerun.json) is the even sample of exactly those cells of the saved sweep,
and a re-run that ran out of budget again is counted as such, never as a pass."""

from __future__ import annotations

from pathlib import Path

from funcbwd_lab.studies.coverage import data
from funcbwd_lab.studies.review import budget_rerun

DATA = Path(__file__).resolve().parents[1] / "data"


def test_the_sample_is_the_saved_sweeps_out_of_budget_cells():
    saved = budget_rerun.load(DATA)
    assert saved is not None and saved["schema"] == budget_rerun.SCHEMA
    cells = budget_rerun.budget_cells(data.load(DATA / "coverage.json.gz")["records"])
    assert saved["cells_out_of_budget"] == len(cells)
    step = max(1, len(cells) // budget_rerun.SAMPLE)
    assert [tuple(r["cell"]) for r in saved["rows"]] == cells[::step][:budget_rerun.SAMPLE]
    assert sum(saved["status"].values()) == saved["sampled"] == len(saved["rows"])
    for r in saved["rows"]:
        assert (r["status"] == "timeout") == ("not a pass" in r["message"])
