"""Objection 6 of the review (issue 28): the OpInfo sweep's cells where builtin passes and
``traced_backward`` spent its 3 s budget are neither pass nor failure. This re-runs a
deterministic sample of them (:data:`SAMPLE` cells spread evenly over the sorted list, cells that
started but ran out of time; not the ones whose op budget was spent before they started) with
:data:`BUDGET_S` per cell, through the sweep's own cell runner
(:func:`funcbwd_lab.studies.coverage.sweep.run_cell`). ``python -m
funcbwd_lab.studies.review.budget_rerun --out data/review-budget-rerun.json``.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import dataclasses
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

SCHEMA = "funcbwd-review-budget-rerun/1"
FILE = "review-budget-rerun.json"
SAMPLE, BUDGET_S = 12, 30.0
STRATEGY = "traced_backward"


def budget_cells(records: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """Cells (op, sample, dtype, composition) builtin passes and STRATEGY ran out of time on."""
    from funcbwd_lab.studies.coverage import summary

    out = []
    for cell, rs in summary.by_cell(records).items():
        b, t = rs.get("builtin"), rs.get(STRATEGY)
        if (b and t and b["status"] == "pass" and t["status"] == "timeout"
                and "before this cell started" not in (t["message"] or "")):
            out.append(cell)
    return sorted(out)


def run(records: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    from funcbwd.errors import first_line
    from funcbwd_lab.studies.coverage import opinfo, sweep

    cells = budget_cells(records)
    step = max(1, len(cells) // SAMPLE)
    chosen = cells[::step][:SAMPLE]
    plan = dataclasses.replace(sweep.DEFAULT_PLAN, budget_s=BUDGET_S)
    rows = []
    for op_id, i, dtype, comp in chosen:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op = opinfo.op_by_id(op_id)
            smp = opinfo.samples(op, getattr(torch, dtype), int(i) + 1)[int(i)]
            spec, sample = opinfo.case_for(op, smp, i)
            r = sweep.run_cell(spec, sample, comp, STRATEGY, plan)
        rows.append({"cell": [op_id, i, dtype, comp], "status": r.status,
                     "reason": r.reason, "message": first_line(r.message or "", 120),
                     "seconds": round(time.perf_counter() - start, 1)})
        print(op_id, comp, r.status, rows[-1]["seconds"], flush=True)
    return {"schema": SCHEMA, "torch": torch.__version__, "budget_s": BUDGET_S,
            "cells_out_of_budget": len(cells), "sampled": len(rows), "rows": rows,
            "status": dict(Counter(r["status"] for r in rows))}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab.studies.coverage import data

    return saved.main(__name__, __doc__, FILE,
                      lambda a: run(data.load(Path(a.data) / "coverage.json.gz")["records"]), argv,
                      data_option="the data directory (coverage.json.gz)",
                      summary=lambda doc: doc["status"])


if __name__ == "__main__":
    raise SystemExit(main())
