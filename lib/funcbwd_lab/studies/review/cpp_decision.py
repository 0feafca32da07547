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

(ratios to builtin, medians over the study's ops and sizes; a missing value is None: not
measured). :data:`CRITERIA` order the candidates: the matrix first (fixes, wrong results, cells
without the slow fallback), then what every user pays (instructions with vmap off), then the
batched cost (instructions, then time, with vmap on). The status quo is ranked with them: a
candidate that is not ahead of it on some criterion is not worth a PR. Without the file every
figure is "C++ cost: not yet measured", never a number.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from funcbwd_lab.studies.review import saved

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


def _key(row: Mapping[str, Any]) -> tuple:
    key = []
    for c in CRITERIA:
        v = row.get(c.name)
        key.append((1, 0.0) if v is None else (0, -float(v) if c.better == "max" else float(v)))
    return tuple(key)


def decide(approaches: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """The ranking (candidates and the status quo), the pick, and the first criterion on which each
    approach differs from the one ranked above it; ``measured`` False without data."""
    if not approaches:
        return {"measured": False, "why": f"{NOT_MEASURED}: data/{FILE} is not on this branch"}
    pool = {n: a for n, a in approaches.items() if a["role"] == "candidate" or n == STATUS_QUO}
    order = sorted(pool, key=lambda n: (_key(pool[n]), n))
    rows = []
    for i, n in enumerate(order):
        behind = ""
        if i:
            prev = _key(pool[order[i - 1]])
            behind = next((c.name for c, a, b in zip(CRITERIA, prev, _key(pool[n])) if a != b), "")
        rows.append({"rank": i + 1, "approach": n, "behind_on": behind, **pool[n]})
    pick = order[0]
    return {"measured": True, "pick": pick, "status_quo_wins": pick == STATUS_QUO, "rows": rows,
            "unmeasured": [c.label for c in CRITERIA
                           if any(pool[n].get(c.name) is None for n in pool)]}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE)


def _cell(c: Criterion, v: Any, row: Mapping[str, Any]) -> str:
    if v is None:
        return "not measured"
    if c.unit == "x":
        return f"{v:.2f}x"
    of = row.get("applicable") if c.name != "fixes" else row.get("plain_failures")
    return f"{int(v)}/{int(of)}" if of is not None else f"{int(v)}"


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
    lead = (f"**Pick on C++ numbers: `{decision['pick']}`**"
            + (" (the status quo: no candidate is ahead of torch's own formula)"
               if decision["status_quo_wins"] else "") + ".")
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
