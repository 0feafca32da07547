"""Objection 4 of the review (issue 28): "the pick rests on one missing batching rule". The
scenario: core adds ``aten::copy``'s batching rule, derivative and forward-AD formula (a small PR;
``funcbwd_lab.batching.copy`` is the batching rule prototyped in Python, scoped). Re-ranked from the
saved matrix (``data/matrix-test-ops.json``), nothing re-run:

* a passing sample whose only slow fallback ops are ``aten::copy`` passes without fallback;
* a failing sample whose error names ``aten::copy`` (no derivative, no forward-AD formula) is the
  scenario's unknown: it may pass once copy has those formulas, which only a re-run tells; the
  re-ranking is given twice, with those samples still failing and with them passing (the bounds).

The decision (:func:`funcbwd_lab.studies.review.review.decision`) is re-taken on the saved evidence
with the matrix counts replaced and, where the saved bench timed it, ``per_formula``'s batched
cost replaced by that of ``per_formula+copy_rule`` (the same strategy with the scoped Python
``aten::copy`` rule active: :data:`COPY_LABEL`); probes kept.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

MATRIX_FILE = "matrix-test-ops.json"
BENCH_FILE = "bench-quick.json"
COPY = "aten::copy"
#: the bench label of per_formula with the scoped aten::copy batching rule active
COPY_LABEL = "per_formula+copy_rule"
COST_KEYS = ("cost_vs_handfixed", "cost_vs_builtin")


def _names_copy(rec: dict[str, Any]) -> bool:
    return rec["status"] == "fail" and COPY in (rec.get("message") or "")


def rewrite(records: Sequence[dict[str, Any]], copy_failures_pass: bool) -> list[dict[str, Any]]:
    """The records as the scenario would have them (see the module docstring)."""
    out = []
    for r in records:
        r = dict(r)
        if r["status"] == "pass" and r["fallback_ops"]:
            r["fallback_ops"] = [o for o in r["fallback_ops"] if o != COPY]
        if copy_failures_pass and _names_copy(r):
            r.update(status="pass", reason="", message="", fallback_ops=[], mechanism_ran=True)
        out.append(r)
    return out


def scenario(records: Sequence[dict[str, Any]], evidence: Any,
             bench: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per candidate the criteria the scenario changes (today / scenario with copy failures still
    failing / with them passing) and the pick under each."""
    from funcbwd_lab.studies.matrix.records import from_records
    from funcbwd_lab.studies.review import review

    copy_failing = sorted({(r["op"], r["scenario"], r["strategy"]) for r in records
                           if _names_copy(r) and r["strategy"] in evidence.candidates})
    runs = {"today": list(records), "copy_failures_fail": rewrite(records, False),
            "copy_failures_pass": rewrite(records, True)}
    costs = review.cost_evidence(bench)[0] if bench is not None else {}
    with_rule = {k: costs[COPY_LABEL][k] for k in COST_KEYS} if COPY_LABEL in costs else None
    picks, values, why = {}, {}, {}
    for name, recs in runs.items():
        mx = review.matrix_evidence(from_records(recs))
        ev = copy.deepcopy(evidence)
        for st in ev.strategies:
            if st in mx:
                ev.strategies[st].update(mx[st])
        if name != "today" and with_rule is not None and "per_formula" in ev.strategies:
            ev.strategies["per_formula"].update(with_rule)
        d = review.decision(ev)
        picks[name] = d.pick
        why[name] = list(d.sentences)
        values[name] = {c: {k: mx[c][k] for k in ("passed", "no_fallback", "fixes", "failed")}
                        for c in evidence.candidates if c in mx}
    return {"picks": picks, "values": values, "why": why,
            "per_formula_cost": {"today": {k: evidence.strategies.get("per_formula", {}).get(k)
                                           for k in COST_KEYS}, "with_copy_rule": with_rule},
            "traced_cost": {k: evidence.strategies.get("traced", {}).get(k) for k in COST_KEYS},
            "applicable": {
                c: review.matrix_evidence(from_records(records))[c]["applicable"]
                for c in evidence.candidates},
            "copy_failing_cells": [list(c) for c in copy_failing]}


def load(data_dir: str | Path, evidence: Any) -> dict[str, Any] | None:
    path, bench = Path(data_dir) / MATRIX_FILE, Path(data_dir) / BENCH_FILE
    if not path.exists():
        return None
    return scenario(json.loads(path.read_text()), evidence,
                    json.loads(bench.read_text()) if bench.exists() else None)
