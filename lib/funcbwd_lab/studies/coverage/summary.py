"""What the sweep's records say, per composition and strategy: counts, slow fallbacks,
regressions and fixes against ``builtin`` (torch as is).

Records pair by cell (op, sample, dtype, composition). For a functionalizing strategy:

* a **regression**: ``builtin`` passes the cell and the strategy fails or mismatches it;
* a **fix**: ``builtin`` fails or mismatches and the strategy passes with its mechanism ran;
  an **in-place fix** when ``builtin``'s failure is an in-place write meeting vmap (vmap's
  in-place error or the in-place shape error: :func:`funcbwd_lab.run.outcomes.is_inplace`);
* **unresolved**: either side ran out of budget (``timeout``): neither a pass nor a failure.

A ``timeout`` record is one of two things, counted apart (:func:`unfinished_kind`): **budget
spent** (the cell started and its budget ran out after some in_dims choices passed) or **not
started** (the op's budget was spent before the cell began: nothing of it ran). Neither is a pass,
and a regression count cannot see them: where ``builtin`` passes and the strategy's cell is
unfinished (``unknown``), the regression count is a lower bound (``at least``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

from funcbwd_lab.run.outcomes import STATUSES, is_inplace
from funcbwd_lab.studies.coverage import causes

BASELINE = "builtin"
Cell = tuple[str, str, str, str]  # op, sample, dtype, composition


def cell_of(r: dict[str, Any]) -> Cell:
    return (r["op"], r["sample"], r["dtype"], r["composition"])


def by_cell(records: Iterable[dict[str, Any]]) -> dict[Cell, dict[str, dict[str, Any]]]:
    """cell -> strategy -> record."""
    out: dict[Cell, dict[str, dict]] = {}
    for r in records:
        out.setdefault(cell_of(r), {})[r["strategy"]] = r
    return out


#: the counts of every composition x strategy row, in order (:func:`summarize`)
COUNTS = (*STATUSES, "budget_spent", "not_started", "fallback", "regressions", "unknown",
          "unknown_budget_spent", "unknown_not_started", "fixes", "inplace_fixes", "unresolved")


def unfinished_kind(r: dict[str, Any]) -> str | None:
    """``budget_spent`` / ``not_started`` for a ``timeout`` record (see the module docstring),
    None for any other: a cell none of whose trials ran never started."""
    if r["status"] != "timeout":
        return None
    return "not_started" if not r.get("trials_run") else "budget_spent"


def _bad(r: dict | None) -> bool:
    return r is not None and r["status"] in ("fail", "mismatch")


def compare_cell(base: dict | None, other: dict | None) -> str:
    """``regression`` / ``fix`` / ``inplace_fix`` / ``unresolved`` / ``same`` for one strategy's
    record against builtin's (see the module docstring)."""
    if base is None or other is None or "not_applicable" in (base["status"], other["status"]):
        return "same"
    if "timeout" in (base["status"], other["status"]):
        return "unresolved"
    if base["status"] == "pass" and _bad(other):
        return "regression"
    if _bad(base) and other["status"] == "pass" and other["mechanism_ran"]:
        return "inplace_fix" if is_inplace(base["reason"], base["message"]) else "fix"
    return "same"


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{"compositions": {comp: {strategy: {status counts, "budget_spent", "not_started",
    "fallback", "regressions", "unknown" (builtin passes, the strategy's cell unfinished; split
    into "unknown_budget_spent" / "unknown_not_started"), "fixes", "inplace_fixes",
    "unresolved"}}} (:data:`COUNTS`), "unknown": the number of those cells, "regressions": [...], "fixes": [...], "inplace_failures":
    [...], "regression_causes": {cause key or "unexplained": [...]}}`` (the lists: one entry per
    cell, with the strategy; the causes: :mod:`funcbwd_lab.studies.coverage.causes`)."""
    cells = by_cell(records)
    comps: dict[str, dict[str, Counter]] = {}
    regressions, fixes, inplace = [], [], []
    for cell, per in cells.items():
        base = per.get(BASELINE)
        if base is not None and base["status"] == "fail" and is_inplace(base["reason"], base["message"]):
            inplace.append({"cell": cell, "message": base["message"], "detail": base["detail"]})
        for st, r in per.items():
            c = comps.setdefault(cell[3], {}).setdefault(st, Counter())
            c[r["status"]] += 1
            unfinished = unfinished_kind(r)
            if unfinished:
                c[unfinished] += 1
            if r["status"] == "pass" and r["fallback_ops"]:
                c["fallback"] += 1
            if st == BASELINE:
                continue
            if unfinished and base is not None and base["status"] == "pass":
                c["unknown"] += 1  # a regression or not: nobody knows
                c[f"unknown_{unfinished}"] += 1
            kind = compare_cell(base, r)
            if kind == "regression":
                c["regressions"] += 1
                regressions.append({"cell": cell, "strategy": st, "status": r["status"],
                                    "reason": r["reason"], "message": r["message"]})
            elif kind in ("fix", "inplace_fix"):
                c["fixes"] += 1
                c["inplace_fixes"] += kind == "inplace_fix"
                fixes.append({"cell": cell, "strategy": st, "inplace": kind == "inplace_fix",
                              "builtin": base["reason"] or base["status"]})
            elif kind == "unresolved":
                c["unresolved"] += 1
    table = {comp: {st: {k: int(c.get(k, 0)) for k in COUNTS}
                    for st, c in per.items()} for comp, per in comps.items()}
    unknown = sum(c["unknown"] for per in table.values() for c in per.values())
    return {"compositions": table, "unknown": unknown, "regressions": regressions, "fixes": fixes,
            "inplace_failures": inplace, "regression_causes": causes.explain(regressions)}


def inplace_fixed_by(records: Sequence[dict[str, Any]], strategy: str) -> dict[str, int]:
    """Of the cells where builtin fails with vmap's in-place error: how many ``strategy`` passes
    (mechanism ran), fails, or leaves unresolved (budget)."""
    out = Counter()
    for cell, per in by_cell(records).items():
        base = per.get(BASELINE)
        if base is None or not (base["status"] == "fail" and is_inplace(base["reason"], base["message"])):
            continue
        r = per.get(strategy)
        if r is None:
            out["missing"] += 1
        elif r["status"] == "pass" and r["mechanism_ran"]:
            out["fixed"] += 1
        elif r["status"] == "timeout":
            out["unresolved"] += 1
        else:
            out["not_fixed"] += 1
    return dict(out)
