"""The sweep as text, markdown and HTML tables: rendering only (the counts are
:mod:`funcbwd_lab.studies.coverage.summary`'s, the verdicts :mod:`funcbwd_lab.studies.coverage.verdicts`').
"""

from __future__ import annotations

import html
from typing import Any, Sequence

from funcbwd_lab.studies.coverage import verdicts as V
from funcbwd_lab.tables import WIDTH, paragraph, table

#: budget-spent and never-started cells are their own columns (neither is a pass); "unknown":
#: cells builtin passes whose strategy cell is unfinished, so "regr." is "at least" (>=) there
COLUMNS = ("pass", "fail", "mismatch", "uninformative", "budget_spent", "not_started",
           "not_applicable", "fallback", "regressions", "unknown", "fixes", "inplace_fixes")
HEADERS = ("pass", "fail", "wrong", "zero?", "budget spent", "not started", "n/a", "slow fb",
           "regr.", "unknown", "fixes", "in-place fixes")
_VS_BUILTIN = ("regressions", "unknown", "fixes", "inplace_fixes")


def _count(c: dict[str, int], k: str) -> str:
    if k == "regressions" and c.get("unknown"):
        return f">={c[k]}"  # a lower bound: the unknown cells could be regressions
    return str(c.get(k, 0))


def composition_rows(summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    for comp, per in summary["compositions"].items():
        for st, c in per.items():
            rows.append([comp, st] + [_count(c, k) if k not in _VS_BUILTIN or st != "builtin" else "-"
                                      for k in COLUMNS])
    return rows


def unfinished_line(summary: dict[str, Any]) -> str:
    """What the regression count rests on: the unfinished cells where builtin passes, by kind
    and strategy (empty when there are none)."""
    if not summary.get("unknown"):
        return ""
    per: dict[str, list[int]] = {}
    for comps in summary["compositions"].values():
        for st, c in comps.items():
            if c.get("unknown"):
                got = per.setdefault(st, [0, 0])
                got[0] += c["unknown_budget_spent"]
                got[1] += c["unknown_not_started"]
    parts = [f"{st} {b} budget spent + {n} not started" for st, (b, n) in per.items()]
    never = {st: sum(c["not_started"] for comps in summary["compositions"].values()
                     for s2, c in comps.items() if s2 == st)
             for st in next(iter(summary["compositions"].values()), {})}
    never_text = ", ".join(f"{st} {n}" for st, n in never.items() if n)
    return (f"Regression counts are lower bounds: in {summary['unknown']} cells builtin passes and "
            f"the strategy's cell did not finish ({'; '.join(parts)}); any of them could be a "
            "regression. 'budget spent': the cell's budget ran out after some in_dims choices "
            "passed; 'not started': the op's budget ran out before the cell began (neither is a "
            "pass)" + (f"; cells never started, for builtin too, so no verdict at all: {never_text}"
                       if never_text else "") + ". "
            "'zero?': uninformative (torch's answer is zero; a zero formula passes too; 0 in data "
            "recorded before that check existed). "
            "'slow fb' in data recorded before fallbacks were read from torch's C++ stderr "
            "(funcbwd_lab.run.outcomes.fallbacks_seen) counts Python-side warnings only: a lower bound "
            "for strategies that run graphs (traced_backward).")


def meta_line(meta: dict[str, Any]) -> str:
    samples = "; ".join(f"{d}: " + ", ".join(f"{c} {'all' if n is None else n}"
                                             for c, n in per.items())
                        for d, per in meta["samples"].items())
    return (f"{meta.get('ops', '?')} OpInfo ops, torch {meta.get('torch', '?')}; samples per "
            f"dtype and composition: {samples}; every in_dims choice (no cap), distinct batch "
            f"entries, budget {meta['budget_s']:g} s per cell and {meta['op_budget_s']:g} s per op "
            f"(a spent budget is 'budget spent' or, for a cell the op's budget left no time for, 'not "
            f"started': never a pass); {meta.get('workers', '?')} Dask workers, "
            f"{meta.get('seconds', 0) / 60:.0f} min."
            + (f" Re-run with the code of {meta['rerun']['commit']}: {', '.join(meta['rerun']['ops'])} "
               f"({meta['rerun']['why']})." if meta.get("rerun") else ""))


def cause_rows(summary: dict[str, Any]) -> list[list[str]]:
    """One row per cause of the regressions (unexplained last): key, torch or ours, cells,
    strategies, compositions, the reason."""
    from funcbwd_lab.studies.coverage import causes

    known = causes.by_key()
    rows = []
    for key, regs in sorted(summary["regression_causes"].items(), key=lambda kv: kv[0] == "unexplained"):
        c = known.get(key)
        rows.append([key, c.kind if c else "?", str(len(regs)),
                     ", ".join(sorted({r["strategy"] for r in regs})),
                     ", ".join(sorted({r["cell"][3] for r in regs})),
                     c.reason if c else "no reviewed cause: " + regs[0]["message"][:80]])
    return rows


def text(doc: dict[str, Any], summary: dict[str, Any], width: int = WIDTH) -> str:
    rows = composition_rows(summary)
    # two tables (fitting ``width``): the statuses, then what each strategy does against builtin
    split = COLUMNS.index("regressions")
    out = [paragraph(meta_line(doc["meta"]), width), "",
           table(["composition", "strategy", *HEADERS[:split]], [r[:2 + split] for r in rows],
                 width=width, align="ll" + "r" * split), "",
           table(["composition", "strategy", *(h + " vs builtin" if h in ("regr.", "fixes") else h
                                               for h in HEADERS[split:])],
                 [r[:2] + r[2 + split:] for r in rows if r[1] != "builtin"], width=width,
                 align="ll" + "r" * (len(COLUMNS) - split))]
    counts = V.counts(V.of_document(doc))
    if counts:
        out += ["", paragraph("upstream's expected failures, with the verdict computed on torch "
                              "2.13 from the records:", width),
                table(["test", *V.VERDICTS], [[t, *(str(c[v]) for v in V.VERDICTS)]
                                              for t, c in counts.items()], width=width,
                      align="l" + "r" * len(V.VERDICTS))]
    if unfinished_line(summary):
        out += ["", paragraph(unfinished_line(summary), width)]
    if summary["regressions"]:
        at_least = "at least " if summary.get("unknown") else ""
        out += ["", paragraph(f"regressions vs builtin: {at_least}{len(summary['regressions'])}, by cause "
                              "(funcbwd_lab.studies.coverage.causes):", width)]
        out += [paragraph(f"{key} ({kind}, {n} cells: {sts}; {comps}): {why}", width, "  ", "    ")
                for key, kind, n, sts, comps, why in cause_rows(summary)]
        out += ["", "the first 20:"] + [
            paragraph(f"{r['cell'][0]} sample {r['cell'][1]} {r['cell'][2]} {r['cell'][3]}: "
                      f"{r['strategy']} {r['status']} {r['reason']}", width, "  ", "    ")
            for r in summary["regressions"][:20]]
    return "\n".join(out)


def markdown(doc: dict[str, Any], summary: dict[str, Any]) -> str:
    """The README's ``coverage`` block."""
    lines = ["| composition | strategy | " + " | ".join(HEADERS) + " |",
             "|---|---|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(f"`{c}`" if i < 2 else c for i, c in enumerate(row)) + " |"
              for row in composition_rows(summary)]
    regress = len(summary["regressions"])
    unknown = summary.get("unknown", 0)
    if unknown:
        lines += ["", unfinished_line(summary)]
    lines += ["", (f"**At least {regress} regressions against builtin** among the finished cells "
                   f"({unknown} unknown)" if unknown else f"**{regress} regressions against builtin**")
              + ", each with its cause (reviewed data: `funcbwd_lab.studies.coverage.causes`, each cause "
                "shown by a test):" if regress else
              f"**No regression against builtin among the finished cells; {unknown} cells where "
              "builtin passes are unfinished (unknown).**" if unknown else
              "**No regressions against builtin.**"]
    if regress:
        lines += ["", "| cause | whose | cells | strategies | compositions | why |",
                  "|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |" for row in cause_rows(summary)]
    counts = V.counts(V.of_document(doc))
    if counts:
        lines += ["", "Upstream's expected failures (`test/functorch/test_ops.py`), each with a "
                      "verdict computed on torch 2.13:", "",
                  "| test | " + " | ".join(V.VERDICTS) + " |", "|---|" + "---|" * len(V.VERDICTS)]
        lines += [f"| `{t}` | " + " | ".join(str(c[v]) for v in V.VERDICTS) + " |"
                  for t, c in counts.items()]
    lines += ["", f"_{meta_line(doc['meta'])} From `data/coverage.json.gz`; recompute with "
                  "`python -m funcbwd_lab coverage --workers 2 --out data/coverage.json.gz --force` "
                  "(hours; resumable: `--resume`); `notebooks/coverage.ipynb` shows every verdict._"]
    return "\n".join(lines)


def verdict_rows(vs: Sequence[dict[str, Any]], only: Sequence[str] | None = None) -> list[list[str]]:
    """One row per entry, every field whole (a cut string would end mid-word)."""
    return [[v["test"].removeprefix("test_"), v["op"] + (f".{v['variant']}" if v["variant"] else ""),
             v["kind"], v["verdict"], v["reason"], v["evidence"]]
            for v in vs if only is None or v["verdict"] in only]


#: HTML tables here lay out by content and wrap only between words (JupyterLab's own table style
#: is fixed-layout; a fixed layout with break-word cut op names and messages mid-word)
TABLE_STYLE = ("table-layout:auto;width:100%;font-size:12px;overflow-wrap:normal;word-break:normal;"
               "border-collapse:collapse")
_CELL = "text-align:left;vertical-align:top;padding:1px 6px"
#: verdict groups shown open (short, and what the RFC quotes); the others open on a click
OPEN_VERDICTS = ("stale", "fixed", "torch_bug")


def _html_table(heads: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f'<th style="{_CELL}">{html.escape(h)}</th>' for h in heads)
    body = "".join("<tr>" + "".join(f'<td style="{_CELL}">{html.escape(str(c))}</td>' for c in row)
                   + "</tr>" for row in rows)
    return (f'<table style="{TABLE_STYLE}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def verdicts_html(vs: Sequence[dict[str, Any]], only: Sequence[str] | None = None) -> str:
    """The entries grouped by verdict, one collapsible table per verdict (its count and meaning
    in the summary; :data:`OPEN_VERDICTS` open), every field whole."""
    parts = []
    for verdict, meaning in V.VERDICTS.items():
        rows = verdict_rows([v for v in vs if v["verdict"] == verdict], only)
        if not rows:
            continue
        opened = " open" if verdict in OPEN_VERDICTS else ""
        parts.append(f"<details{opened}><summary><b>{verdict}</b>: {len(rows)} entries "
                     f"({html.escape(meaning)})</summary>"
                     + _html_table(("test", "op", "kind", "upstream's reason", "evidence"),
                                   [[r[0], r[1], r[2], r[4], r[5]] for r in rows])
                     + "</details>")
    return f'<div class="funcbwd-verdicts">{"".join(parts)}</div>'


def regression_groups(regressions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The regressions grouped by strategy, composition, status, reason and the message's first
    line: each group with its ops (cells per op) and its cell count, most cells first."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in regressions:
        first = r["message"].splitlines()[0] if r["message"] else ""
        key = (r["strategy"], r["cell"][3], r["status"], r["reason"], first)
        g = groups.setdefault(key, {"strategy": key[0], "composition": key[1], "status": key[2],
                                    "reason": key[3], "message": first, "ops": {}, "cells": 0})
        g["ops"][r["cell"][0]] = g["ops"].get(r["cell"][0], 0) + 1
        g["cells"] += 1
    return sorted(groups.values(), key=lambda g: (-g["cells"], g["strategy"], g["composition"]))


def _ops_text(ops: dict[str, int]) -> str:
    return ", ".join(op + (f" ({n})" if n > 1 else "") for op, n in sorted(ops.items()))


def regressions_text(regressions: Sequence[dict[str, Any]], width: int = WIDTH) -> str:
    """:func:`regression_groups` as wrapped text, lines <= ``width`` (nothing cut)."""
    out = [f"{len(regressions)} regression cells in {len(regression_groups(regressions))} groups"]
    for g in regression_groups(regressions):
        out.append(paragraph(f"{g['strategy']} {g['composition']}: {g['cells']} cells, "
                             f"{g['status']} {g['reason']}: {g['message']}", width, "- ", "    "))
        out.append(paragraph(f"ops: {_ops_text(g['ops'])}", width, "    ", "      "))
    return "\n".join(out)


def regressions_html(regressions: Sequence[dict[str, Any]]) -> str:
    """:func:`regression_groups` as one table (a row per group), collapsible, nothing cut."""
    groups = regression_groups(regressions)
    rows = [[g["strategy"], g["composition"], str(g["cells"]), f"{g['status']} {g['reason']}",
             g["message"], _ops_text(g["ops"])] for g in groups]
    return (f"<details open><summary>{len(regressions)} regression cells in {len(groups)} groups"
            "</summary>" + _html_table(("strategy", "composition", "cells", "status", "first line",
                                        "ops (cells)"), rows) + "</details>")
