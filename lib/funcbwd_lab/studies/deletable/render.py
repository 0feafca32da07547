"""Today's hand-written branches, rendered: the deletable-branches table of
:mod:`funcbwd_lab.studies.deletable.deletable` as markdown (README), HTML (report, notebooks) and text (CLI).

Rendering only: the criterion is :data:`funcbwd_lab.studies.deletable.deletable.CRITERION`, and the verdicts,
counts, headlines, classified reasons and shared fallbacks are computed from the saved rows by
:mod:`funcbwd_lab.studies.deletable.deletable` (:func:`~funcbwd_lab.studies.deletable.deletable.headline`,
:func:`~funcbwd_lab.studies.deletable.deletable.not_cleared`, :func:`~funcbwd_lab.studies.deletable.deletable.blocker_tally`,
:func:`~funcbwd_lab.studies.deletable.deletable.shared_fallback_sites`); nothing here decides a verdict. Every
view lists only the sites a strategy does not clear, each with a short reason (never raw error
text); the HTML wraps inside its container and the text fits 100 columns without breaking words.
"""

from __future__ import annotations

import html
import textwrap
from typing import Any

from funcbwd_lab.studies.deletable import deletable

LIVE_FILE_NAME = "live-deletable.json"
COMMAND = "python -m funcbwd_lab deletable --out data/live-deletable.json"
WIDTH = 100  # text columns


def reason_text(b: dict[str, Any]) -> str:
    """A blocker in a few words: its reason key (:data:`funcbwd_lab.studies.deletable.deletable.BLOCKERS`),
    the scenario it showed in, and for a slow fallback the op."""
    if b["reason"] == "cost":
        return f"cost above {deletable.COST_LIMIT}x"
    scenario = b["where"].split(" [", 1)[0]
    return b["reason"] + (f" in {scenario}" if scenario else "")


def _ops(b: dict[str, Any]) -> str:
    """The op that fell back (slow_fallback), or the one vmap had no rule for (a failure)."""
    return ", ".join(b["ops"])


def _cost(b: dict[str, Any]) -> str:
    return "" if b.get("cost_ratio") is None else f"{b['cost_ratio']:.2f}x"


def _tally(result: dict[str, Any], strategy: str) -> str:
    t = deletable.blocker_tally(result, strategy)
    return ", ".join(f"{reason} {n}" for reason, n in t.items()) or "none"


def _shared_line(result: dict[str, Any], strategy: str, code: str = "`") -> str | None:
    shared = deletable.shared_fallback_sites(result, strategy)
    if not shared:
        return None
    return (f"Deletable under {code}{strategy}{code} although vmap takes its slow per-sample fallback, "
            "as today's hand-written path does in the same cells: "
            + "; ".join(f"{code}{site}{code} ({', '.join(ops)})" for site, ops in shared))


def _source(result: dict[str, Any], source: str) -> str:
    return (f"From {source}: every site of torch/csrc/autograd/FunctionsManual.cpp at "
            f"{result.get('core_commit', '?')[:12]} (docs/live-sites.md), fast path vs core's "
            "out-of-place path, all applicable scenarios and samples; cost = batched time vs the "
            f"hand-written path (limit {result.get('cost_limit', deletable.COST_LIMIT)}x). Reasons: "
            + ", ".join(f"{k} ({v})" for k, v in deletable.BLOCKERS.items() if k in _reasons(result))
            + "; op: the op vmap ran through its per-sample fallback, or had no batching rule for. "
            f"Recompute: {COMMAND}")


def _reasons(result: dict[str, Any]) -> set[str]:
    return {b["reason"] for st in result["strategies"] for b in deletable.not_cleared(result, st)}


# ------------------------------------------------------------------------------ markdown (README)
def markdown(result: dict[str, Any], source: str = f"data/{LIVE_FILE_NAME}") -> str:
    """Headline per strategy, the criterion, then the sites the first strategy does not clear
    (classified reason, the op that fell back, cost) and a reason tally for the others."""
    deletable.check_schema(result)
    strategies = list(result["strategies"])
    lines = [f"- **{deletable.headline(result, st)}.**" for st in strategies]
    lines += ["", f"Criterion: {deletable.CRITERION}"]
    first = strategies[0]
    blocked = deletable.not_cleared(result, first)
    if blocked:
        lines += ["", f"Not cleared under `{first}`, and why:", "",
                  "| site | kind | reason | op | cost |", "|---|---|---|---|---|"]
        lines += [f"| `{b['site']}` | {b['kind']} | {reason_text(b)} | {_ops(b)} | {_cost(b)} |"
                  for b in blocked]
    shared = _shared_line(result, first)
    if shared:
        lines += ["", shared + "."]
    for st in strategies[1:]:
        lines += ["", f"Not cleared under `{st}` (counted in-place sites, by reason): {_tally(result, st)}."]
    lines += ["", "_" + _source(result, f"`{source}`").replace(COMMAND, f"`{COMMAND}`") + "._"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ HTML (report, notebooks)
_CELL = "padding:2px 6px;border:1px solid #ccc;text-align:left;vertical-align:top;overflow-wrap:anywhere"
_COLS = (("site", "34%"), ("kind", "9%"), ("reason", "27%"), ("op", "20%"), ("cost", "10%"))


def html_block(result: dict[str, Any]) -> str:
    """The same as :func:`markdown`, as HTML that wraps inside its container (fixed layout,
    inline styles, so a notebook's CSS cannot widen it)."""
    deletable.check_schema(result)
    esc = html.escape
    strategies = list(result["strategies"])
    parts = ["<div class='funcbwd-live' style='max-width:100%;overflow-wrap:anywhere'>",
             "<ul>" + "".join(f"<li><b>{esc(deletable.headline(result, st))}</b></li>" for st in strategies)
             + "</ul>", f"<p style='margin:4px 0'>Criterion: {esc(deletable.CRITERION)}</p>"]
    first = strategies[0]
    blocked = deletable.not_cleared(result, first)
    if blocked:
        cols = "".join(f"<col style='width:{w}'>" for _, w in _COLS)
        head = "".join(f"<th style='{_CELL};background:#eee'>{name}</th>" for name, _ in _COLS)
        body = "".join(
            "<tr>" + "".join(f"<td style='{_CELL}'>{cell}</td>" for cell in (
                f"<code>{esc(b['site'])}</code>", esc(b["kind"]), esc(reason_text(b)), esc(_ops(b)),
                esc(_cost(b)))) + "</tr>" for b in blocked)
        parts.append(f"<p style='margin:8px 0 4px'>Not cleared under <code>{esc(first)}</code>, and why:</p>"
                     "<table class='live' style='table-layout:fixed;width:100%;border-collapse:collapse;"
                     f"font-size:12px'><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table>")
    shared = _shared_line(result, first, code="")
    if shared:
        parts.append(f"<p style='margin:4px 0'>{esc(shared)}.</p>")
    for st in strategies[1:]:
        parts.append(f"<p style='margin:4px 0'>Not cleared under <code>{esc(st)}</code> (counted in-place "
                     f"sites, by reason): {esc(_tally(result, st))}.</p>")
    parts.append(f"<p style='font-size:12px;color:#555'>{esc(_source(result, LIVE_FILE_NAME))}</p></div>")
    return "\n".join(parts)


# ------------------------------------------------------------------------------ text (CLI)
def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _columns(rows: list[list[str]], wrap_last: bool = True) -> list[str]:
    """Rows of cells as text lines; the last column wraps (at word boundaries) to fit WIDTH."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    room = max(WIDTH - sum(widths) - 2 * len(widths), 20)
    lines = []
    for r in rows:
        last = _wrap(r[-1], room) if wrap_last else [r[-1]]
        lead = "  ".join(c.ljust(w) for c, w in zip(r, widths))
        lines.append(f"{lead}  {last[0]}".rstrip())
        lines += [" " * (len(lead) + 2) + more for more in last[1:]]
    return lines


def _short_cell(v: dict[str, Any]) -> str:
    ratio = "" if v["cost_ratio"] is None else f" {v['cost_ratio']:.2f}x"
    if v["verdict"] == "deletable":
        return ("yes*" if v["unjudged"] else "yes") + ratio
    return ("?" if v["blocker"]["reason"] == "undetermined" else "no") + ratio


def text(result: dict[str, Any]) -> str:
    """Every site with a yes/no (and cost) per strategy, then per strategy its headline and the
    sites it does not clear with their reasons; the criterion first. Fits 100 columns."""
    deletable.check_schema(result)
    strategies = list(result["strategies"])
    lines = _wrap("Criterion: " + deletable.CRITERION, WIDTH)
    sections = [("in-place sites (backward, jvp)", lambda r: r["kind"] != "control" and r["counted"]),
                ("negative controls (data-dependent)", lambda r: r["kind"] == "control"),
                ("registered again, not counted", lambda r: r["kind"] != "control" and not r["counted"])]
    for title, pred in sections:
        rows = [r for r in result["rows"] if pred(r)]
        if rows:
            lines += ["", f"== {title} ({len(rows)})"]
            lines += _columns([["site", "kind", *strategies]]
                              + [[r["site"], r["kind"], *(_short_cell(r["strategies"][st]) for st in strategies)]
                                 for r in rows], wrap_last=False)
    lines += ["", "yes* = deletable; some cells are unjudged (the hand-written path fails them too)"]
    for st in strategies:
        lines += [""] + _wrap(f"{st}: {deletable.headline(result, st)}.", WIDTH)
        blocked = deletable.not_cleared(result, st)
        if blocked:
            lines += _columns([["  site", "kind", "reason"]]
                              + [[f"  {b['site']}", b["kind"], " ".join(x for x in (
                                  reason_text(b), f"({_ops(b)})" if b["ops"] else "", _cost(b)) if x)]
                                 for b in blocked])
        shared = _shared_line(result, st, code="")
        if shared:
            lines += _wrap(shared + ".", WIDTH)
    return "\n".join(lines)
