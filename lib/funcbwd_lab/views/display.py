"""Display helpers shared by the notebooks: tables, a heatmap, verdicts and sources.

Everything here turns *computed* results (``funcbwd_lab.run.runner.CellResult`` lists and the like)
into something to look at; nothing here decides an outcome (weighing strategies against each
other is :mod:`funcbwd_lab.studies.review.review`; its decision is drawn by :mod:`funcbwd_lab.studies.review.decision`).
Text reprs are deterministic (no timings, no addresses) so nbval can compare them: a change in
library results changes the notebook's stored text and fails CI. Rich objects carry both
``_repr_html_``/``_repr_markdown_`` and a plain-text ``__repr__``; no IPython import is needed.
"""

from __future__ import annotations

import html
import inspect
import textwrap
from typing import Any, Callable, Iterable, Mapping, Sequence

from funcbwd_lab import tables
from funcbwd_lab.tables import Rich  # noqa: F401 (the notebooks call it display.Rich)
from funcbwd_lab.studies.review.review import fallback_names, strategy_score
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.studies.matrix.matrix import STATUS_LABEL, STATUS_ORDER, STATUS_SHORT, cell_kind, cell_text
from funcbwd_lab.run.outcomes import REASONS
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab import figstyle

# Colour-blind-safe-ish traffic light; n/a is grey.
STATUS_COLOR = {
    "pass": "#1a9850",
    "pass_fallback": "#a6d96a",
    "without_mechanism": "#d9f0d3",
    "mismatch": "#fdae61",
    "fail": "#d73027",
    "timeout": "#9e9ac8",
    "uninformative": "#f0f0f0",
    "not_applicable": "#bdbdbd",
}


# ------------------------------------------------------------------------------ notebook setup
def setup_notebook(seed: int = 0) -> None:
    """Make a notebook's outputs reproducible and small: seeded torch, plotly's mimetype
    renderer (~8 KB per figure, renders offline; ``notebook`` would store ~5 MB)."""
    import os
    import warnings

    import plotly.io as pio
    import torch

    # torch.profiler (used by funcbwd_lab.studies.trace.trace) logs timestamped kineto lines on stderr; level 6
    # silences them (read lazily at the first profile, so setting it here is in time).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    pio.renderers.default = "plotly_mimetype"
    pio.renderers["plotly_mimetype"].config = dict(figstyle.CONFIG)  # toolbar on hover, no logo
    torch.manual_seed(seed)
    # vmap's slow-fallback warning is data (the matrix records it), not noise on stderr.
    warnings.filterwarnings("ignore", message=".*performance drop because we have not yet implemented.*")


# ------------------------------------------------------------------------------ cell summaries
def cell_hover(cell: Mapping[str, Any]) -> str:
    """Hover text: status, classified reason, fallback ops, failing samples, first message line."""
    lines = [f"<b>{html.escape(cell_text(cell, long=True))}</b>",
             f"samples passed: {cell['passed']}/{cell['total']}"]
    if cell["reason"]:
        lines.append("reason: " + html.escape(REASONS.get(cell["reason"], cell["reason"])))
    if cell["fallback_ops"]:
        lines.append("slow fallback for: " + html.escape(", ".join(fallback_names(cell["fallback_ops"]))))
    if cell.get("mechanism"):
        lines.append("what ran: " + html.escape(textwrap.shorten(cell["mechanism"], 120)))
    if cell["failing_samples"]:
        lines.append("failing samples: " + html.escape("; ".join(cell["failing_samples"][:4])))
    if cell["message"] and cell["status"] != "pass":
        lines.append("message: " + html.escape(textwrap.shorten(cell["message"], 120)))
    return "<br>".join(lines)


def _axes(results: Sequence[CellResult]) -> tuple[list[str], list[str], list[str]]:
    ops = list(dict.fromkeys(r.op for r in results))
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    strategies = list(dict.fromkeys(r.strategy for r in results))
    return ops, scenarios, strategies


# ------------------------------------------------------------------------------ tables
def matrix_text(results: Sequence[CellResult]) -> str:
    """The library's text table (``matrix.format_table``), the one compared by nbval."""
    return matrix.format_table(results)


def matrix_table(results: Sequence[CellResult], caption: str = "") -> Rich:
    """An HTML table (op x scenario rows, strategy columns) coloured by status; reprs as text."""
    summary = matrix.summarize(results)
    ops, scenarios, strategies = _axes(results)
    head = "".join(f"<th>{html.escape(s)}</th>" for s in ["op", "scenario", *strategies])
    rows = []
    for op in ops:
        for sc in scenarios:
            cells = [f"<td>{html.escape(op)}</td><td>{html.escape(sc)}</td>"]
            for st in strategies:
                c = summary.get((op, sc, st))
                if c is None:
                    cells.append("<td></td>")
                    continue
                kind = cell_kind(c)
                title = html.escape(cell_hover(c).replace("<br>", "\n").replace("<b>", "").replace("</b>", ""))
                cells.append(f'<td style="background:{STATUS_COLOR[kind]}" title="{title}">'
                             f"{html.escape(cell_text(c, long=True))}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    table = (f'<table class="funcbwd-matrix">{cap}<thead><tr>{head}</tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>")
    return Rich(matrix_text(results), table)


def records_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                  caption: str = "", fmt: Callable[[Any], str] | None = None) -> Rich:
    """A generic HTML/text table of dict rows (decision tables, per-op summaries); the text fits
    100 columns (:func:`funcbwd_lab.tables.table`)."""
    columns = list(columns or (records[0].keys() if records else []))
    fmt = fmt or _fmt
    text_rows = [columns] + [[fmt(r.get(c, "")) for c in columns] for r in records]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                   for row in text_rows[1:])
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return Rich(tables.table(columns, text_rows[1:]), f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return "" if v is None else str(v)


# ------------------------------------------------------------------------------ heatmap
def matrix_heatmap(results: Sequence[CellResult], title: str = "op x scenario x strategy"):
    """A plotly heatmap: rows op / scenario, columns strategy, colour = status with a categorical
    legend (one entry per status shown); hover shows the classified failure reason, what ran,
    the fallback ops and the failing samples."""
    import plotly.graph_objects as go

    summary = matrix.summarize(results)
    ops, scenarios, strategies = _axes(results)
    code = {k: i for i, k in enumerate(STATUS_ORDER)}
    rows = [(op, sc) for op in ops for sc in scenarios]
    z, text, hover, seen = [], [], [], set()
    for op, sc in rows:
        zr, tr, hr = [], [], []
        for st in strategies:
            c = summary.get((op, sc, st))
            if c is None:
                zr.append(None), tr.append(""), hr.append("not run")
                continue
            kind = cell_kind(c)
            seen.add(kind)
            zr.append(code[kind] + 0.5)  # centre of its colour band
            tr.append(STATUS_SHORT[kind])
            hr.append(f"{op} / {sc} / {st}<br>" + cell_hover(c))
        z.append(zr), text.append(tr), hover.append(hr)
    n = len(STATUS_ORDER)
    colorscale = []
    for i, k in enumerate(STATUS_ORDER):
        colorscale += [[i / n, STATUS_COLOR[k]], [(i + 1) / n, STATUS_COLOR[k]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=strategies, y=[f"{op} · {sc}" for op, sc in rows], text=text,
        texttemplate="%{text}", customdata=hover, hovertemplate="%{customdata}<extra></extra>",
        colorscale=colorscale, zmin=0, zmax=n, xgap=1, ygap=1, showscale=False, name="cells",
        showlegend=False,
    ))
    figstyle.status_legend(fig, [k for k in STATUS_ORDER if k in seen], STATUS_LABEL, STATUS_COLOR)
    figstyle.style(fig, title, x_title="strategy", y_title="op · scenario",
                   height=max(360, 22 * len(rows) + 230), left=230, legend_title="cell status:",
                   x_on_top=True,
                   caption="A cell is one op in one scenario under one strategy, over every sample "
                           "run: its status is the worst sample's. ok* = passed, but the strategy's "
                           "own mechanism did not run in every sample (nothing to functionalize there).")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category")
    return fig


# ------------------------------------------------------------------------------ verdicts
def _by_strategy(results: Sequence[CellResult]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (op, sc, st), cell in matrix.summarize(results).items():
        out.setdefault(st, {})[sc] = cell
    return out


def _join(xs: Iterable[str]) -> str:
    xs = list(xs)
    if len(xs) <= 1:
        return "".join(xs)
    return ", ".join(xs[:-1]) + " and " + xs[-1]


def _failing(s: Mapping[str, Any]) -> str:
    """'a, b and c' with wrong-result scenarios marked: a mismatch is worse than an error."""
    return _join(f"{sc} (wrong result)" if sc in s["wrong"] else sc for sc in s["failing"])


def verdict_text(op: str, results: Sequence[CellResult]) -> str:
    """A paragraph generated from the computed results for one op (so it cannot drift)."""
    rs = [r for r in results if r.op == op]
    if not rs:
        raise ValueError(f"no results for op {op!r}; ops in the results: "
                         f"{', '.join(sorted({r.op for r in results})) or '(none)'}")
    per = _by_strategy(rs)
    scores = {st: strategy_score(cells) for st, cells in per.items()}
    parts: list[str] = []
    if "plain" in scores:
        s = scores["plain"]
        if s["failing"]:
            reasons = _join(REASONS.get(r, r) for r in s["reasons"])
            parts.append(f"The legacy formula as written (plain) fails {len(s['failing'])} of "
                         f"{s['applicable']} applicable scenarios ({reasons}).")
        else:
            parts.append(f"The legacy formula as written (plain) passes all {s['applicable']} "
                         "applicable scenarios: the in-place line never meets a batched operand here.")
    if "builtin" in scores:
        s = scores["builtin"]
        parts.append(f"torch's modern formula (builtin) passes {s['passed']}/{s['applicable']}"
                     + (f", failing {_failing(s)}." if s["failing"] else "."))
    fixers, partial, slow = [], [], []
    for st, s in scores.items():
        if st in ("plain", "builtin"):
            continue
        if s["applicable"] and not s["failing"]:
            (slow if s["fallback"] else fixers).append(st)
        else:
            partial.append(st)
    if fixers:
        parts.append(f"{_join(fixers)} pass{'es' if len(fixers) == 1 else ''} every applicable "
                     "scenario without vmap's slow fallback.")
    if slow:
        ops = sorted({f for st in slow for f in scores[st]["fallback_ops"]})
        parts.append(f"{_join(slow)} pass{'es' if len(slow) == 1 else ''} every applicable scenario "
                     f"but use{'s' if len(slow) == 1 else ''} the slow per-sample fallback "
                     f"(for {_join(ops)}).")
    # Strategies with the same outcome share one sentence.
    groups: dict[tuple, list[str]] = {}
    for st in partial:
        s = scores[st]
        key = (s["passed"], s["applicable"], tuple(s["failing"]), tuple(s["wrong"]),
               tuple(s["reasons"]), tuple(s["not_applicable"]))
        groups.setdefault(key, []).append(st)
    for sts in groups.values():
        s, many = scores[sts[0]], len(sts) > 1
        if not s["applicable"]:
            parts.append(f"{_join(sts)} {'do' if many else 'does'} not apply "
                         f"({_join(s['not_applicable'])}).")
            continue
        reasons = _join(REASONS.get(r, r) for r in s["reasons"])
        parts.append(f"{_join(sts)} {'each pass' if many else 'passes'} {s['passed']}/{s['applicable']}; "
                     f"{'they fail' if many else 'it fails'} {_failing(s)} ({reasons}).")
    dd = [st for st, s in scores.items() if st != "plain" and "data_dependent" in s["reasons"]]
    if dd:
        parts.append(f"Data-dependent shapes or control flow stop {_join(dd)}: functionalization "
                     "removes in-place ops, not `.item()`, `nonzero` or value-dependent output shapes.")
    return " ".join(parts)


def verdict(op: str, results: Sequence[CellResult]) -> Rich:
    """The verdict paragraph for ``op`` as Markdown (text repr identical for nbval)."""
    text = verdict_text(op, results)
    return Rich("\n".join(textwrap.wrap(text, 100)), markdown=f"**Verdict for `{op}`.** {text}")


# ------------------------------------------------------------------------------ sources
def source(obj: Any, citation: str = "") -> Rich:
    """``obj``'s source (``inspect.getsource``) with its historical citation, as Markdown."""
    target = getattr(obj, "__wrapped_formula__", obj)
    code = textwrap.dedent(inspect.getsource(target)).rstrip()
    where = f"{target.__module__}.{target.__qualname__}"
    cite = f"\n\nHistorical source: {citation}" if citation else ""
    md = f"`{where}`{cite}\n\n```python\n{code}\n```"
    return Rich(f"# {where}{(' -- ' + citation) if citation else ''}\n{code}", markdown=md)


def formula_source(op: str) -> Rich:
    """The legacy formula of a catalog op, cited with its C++ origin and the fix that replaced it."""
    from funcbwd_lab.ops import registry

    spec = registry.get_op(op)
    return source(spec.formula, f"{spec.source}; later fixed by {spec.fixed_by}")
