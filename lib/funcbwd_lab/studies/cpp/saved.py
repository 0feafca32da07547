"""The C++ study's saved run read back (``data/cpp.json``): per approach, its matrix verdicts and
its cost, and the targets judged on them. What the RFC generator reads: :func:`load`.

Everything is recomputed from the raw records in the file (cells, instruction counts, timing
samples); nothing stored as a summary is trusted. What was not measured stays None.

``load(path)`` returns a dict:

* ``approaches``: label -> ``{"role": "approach" | "reference", "counterpart": the Python
  strategy it mirrors, "matrix": {"cells": {op: {scenario: cell}}, "counts": {...}},
  "cost": [row, ...]}`` for the C++ strategies (``cpp_legacy``, ``cpp_handfixed``: references;
  ``cpp_composite``, ``cpp_guard``, ``cpp_whole``, ``cpp_traced``: approaches) and ``builtin``
  (cost only). A cell: ``status``, ``reason``, ``mechanism_ran``, ``slow_fallback`` (the ops that
  took vmap's per-sample fallback). ``counts``: the matrix summary's kinds (fixes over
  cpp_legacy, ...), ``pass_without_fallback`` and ``cells``. A cost row: ``kind`` ("node": one
  backward node in C++; "vjp": what a torch.func user runs), ``vmap`` (bool), ``op``, ``size``,
  ``batch`` (None with vmap off), ``verdict`` ("pass", else why it was not measured),
  ``instructions`` (per node application / per call; None: not counted), ``instructions_vs``
  (reference label -> ratio), ``time_vs`` (reference label -> ``{"ratio", "low", "high",
  "rounds"}``: median per-round ratio and its 95% interval), ``seconds`` (per application);
* ``triggers``: approach -> instructions per evaluation of its trigger with no transform active;
* ``noise``: the between-graph difference of two cpp_legacy node counts (vmap off), per op/size;
* ``targets``: each target per approach, judged (:data:`TARGETS`, :func:`judge`);
* ``summary``: per approach, the few numbers a ranking needs (:func:`summary`);
* ``probes``, ``extension``, ``python_matrix_differences`` (cells where a C++ strategy differs from
  its Python counterpart in the saved ``matrix-test-ops.json`` beside the file; None without it),
  ``schema``, ``torch``, ``when``, ``seconds`` (per stage).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any, Sequence

REFERENCES = ("cpp_legacy", "cpp_handfixed")
APPROACHES = ("cpp_composite", "cpp_guard", "cpp_whole", "cpp_traced")
COST_REFERENCES = ("builtin", "cpp_legacy", "cpp_handfixed")
#: the ops the bench's targets judge (the 5 whose legacy formula writes in place)
TARGET_OPS = ("diag", "index_select", "topk", "sort", "mode")


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    text: str
    basis: str  # "instructions" | "time"
    kind: str  # "node" | "vjp"
    vmap: bool
    reference: str
    threshold: float
    ops: tuple[str, ...]
    min_batch: int = 0


TARGETS = (
    Target("off_added", "vmap off, per backward node: <= 1.01x cpp_legacy's instructions (the "
           "legacy formula through the same C++ machinery), every op and size", "instructions",
           "node", False, "cpp_legacy", 1.01, ()),
    Target("batched_vs_builtin", "vmap on (B=64), per backward node: <= 1.2x builtin's "
           "instructions, the 5 in-place ops, small and large", "instructions", "node", True,
           "builtin", 1.2, TARGET_OPS, 64),
    Target("batched_vs_handfixed", "vmap on (B=64), per backward node: <= 1.1x cpp_handfixed's "
           "instructions (the mechanism alone), the 5 in-place ops", "instructions", "node", True,
           "cpp_handfixed", 1.1, TARGET_OPS, 64),
    Target("vjp_time_vs_builtin", "vmap(vjp), B >= 64: <= 1.2x builtin's time, the 5 in-place "
           "ops, small and large", "time", "vjp", True, "builtin", 1.2, TARGET_OPS, 64),
    Target("off_time", "vmap off, per backward node: <= 1.02x cpp_legacy's time, every op and "
           "size", "time", "node", False, "cpp_legacy", 1.02, ()),
)


def _case_key(r: dict[str, Any]) -> tuple:
    return (r["op"], r["size"], r["kind"], r["batch"], r.get("instance", 0))


def cost_rows(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """label -> cost rows (module docstring), from the checks, timings and counts of ``doc``."""
    checks = {(*_case_key(r), r["label"]): r["verdict"] for r in doc.get("check", [])}
    counted = {(*_case_key(r), r["label"]): r for r in doc.get("instructions", {}).get("rows", [])}
    timed = {(*_case_key(r), r["label"]): r for r in doc.get("time", {}).get("rows", [])}
    out: dict[str, list[dict[str, Any]]] = {}
    for key, verdict in sorted(checks.items(), key=lambda kv: json.dumps(kv[0], default=str)):
        op, size, kind, batch, instance, label = key
        if kind == "trigger" or instance:
            continue
        c, t = counted.get(key), timed.get(key)
        row = {"kind": kind, "vmap": batch is not None, "op": op, "size": size, "batch": batch,
               "verdict": verdict, "instructions": c["instructions"] if c else None,
               "instructions_vs": {}, "time_vs": {},
               "seconds": t.get("per_application_s") if t else None}
        for ref in COST_REFERENCES:
            rc = counted.get((op, size, kind, batch, 0, ref))
            if c and rc and ref != label and rc["instructions"] > 0:
                row["instructions_vs"][ref] = c["instructions"] / rc["instructions"]
            if t and t.get(f"vs_{ref}"):
                row["time_vs"][ref] = t[f"vs_{ref}"]
        out.setdefault(label, []).append(row)
    return out


def _cells(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    from funcbwd_lab.studies.matrix import matrix, records as rec

    summary = matrix.summarize(rec.from_records(records))
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for (op, sc, st), c in summary.items():
        out.setdefault(st, {}).setdefault(op, {})[sc] = {
            "status": c["status"], "reason": c["reason"], "mechanism_ran": c["mechanism_ran"],
            "slow_fallback": c["fallback_ops"]}
    return out


def _counts(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The matrix summary's kinds with cpp_legacy in plain's place (fixes over the legacy formula
    as written in C++), plus ``pass_without_fallback``: passing cells where no op took vmap's
    per-sample fallback (the design review's ``no_fallback``), and ``cells`` (applicable)."""
    from funcbwd_lab.studies.matrix import matrix, records as rec, summary

    cells = [dataclasses.replace(c, strategy="plain") if c.strategy == "cpp_legacy" else c
             for c in rec.from_records(records)]
    counts = summary.counts(cells)
    counts["cpp_legacy"] = counts.pop("plain")
    summ = matrix.summarize(cells)
    for (op, sc, st), c in summ.items():
        st = "cpp_legacy" if st == "plain" else st
        k = counts[st]
        k["cells"] = k.get("cells", 0) + (c["status"] != "not_applicable")
        k["pass_without_fallback"] = k.get("pass_without_fallback", 0) + (
            c["status"] == "pass" and not c["fallback_ops"])  # the design review's no_fallback
    return counts


def _python_differences(doc: dict[str, Any], data_dir: Path) -> list[str] | None:
    from funcbwd_lab.studies.matrix import expectations, matrix, records as rec

    path = data_dir / "matrix-test-ops.json"
    if not path.exists():
        return None
    py = matrix.summarize(rec.load(path))
    cpp = matrix.summarize(rec.from_records(doc["matrix"]["records"]))
    out = []
    for (op, sc, st), c in sorted(cpp.items()):
        p = py.get((op, sc, expectations.CPP_COUNTERPART[st]))
        key = lambda x: (x["status"], x["reason"], x["mechanism_ran"])  # noqa: E731
        if p is None or key(p) != key(c):
            out.append(f"{st} {op} {sc}: {key(c)} vs {expectations.CPP_COUNTERPART[st]} "
                       f"{key(p) if p else 'not in the Python matrix'}")
    return out


def _judge_time(rows: list[dict[str, Any]], ref: str, thr: float) -> tuple[str, Any, Any]:
    cells = [r["time_vs"].get(ref) for r in rows]
    cells = [c for c in cells if c and not math.isnan(c.get("high") or math.nan)]
    if not cells:
        return "not measured", None, None
    worst = max(cells, key=lambda c: c["ratio"])
    if any(c["low"] > thr for c in cells):
        status = "missed"
        worst = max((c for c in cells if c["low"] > thr), key=lambda c: c["ratio"])
    elif all(c["high"] <= thr for c in cells):
        status = "met"
    else:
        status = "not resolved"
        worst = max((c for c in cells if c["high"] > thr), key=lambda c: c["ratio"])
    return status, worst["ratio"], worst


def judge(target: Target, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One target on one label's cost rows: ``status`` met / missed / not resolved (time only: the
    interval straddles the threshold) / not measured, ``value`` (the worst ratio), ``where``,
    ``missing`` (cases in scope that were not measured, with why: each one a miss)."""
    scope = [r for r in rows if r["kind"] == target.kind and r["vmap"] == target.vmap
             and (not target.ops or r["op"] in target.ops)
             and (r["batch"] or 0) >= target.min_batch]
    if target.basis == "instructions":
        scope = [r for r in scope if r["instructions"] is not None or r["verdict"] != "pass"]
    missing = [f"{r['op']} {r['size']} B={r['batch']}: {r['verdict']}" for r in scope
               if r["verdict"] != "pass"]
    ok = [r for r in scope if r["verdict"] == "pass"]
    if target.basis == "instructions":
        vals = [(r["instructions_vs"].get(target.reference), r) for r in ok]
        vals = [(v, r) for v, r in vals if v is not None]
        if not vals:
            status, value, where = "not measured", None, None
        else:
            value, r = max(vals, key=lambda vr: vr[0])
            status = "met" if value <= target.threshold and not missing else "missed"
            where = {k: r[k] for k in ("op", "size", "batch")}
    else:
        status, value, cell = _judge_time(ok, target.reference, target.threshold)
        where = cell
        if missing and status != "not measured":
            status = "missed"
    return {"name": target.name, "text": target.text, "basis": target.basis,
            "threshold": target.threshold, "status": status, "value": value, "where": where,
            "missing": missing}


def load(path: str | Path) -> dict[str, Any]:
    """``path`` (the study's JSON) read back as the module docstring says."""
    s = _load(path)
    s["summary"] = summary(s)
    return s


def _load(path: str | Path) -> dict[str, Any]:
    from funcbwd_lab.studies.matrix import expectations

    path = Path(path)
    doc = json.loads(path.read_text())
    if doc.get("schema") != "funcbwd-cpp/1":
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected funcbwd-cpp/1")
    rows = cost_rows(doc)
    records = doc.get("matrix", {}).get("records", [])
    cells, counts = (_cells(records), _counts(records)) if records else ({}, {})
    approaches: dict[str, Any] = {}
    for label in (*REFERENCES, *APPROACHES):
        approaches[label] = {
            "role": "reference" if label in REFERENCES else "approach",
            "counterpart": expectations.CPP_COUNTERPART[label],
            "matrix": {"cells": cells.get(label, {}), "counts": counts.get(label, {})},
            "cost": rows.get(label, [])}
    approaches["builtin"] = {"role": "reference", "counterpart": "builtin",
                             "matrix": None, "cost": rows.get("builtin", [])}
    counted = doc.get("instructions", {}).get("rows", [])
    return {
        "schema": doc["schema"], "torch": doc.get("torch"), "when": doc.get("when"),
        "seconds": doc.get("seconds", {}), "extension": doc.get("extension"),
        "probes": doc.get("probes", []), "approaches": approaches,
        "triggers": {r["label"]: r["instructions"] for r in counted if r["kind"] == "trigger"},
        "noise": noise(counted),
        "targets": {label: [judge(t, approaches[label]["cost"]) for t in TARGETS]
                    for label in APPROACHES},
        "python_matrix_differences": (_python_differences(doc, path.parent) if records else None),
    } | {"summary": {}}


def summary(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per C++ strategy: ``fixes`` (over cpp_legacy), ``pass_without_fallback``, ``not_passing``
    (matrix cells), ``trigger`` (instructions per formula call with no transform, None for an
    approach with no trigger), ``node_b64_vs_builtin`` / ``node_b64_vs_handfixed`` (median and
    worst over the 5 in-place ops and both sizes of one node's instructions at B=64, as ratios),
    ``vjp_time_b64_vs_builtin`` (median over those ops and sizes of the vmap(vjp) time ratio at
    B=64) and ``off_added`` (median over every op and size of the instructions one node adds to
    cpp_legacy's with vmap off)."""
    out = {}
    for label in (*REFERENCES, *APPROACHES):
        a = s["approaches"][label]
        c = a["matrix"]["counts"]
        rows = [r for r in a["cost"] if r["op"] in TARGET_OPS and r["batch"] == 64]
        node = [r["instructions_vs"] for r in rows if r["kind"] == "node"]
        t = [r["time_vs"]["builtin"]["ratio"] for r in rows
             if r["kind"] == "vjp" and r["time_vs"].get("builtin")]
        legacy = {(r["op"], r["size"]): r["instructions"] for r in s["approaches"]["cpp_legacy"]["cost"]
                  if r["kind"] == "node" and not r["vmap"]}
        added = [r["instructions"] - legacy[r["op"], r["size"]] for r in a["cost"]
                 if r["kind"] == "node" and not r["vmap"] and r["instructions"] is not None
                 and legacy.get((r["op"], r["size"])) is not None]

        def stat(ref: str) -> dict[str, float | None]:
            vals = [v[ref] for v in node if ref in v]
            return {"median": median_or_none(vals), "worst": max(vals) if vals else None}

        out[label] = {"fixes": c.get("fixes"), "pass_without_fallback": c.get("pass_without_fallback"),
                      "not_passing": c.get("not_passing"), "trigger": s["triggers"].get(label),
                      "node_b64_vs_builtin": stat("builtin"),
                      "node_b64_vs_handfixed": stat("cpp_handfixed"),
                      "vjp_time_b64_vs_builtin": median_or_none(t),
                      "off_added": median_or_none(added)}
    return out


def noise(counted: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per op and size: two independent cpp_legacy node graphs' instruction counts (vmap off)
    and their relative difference: what two graphs of the same code differ by."""
    by = {(r["op"], r["size"], r.get("instance", 0)): r["instructions"] for r in counted
          if r["kind"] == "node" and r["batch"] is None and r["label"] == "cpp_legacy"}
    out = []
    for (op, size, inst), a in sorted(by.items()):
        b = by.get((op, size, 1))
        if inst == 0 and b is not None:
            out.append({"op": op, "size": size, "instructions": [a, b],
                        "relative": abs(a - b) / min(a, b)})
    return out


def median_or_none(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else None
