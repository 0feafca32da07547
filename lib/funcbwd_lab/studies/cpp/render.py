"""The C++ study's saved run as text: the tables of docs/cpp.md's generated block and of the
notebook (rendering only: every number comes from :func:`funcbwd_lab.studies.cpp.saved.load`).

``python -m funcbwd_lab.studies.cpp.render docs/cpp.md [--data data/cpp.json] [--force]`` rewrites
the block between the markers of the page (a committed page only with ``--force``).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from funcbwd_lab.studies.cpp.saved import APPROACHES, REFERENCES, TARGETS
from funcbwd_lab.tables import WIDTH, paragraph

BEGIN, END = "<!-- cpp-study:begin -->", "<!-- cpp-study:end -->"
LABELS = (*REFERENCES, *APPROACHES)


def _md(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _prose(text: str) -> str:
    """``text`` wrapped to the docs' width; a "- " bullet with its continuation indented."""
    if text.startswith("- "):
        return paragraph(text, WIDTH, hanging="  ")
    return paragraph(text, WIDTH)


def _x(v: float | None, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}x"


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def matrix_table(s: dict[str, Any]) -> str:
    rows = []
    for label in LABELS:
        a = s["approaches"][label]
        c = a["matrix"]["counts"]
        rows.append([f"`{label}`", f"`{a['counterpart']}`", c.get("cells", 0), c.get("fixes", 0),
                     c.get("pass_without_fallback", 0), c.get("without_mechanism", 0),
                     c.get("not_passing", 0), c.get("uninformative", 0)])
    return _md(["C++ strategy", "Python counterpart", "cells", "fixes over cpp_legacy",
                "pass, no slow fallback", "pass, mechanism not run", "not passing",
                "uninformative"], rows)


def probes_table(s: dict[str, Any]) -> str:
    return _md(["left out of the guard", "formula", "under vmap"],
               [[p["left_out"], f"`{p['op']}`", _cut(p["outcome"], 72)] for p in s["probes"]])


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 3].rstrip() + "..."


def _rows(s: dict[str, Any], label: str, kind: str, vmap: bool, batch: int | None = None
          ) -> list[dict[str, Any]]:
    return [r for r in s["approaches"][label]["cost"] if r["kind"] == kind and r["vmap"] == vmap
            and (batch is None or r["batch"] == batch)]


def off_table(s: dict[str, Any]) -> str:
    """Per op and size: instructions of one backward node with vmap off: builtin's, cpp_legacy's,
    and what each approach adds to cpp_legacy's."""
    rows = []
    legacy = {(r["op"], r["size"]): r for r in _rows(s, "cpp_legacy", "node", False)}
    builtin = {(r["op"], r["size"]): r for r in _rows(s, "builtin", "node", False)}
    for (op, size), lr in legacy.items():
        row = [f"`{op}`", size, _n(builtin.get((op, size), {}).get("instructions")),
               _n(lr["instructions"])]
        for label in APPROACHES:
            r = next((x for x in _rows(s, label, "node", False)
                      if x["op"] == op and x["size"] == size), None)
            add = (None if r is None or r["instructions"] is None or lr["instructions"] is None
                   else r["instructions"] - lr["instructions"])
            row.append("-" if add is None else f"{add:+,.0f}")
        rows.append(row)
    return _md(["op", "size", "builtin", "cpp_legacy", *(f"{a} - legacy" for a in APPROACHES)],
               rows)


def batched_table(s: dict[str, Any], batch: int = 64) -> str:
    """Per op and size: one backward node under vmap (B=``batch``), instructions as a ratio to
    builtin's; cpp_handfixed (the modern formula through the same machinery) for scale."""
    rows = []
    for r0 in _rows(s, "builtin", "node", True, batch):
        op, size = r0["op"], r0["size"]
        row = [f"`{op}`", size, _n(r0["instructions"])]
        for label in ("cpp_handfixed", *APPROACHES):
            r = next((x for x in _rows(s, label, "node", True, batch)
                      if x["op"] == op and x["size"] == size), None)
            row.append("fails" if r is not None and r["verdict"] != "pass"
                       else _x(r["instructions_vs"].get("builtin") if r else None))
        rows.append(row)
    return _md(["op", "size", f"builtin (B={batch})", "cpp_handfixed", *APPROACHES], rows)


def time_table(s: dict[str, Any], kind: str = "vjp") -> str:
    """Per label and batch (vmap off as "off"): the median over ops of the time ratio to builtin,
    small and large, with the range over ops."""
    batches: list[int | None] = sorted({r["batch"] for r in s["approaches"]["builtin"]["cost"]
                                        if r["kind"] == kind and r["batch"] is not None})
    rows = []
    for label in ("cpp_handfixed", *APPROACHES):
        for b in [None, *batches]:
            row = [f"`{label}`", "off" if b is None else f"B={b}"]
            for size in ("small", "large"):
                vals = [r["time_vs"]["builtin"]["ratio"] for r in s["approaches"][label]["cost"]
                        if r["kind"] == kind and r["batch"] == b and r["size"] == size
                        and r["time_vs"].get("builtin")]
                row.append("-" if not vals else
                           f"{statistics.median(vals):.2f}x ({min(vals):.2f}-{max(vals):.2f})")
            rows.append(row)
    return _md(["label", "batch", "small: median (range over ops)", "large"], rows)


def targets_table(s: dict[str, Any]) -> str:
    """One row per target (named; :func:`targets_legend` says each in full), one column per
    approach: status and the worst value."""
    rows = []
    for t in TARGETS:
        row = [f"`{t.name}`"]
        for label in APPROACHES:
            j = next(x for x in s["targets"][label] if x["name"] == t.name)
            v = "" if j["value"] is None else f" {j['value']:.2f}x"
            row.append(f"{j['status']}{v}")
        rows.append(row)
    return _md(["target", *APPROACHES], rows)


def targets_legend() -> str:
    return "\n".join(_prose(f"- `{t.name}`: {t.text}.") for t in TARGETS)


def triggers_line(s: dict[str, Any]) -> str:
    t = s["triggers"]
    if not t:
        return "The triggers were not counted (no callgrind in this run)."
    return ("With no transform active, each formula call pays its approach's trigger: "
            + ", ".join(f"`{k}` {v:.1f} instructions" for k, v in sorted(t.items()))
            + " per evaluation (a C++ loop of evaluations, counted by callgrind).")


def noise_line(s: dict[str, Any]) -> str:
    n = s["noise"]
    if not n:
        return ""
    worst = max(n, key=lambda r: r["relative"])
    return (f"Two independent graphs of the same `cpp_legacy` node differ by up to "
            f"{worst['relative'] * 100:.2f}% ({worst['op']}, {worst['size']}; "
            f"{abs(worst['instructions'][0] - worst['instructions'][1]):,.0f} instructions): "
            "an added count below that is within what the measurement resolves.")


def summary_table(s: dict[str, Any]) -> str:
    """Per C++ strategy, the numbers a ranking needs (:func:`funcbwd_lab.studies.cpp.saved.summary`)."""
    rows = []
    for label in LABELS:
        m = s["summary"][label]
        rows.append([f"`{label}`", m["fixes"], m["pass_without_fallback"], m["not_passing"],
                     "-" if m["trigger"] is None else f"{m['trigger']:.0f}",
                     "-" if m["off_added"] is None else f"{m['off_added']:+,.0f}",
                     _x(m["node_b64_vs_builtin"]["median"]), _x(m["node_b64_vs_builtin"]["worst"]),
                     _x(m["vjp_time_b64_vs_builtin"])])
    return _md(["C++ strategy", "fixes", "pass, no fallback", "not passing", "trigger (instr.)",
                "off: added instr. (median)", "B=64 node vs builtin (median)", "(worst)",
                "B=64 vjp time vs builtin"], rows)


def reading(s: dict[str, Any]) -> str:
    """What the targets say, per approach, as sentences computed from the judgments."""
    lines = []
    for label in APPROACHES:
        ts = s["targets"][label]
        met = [t["name"] for t in ts if t["status"] == "met"]
        other = [f"`{t['name']}` {t['status']}" + (
            f" ({t['value']:.2f}x" + (f" at {t['where']['op']}, {t['where']['size']}, "
                                      f"B={t['where']['batch']}" if t["basis"] == "instructions"
                                      and t["where"] else "") + ")" if t["value"] is not None else "")
            for t in ts if t["status"] != "met"]
        text = f"`{label}`: met " + (", ".join(f"`{m}`" for m in met) or "none")
        lines.append(_prose("- " + text + ("; " + "; ".join(other) if other else "") + "."))
    return "\n".join(lines)


def stages_line(s: dict[str, Any]) -> str:
    from funcbwd_lab.studies.cpp.run import STAGES

    sec = s.get("seconds") or {}
    return ("Stages of that run: " + ", ".join(f"{k} {sec[k] / 60:.1f} min" for k in STAGES
                                               if k in sec) + ".") if sec else ""


def block(s: dict[str, Any]) -> str:
    """The generated section of docs/cpp.md."""
    diffs = s["python_matrix_differences"]
    same = ("not compared (no saved Python matrix beside the data)" if diffs is None else
            "every cell equals its Python counterpart's" if not diffs else
            f"{len(diffs)} cells differ from their Python counterparts': " + "; ".join(diffs))
    ext = s["extension"] or {}
    cold = (ext.get("cold_build") or {}).get("seconds")
    parts = [
        f"_Computed from `data/cpp.json` (torch {s['torch']}, {s['when']}); the extension "
        f"`{ext.get('name', '?')}`" + (f", a cold build of {cold:.0f} s" if cold else "") + "._",
        stages_line(s), "### In one table", summary_table(s), reading(s),
        "### The matrix", f"Status, reason and whether the mechanism ran: {same}.",
        matrix_table(s),
        "### What option 2 takes beyond the guard, each piece left out once", probes_table(s),
        "### Cost with vmap off (what every user pays)", triggers_line(s),
        "Instructions of one backward node (C++ loop; grad mode off as in a plain backward):",
        off_table(s), noise_line(s),
        "### Cost under vmap", "One backward node at B=64, instructions as a ratio to builtin's:",
        batched_table(s),
        "`vmap(vjp_fn)` time as a ratio to builtin's (interleaved rounds, thread CPU time):",
        time_table(s),
        "### Targets", "Instruction targets are judged on the worst case; time targets on each "
        "case's 95% interval (not resolved: it straddles the threshold).", targets_legend(),
        targets_table(s),
    ]
    return "\n\n".join(p if p.startswith(("|", "- ", "#")) else _prose(p) for p in parts if p)


def update(page: str, s: dict[str, Any]) -> str:
    """``page`` with its generated block replaced by :func:`block`."""
    pat = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pat.search(page):
        raise ValueError(f"no {BEGIN} ... {END} block in the page")
    return pat.sub(lambda _: f"{BEGIN}\n{block(s)}\n{END}", page)


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab import command
    from funcbwd_lab.studies.cpp import saved

    prog = "python -m funcbwd_lab.studies.cpp.render"
    p = argparse.ArgumentParser(prog=prog, description="Rewrite docs/cpp.md's generated block "
                                "from the saved C++ study.")
    p.add_argument("page", help="the page (docs/cpp.md)")
    p.add_argument("--data", default="data/cpp.json", help="the saved study (data/cpp.json)")
    command.add_force(p)
    a = p.parse_args(argv)
    if command.out_refused(prog, a.page, a.force):
        return 2
    path = Path(a.page)
    path.write_text(update(path.read_text(), saved.load(a.data)))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
