"""The pick on C++ numbers: the approaches built in C++ out of tree (the C++ study,
``funcbwd_lab.studies.cpp``, saved as ``data/cpp.json``), ranked as core would pay for them.

:func:`normalize` is the one place that reads the C++ study's file; it expects, per approach,
its role (``"candidate"`` or ``"reference"``: ``builtin``, torch's own formula, is the status quo),
its matrix verdicts (counts over the same op x scenario cells as the Python matrix) and its cost
against builtin, vmap on and off, in instructions (callgrind) and time::

    {"schema": "funcbwd-cpp/1", "torch": "...",
     "approaches": {NAME: {"role": "candidate" | "reference", "description": "...",
                           "matrix": {"applicable", "passed", "fixes", "plain_failures",
                                      "wrong", "no_fallback"},
                           "cost": {"vmap_on": {"instructions": x, "time": x},
                                    "vmap_off": {"instructions": x, "time": x}}}}}

(ratios to builtin; a missing value is None: not measured). :func:`from_study` writes this
shape from the C++ study's saved run (:func:`funcbwd_lab.studies.cpp.saved.load`): the four
approaches built in C++ are the candidates; torch's own formulas (``builtin``, already C++) are
the status quo, their matrix the Python matrix's builtin column (the same cells, run through
torch's compiled formulas), their cost 1.00x by definition. :data:`CRITERIA` order the
candidates: the matrix first (fixes, wrong results of their own, cells without the slow
fallback), then what every user pays (instructions with vmap off, median over every op and
size), then the batched cost (instructions at B=64, the worst of the 5 in-place ops and both
sizes, as the study's targets judge it; then the median ``vmap(vjp)`` time ratio at B=64). The
pick is the first candidate; the status quo is shown beside it with the first criterion on which
it is ahead (``status_quo_ahead_on``): torch's formulas are hand-written per op, so being behind
them on the 8 test ops is what a mechanism that writes no formula by hand trades. Without the
file every figure is "C++ cost: not yet measured", never a number.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Mapping


FILE = "cpp.json"
SCHEMA = "funcbwd-cpp/1"
STATUS_QUO = "builtin"
NOT_MEASURED = "C++ cost: not yet measured"


@dataclasses.dataclass(frozen=True)
class Criterion:
    name: str
    label: str
    better: str  # "max" | "min"
    path: tuple[str, ...]
    unit: str
    short: str = ""  # the table header


CRITERIA = (
    Criterion("fixes", "fixes over the legacy formulas", "max", ("matrix", "fixes"), "cells", "fixes"),
    Criterion("wrong", "wrong results", "min", ("matrix", "wrong"), "cells", "wrong"),
    Criterion("no_fallback", "passes without slow fallback", "max", ("matrix", "no_fallback"),
              "cells", "no fallback"),
    Criterion("off_instructions", "instructions vs builtin with vmap off", "min",
              ("cost", "vmap_off", "instructions"), "x", "instr., vmap off"),
    Criterion("on_instructions", "instructions vs builtin under vmap", "min",
              ("cost", "vmap_on", "instructions"), "x", "instr., vmap"),
    Criterion("on_time", "time vs builtin under vmap", "min", ("cost", "vmap_on", "time"), "x", "time, vmap"),
)


def _get(d: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, Mapping) or k not in d:
            return None
        d = d[k]
    return d


def normalize(doc: Mapping[str, Any] | None) -> dict[str, dict[str, Any]] | None:
    """approach -> {"role", "description", criterion name -> value (None: not measured), plus
    "applicable"}; None without the file."""
    if doc is None:
        return None
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{FILE}: schema {doc.get('schema')!r}, expected {SCHEMA}")
    out = {}
    for name, a in doc["approaches"].items():
        row = {"role": a.get("role", "candidate"), "description": a.get("description", "")}
        row.update({c.name: _get(a, c.path) for c in CRITERIA})
        row["applicable"] = _get(a, ("matrix", "applicable"))
        row["plain_failures"] = _get(a, ("matrix", "plain_failures"))
        out[name] = row
    return out


#: ratios closer than this are not told apart (instructions: twice the largest difference the C++
#: study measured between two graphs of the same node, 0.96%; time: a 2-core machine's noise)
RESOLUTION = {"x instructions": 0.02, "x time": 0.10}


def _resolution(c: Criterion) -> float:
    return RESOLUTION["x time" if c.name.endswith("time") else "x instructions"] if c.unit == "x" else 0.0


def _compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, str]:
    """-1 if ``a`` ranks above ``b``, 1 if below, 0 if no criterion tells them apart; and the
    first criterion that does. A missing value ranks below any number; ratios within
    :data:`RESOLUTION` of each other are a tie on that criterion."""
    for c in CRITERIA:
        x, y = a.get(c.name), b.get(c.name)
        if x is None or y is None:
            if (x is None) != (y is None):
                return (1 if x is None else -1), c.name
            continue
        x, y = float(x), float(y)
        if c.unit == "x" and abs(x - y) <= _resolution(c) * min(x, y):
            continue
        if x != y:
            better = x > y if c.better == "max" else x < y
            return (-1 if better else 1), c.name
    return 0, ""


def decide(approaches: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """The candidates ranked, the pick (the first), the first criterion on which each differs from
    the one ranked above it, and the status quo beside them (``status_quo_ahead_on`` and
    ``pick_ahead_on``: the criteria on which the status quo is better than the pick, and worse);
    ``measured`` False without data."""
    if not approaches:
        return {"measured": False, "why": f"{NOT_MEASURED}: data/{FILE} is not on this branch"}
    pool = {n: a for n, a in approaches.items() if a["role"] == "candidate"}
    order = sorted(pool, key=functools.cmp_to_key(
        lambda m, n: _compare(pool[m], pool[n])[0] or (m > n) - (m < n)))
    rows = [{"rank": i + 1, "approach": n,
             "behind_on": _compare(pool[order[i - 1]], pool[n])[1] if i else "", **pool[n]}
            for i, n in enumerate(order)]
    pick = order[0]
    sq = approaches.get(STATUS_QUO)
    ahead: list[str] = []
    behind: list[str] = []
    if sq is not None:
        for c in CRITERIA:
            one = {k: v for k, v in pool[pick].items() if k != c.name}
            sign = _compare({**one, c.name: pool[pick].get(c.name)}, {**one, c.name: sq.get(c.name)})[0]
            (behind if sign < 0 else ahead if sign > 0 else []).append(c.name)
        rows.append({"rank": "-", "approach": STATUS_QUO, "behind_on": "", **sq})
    return {"measured": True, "pick": pick, "status_quo_ahead_on": ahead, "pick_ahead_on": behind,
            "rows": rows,
            "unmeasured": [c.label for c in CRITERIA
                           if any(r.get(c.name) is None for r in rows)]}


def _median(xs: list[float]) -> float | None:
    import statistics

    return statistics.median(xs) if xs else None


def from_study(s: Mapping[str, Any], builtin_matrix: Mapping[str, Any] | None) -> dict[str, Any]:
    """The module docstring's shape from the C++ study's saved run ``s``
    (:func:`funcbwd_lab.studies.cpp.saved.load`) and the Python matrix's builtin column
    (``evidence.strategies["builtin"]``, for the status quo's matrix)."""
    from funcbwd_lab.studies.cpp.saved import APPROACHES, TARGET_OPS
    from funcbwd_lab.studies.matrix.summary import plain_fails

    legacy_fails = sum(plain_fails(c) for by_sc in s["approaches"]["cpp_legacy"]["matrix"]["cells"]
                       .values() for c in by_sc.values())
    approaches: dict[str, Any] = {}
    for label in APPROACHES:
        a, summ = s["approaches"][label], s["summary"][label]
        cells = [c for by_sc in a["matrix"]["cells"].values() for c in by_sc.values()
                 if c["status"] != "not_applicable"]
        wrong = [c for c in cells if c["status"] == "mismatch"]
        off = [r for r in a["cost"] if r["kind"] == "node" and not r["vmap"]]
        on = [r for r in a["cost"] if r["kind"] == "node" and r["vmap"] and r["batch"] == 64
              and r["op"] in TARGET_OPS]
        approaches[label] = {
            "role": "candidate", "description": f"built in C++ (Python: {a['counterpart']})",
            "matrix": {"applicable": len(cells), "passed": sum(c["status"] == "pass" for c in cells),
                       "fixes": summ["fixes"], "plain_failures": legacy_fails,
                       "wrong": len([c for c in wrong if c["reason"] != "legacy_wrong"]),
                       "no_fallback": summ["pass_without_fallback"]},
            "cost": {"vmap_off": {
                         "instructions": _median([r["instructions_vs"]["builtin"] for r in off
                                                  if "builtin" in r["instructions_vs"]]),
                         "time": _median([r["time_vs"]["builtin"]["ratio"] for r in off
                                          if r["time_vs"].get("builtin")])},
                     "vmap_on": {
                         "instructions": max((r["instructions_vs"]["builtin"] for r in on
                                              if "builtin" in r["instructions_vs"]), default=None),
                         "time": summ["vjp_time_b64_vs_builtin"]}}}
    if builtin_matrix is not None:
        b = builtin_matrix
        approaches[STATUS_QUO] = {
            "role": "reference", "description": "torch's own formulas (hand-written per op)",
            "matrix": {"applicable": b["applicable"], "passed": b["passed"], "fixes": b["fixes"],
                       "plain_failures": b["plain_failures"],
                       "wrong": b["wrong"] - b.get("wrong_inherited", 0),
                       "no_fallback": b["no_fallback"]},
            "cost": {"vmap_off": {"instructions": 1.0, "time": 1.0},
                     "vmap_on": {"instructions": 1.0, "time": 1.0}}}
    return {"schema": SCHEMA, "torch": s.get("torch"), "when": s.get("when"),
            "approaches": approaches}


def load(data_dir: str | Path, evidence: Any = None) -> dict[str, Any] | None:
    """data/cpp.json read through the C++ study's own reader, in the module docstring's shape
    (None without the file); ``evidence``: the review evidence (the status quo's matrix)."""
    from funcbwd_lab.studies.cpp import saved as cpp_saved

    path = Path(data_dir) / FILE
    if not path.exists():
        return None
    builtin = None if evidence is None else evidence.strategies.get(STATUS_QUO)
    return from_study(cpp_saved.load(path), builtin)


def _cell(c: Criterion, v: Any, row: Mapping[str, Any]) -> str:
    if v is None:
        return "not measured"
    if c.unit == "x":
        return f"{v:.2f}x"
    of = row.get("applicable") if c.name != "fixes" else row.get("plain_failures")
    return f"{int(v)}/{int(of)}" if of is not None else f"{int(v)}"


def short(decision: Mapping[str, Any]) -> str:
    """The pick, for the README's first screen (the comparison in full: :func:`markdown`)."""
    if not decision["measured"]:
        return f"**{decision['why']}.**"
    return (f"**The pick on C++ numbers: `{decision['pick']}`** ([docs/cpp.md](docs/cpp.md), "
            "[RFC](docs/rfc.md#the-decision-on-c-numbers)).")


def markdown(decision: Mapping[str, Any]) -> list[str]:
    """The section's lines: the pick and the table, or why there is none yet."""
    from funcbwd_lab.tables import WIDTH, paragraph

    if not decision["measured"]:
        return [paragraph(
            f"**{decision['why']}.** No pick is made: the question is about C++ (a guard in "
            "FunctionsManual.cpp, a composite op, a prologue in generated code), and no approach "
            "has a C++ number on this branch. When data/cpp.json is there, "
            "this section ranks each approach built in C++ with torch's own formula (the status "
            f"quo) on, in order: {'; '.join(c.label for c in CRITERIA)} (funcbwd_lab.studies."
            "review.cpp_decision).", WIDTH), ""]
    by = {c.name: c for c in CRITERIA}
    lead = f"**Pick on C++ numbers: `{decision['pick']}`**, first of the approaches built in C++."
    rows = {r["approach"]: r for r in decision["rows"]}

    def versus(names: list[str]) -> str:
        p, q = rows[decision["pick"]], rows[STATUS_QUO]
        return " and ".join(f"{by[n].label} ({_cell(by[n], p[n], p)} against "
                            f"{_cell(by[n], q[n], q)})" for n in names)

    if STATUS_QUO in rows:
        ahead, behind = decision["pick_ahead_on"], decision["status_quo_ahead_on"]
        lead += (" Against torch's own formulas (the status quo, hand-written per op), it is "
                 + (f"ahead on {versus(ahead)}" if ahead else "ahead on nothing")
                 + (f" and behind on {versus(behind)}: what a mechanism that writes no formula "
                    "by hand gives up on the 8 test ops." if behind else " and behind on nothing."))
    lead += (" Criteria, in ranking order: " + "; ".join(c.label for c in CRITERIA) + " (vmap off: "
             "median over every op and size; under vmap: instructions at B=64, the worst of the "
             "5 in-place ops and both sizes, and the median vmap(vjp) time ratio at B=64; "
             "docs/cpp.md has every number).")
    out = [paragraph(lead, WIDTH), "",
           "| rank | approach | " + " | ".join(c.short for c in CRITERIA) + " |",
           "|---|---|" + "---|" * len(CRITERIA)]
    for r in decision["rows"]:
        cells = [(f"**{_cell(c, r.get(c.name), r)}**" if r["behind_on"] == c.name
                  else _cell(c, r.get(c.name), r)) for c in CRITERIA]
        out.append(f"| {r['rank']} | `{r['approach']}` | " + " | ".join(cells) + " |")
    out.append("")
    if decision["unmeasured"]:
        out += [paragraph("Not measured for every approach: " + ", ".join(decision["unmeasured"])
                          + ".", WIDTH), ""]
    return out
