"""Display helpers shared by the notebooks: tables, a heatmap, verdicts and sources.

Everything here turns *computed* results (``funcbwd_lab.run.runner.CellResult`` lists and the like)
into something to look at; nothing here decides an outcome (weighing strategies against each
other is :mod:`funcbwd_lab.studies.review.review`; its decision is drawn by :mod:`funcbwd_lab.studies.review.decision`).
Text reprs are deterministic (no timings, no addresses) so nbval can compare them: a change in
library results changes the notebook's stored text and fails CI. Rich objects carry both
``_repr_html_``/``_repr_markdown_`` and a plain-text ``__repr__``; no IPython import is needed.
"""

from __future__ import annotations

import difflib
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
from funcbwd_lab.views import markup

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
#: text on the dark status colours (the others take the page's dark grey)
STATUS_TEXT = {"pass": "#fff", "fail": "#fff"}


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


def cell_title(cell: Mapping[str, Any]) -> str:
    """A table cell's hover text, short (a table holds hundreds): status and samples passed, and
    for a cell that is not a plain pass the classified reason, the ops vmap fell back for and the
    failing samples (the heatmap's hover, :func:`cell_hover`, adds what ran and the message)."""
    parts = [f"{cell_text(cell, long=True)} ({cell['passed']}/{cell['total']} samples)"]
    if cell["reason"]:
        parts.append(REASONS.get(cell["reason"], cell["reason"]))
    if cell["fallback_ops"]:
        parts.append("slow fallback for: " + ", ".join(fallback_names(cell["fallback_ops"])))
    if cell["failing_samples"]:
        parts.append("failing samples: " + "; ".join(cell["failing_samples"][:3]))
    return "\n".join(parts)


def _axes(results: Sequence[CellResult]) -> tuple[list[str], list[str], list[str]]:
    ops = list(dict.fromkeys(r.op for r in results))
    scenarios = list(dict.fromkeys(r.scenario for r in results))
    strategies = list(dict.fromkeys(r.strategy for r in results))
    return ops, scenarios, strategies


# ------------------------------------------------------------------------------ tables
def matrix_text(results: Sequence[CellResult]) -> str:
    """The library's text table (``matrix.format_table``), the one compared by nbval."""
    return matrix.format_table(results)


def matrix_legend(cells: Iterable[Mapping[str, Any]]) -> list[tuple[str, str | None, str]]:
    """The marks the compact cell texts (:func:`matrix.cell_text`) of ``cells`` use, each with its
    colour and meaning, from the matrix's own vocabulary (``STATUS_SHORT``, ``STATUS_LABEL``,
    ``LEGEND``, ``REASON_CODE``, ``REASONS``): what a table of those cells shows and what its
    legend says come from one place."""
    cells = list(cells)
    kinds = {cell_kind(c) for c in cells}
    out: list[tuple[str, str | None, str]] = []
    for kind in STATUS_ORDER:
        if kind not in kinds:
            continue
        if kind == "fail":
            for r in dict.fromkeys(c["reason"] for c in cells if cell_kind(c) == "fail"):
                out.append((f"F:{matrix.REASON_CODE.get(r, r)}", STATUS_COLOR[kind],
                            "failed: " + (REASONS.get(r) or "other error")))
            continue
        out.append((STATUS_SHORT[kind], STATUS_COLOR[kind],
                    matrix.LEGEND.get(STATUS_SHORT[kind]) or STATUS_LABEL[kind]))
    if any(c["status"] in ("fail", "mismatch") and 0 < c["passed"] < c["total"] for c in cells):
        out.append(("k/n", None, matrix.LEGEND["k/n"]))
    return out


def matrix_table(results: Sequence[CellResult], caption: str = "", pick: str | None = None) -> Rich:
    """An HTML table (scenario rows, under a heading row per op; strategy columns) of each cell's
    compact mark (:func:`matrix.cell_text`) on its status colour, the long text on hover, and the
    legend of the marks used under it (:func:`matrix_legend`); ``pick``, the recommended strategy,
    is marked. Narrow enough for a 1280 px screen with JupyterLab's file browser open. The text
    repr is the library's text table (nbval compares it)."""
    summary = matrix.summarize(results)
    ops, scenarios, strategies = _axes(results)
    heads = ["scenario", *(f"{st} (pick)" if st == pick else st for st in strategies)]
    pick_style = "border-left:2px solid #1a9850;border-right:2px solid #1a9850"
    head_styles = [""] + [pick_style + ";background:#d9f0d3" if st == pick else "" for st in strategies]
    rows, styles, titles, groups = [], [], [], {}
    for op in ops:
        if len(ops) > 1:
            groups[len(rows)] = op
        for sc in scenarios:
            row, style, title = [sc], [""], [f"{op} / {sc}"]
            for st in strategies:
                c = summary.get((op, sc, st))
                extra = pick_style if st == pick else ""
                if c is None:
                    row.append(""), style.append(extra), title.append("not run")
                    continue
                kind = cell_kind(c)
                row.append(cell_text(c).replace(" ", "\u00a0"))  # a mark never wraps
                style.append(";".join(filter(None, [f"background:{STATUS_COLOR[kind]}",
                                                    f"color:{STATUS_TEXT[kind]}" if kind in STATUS_TEXT
                                                    else "", extra])))
                title.append(cell_title(c))
            rows.append(row), styles.append(style), titles.append(title)
    if len(ops) == 1 and ops:
        caption = caption or f"{ops[0]}: status per scenario and strategy"
    table = markup.table(heads, rows, caption=caption, nowrap=[0], cell_styles=styles,
                         titles=titles, head_styles=head_styles, groups=groups, compact=True)
    marks = matrix_legend(summary.values())
    dark = {STATUS_COLOR[k] for k in STATUS_TEXT}
    legend = markup.legend(marks, title="Each cell: the worst of its samples (hover for the reason, "
                                        "what ran and the failing samples). Marks:",
                           text_colors={m: "#fff" for m, color, _ in marks if color in dark})
    return Rich(matrix_text(results), f'<div class="funcbwd-matrix">{table}{legend}</div>')


def records_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                  caption: str = "", fmt: Callable[[Any], str] | None = None,
                  nowrap: Sequence[str] = ()) -> Rich:
    """A generic HTML/text table of dict rows (decision tables, per-op summaries); the text fits
    100 columns (:func:`funcbwd_lab.tables.table`); the ``nowrap`` columns (names) are never
    broken, the others wrap at spaces."""
    columns = list(columns or (records[0].keys() if records else []))
    fmt = fmt or _fmt
    rows = [[fmt(r.get(c, "")) for c in columns] for r in records]
    html_text = markup.table(columns, rows, caption=caption,
                             nowrap=[i for i, c in enumerate(columns) if c in nowrap])
    return Rich(tables.table(columns, rows), html_text)


def grouped_tables(columns: Sequence[str], groups: Sequence[tuple[str, str, bool, Sequence[Sequence[str]]]],
                   nowrap: Sequence[int] = ()) -> str:
    """One table per group under its ``<details>``, a group ``(name, note, open, rows)`` summarized
    as "**name**: note"; long names break after their separators only
    (:func:`markup.breakable`), so the tables fit a 1280 px screen whole, every field in full."""
    return "".join(markup.details(f"<b>{html.escape(name)}</b>: {html.escape(note)}", markup.table(
        columns, [[markup.breakable(str(c)) for c in row] for row in rows], escaped=True,
        nowrap=nowrap), opened) for name, note, opened, rows in groups)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return "" if v is None else str(v)


def graph_diff_html(d: Any) -> str:
    """A :class:`funcbwd_lab.studies.graphs.graphs.GraphDiff` side by side: removed lines red,
    added green, code in monospace keeping its indentation, long lines wrapping inside their
    half; inline styles only (the same stored as run)."""
    la, lb = d.lines()
    code = "font-family:monospace;white-space:pre-wrap;overflow-wrap:break-word;width:50%"
    rows, styles = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=la, b=lb, autojunk=False).get_opcodes():
        left, right = la[i1:i2], lb[j1:j2]
        for k in range(max(len(left), len(right))):
            lt = left[k] if k < len(left) else ""
            rt = right[k] if k < len(right) else ""
            rows.append([lt, rt])
            styles.append([code + ";border-right:1px solid #ccc" + ("" if tag == "equal" or not lt
                                                                    else ";background:#fdd"),
                           code + ("" if tag == "equal" or not rt else ";background:#dfd")])
    table = markup.table([d.a.title, d.b.title], rows, cell_styles=styles,
                         head_styles=["width:50%", "width:50%"], style="table-layout:fixed;width:100%")
    return f'<div class="funcbwd-graphdiff">{table}</div>'


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
#: code shown in an output: one size smaller than JupyterLab's, so a line of 100 columns fits the
#: output area of a 1280 px screen with the file browser open
CODE = "font-family:monospace;font-size:12px;white-space:pre;margin:4px 0"


def source(obj: Any, citation: str = "") -> Rich:
    """``obj``'s source (``inspect.getsource``) with its historical citation."""
    target = getattr(obj, "__wrapped_formula__", obj)
    code = textwrap.dedent(inspect.getsource(target)).rstrip()
    where = f"{target.__module__}.{target.__qualname__}"
    cite = f"<p>Historical source: {html.escape(citation)}</p>" if citation else ""
    text = f"# {where}\n" + (tables.paragraph(f"# {citation}", hanging="# ") + "\n" if citation else "")
    return Rich(text + code, f"<div><code>{html.escape(where)}</code>{cite}"
                f'<pre style="{CODE}">{html.escape(code)}</pre></div>')


def formula_source(op: str) -> Rich:
    """The legacy formula of a catalog op, cited with its C++ origin and the fix that replaced it."""
    from funcbwd_lab.ops import registry

    spec = registry.get_op(op)
    return source(spec.formula, f"{spec.source}; later fixed by {spec.fixed_by}")


def long_text(text: str, head: int, summary: str) -> Rich:
    """Text of many lines shown as its first ``head`` lines, the rest under a closed
    ``<details>`` with ``summary`` (an output taller than a few screens is a wall to scroll past);
    the text repr is the whole text (nbval compares it)."""
    lines = text.splitlines()
    if len(lines) <= head:
        return Rich(text, f'<pre style="{CODE}">{html.escape(text)}</pre>')
    rest = "\n".join(lines[head:])
    return Rich(text, f'<pre style="{CODE}">{html.escape(chr(10).join(lines[:head]))}</pre>'
                + markup.details(f"{html.escape(summary)} ({len(lines) - head} more lines)",
                                 f'<pre style="{CODE}">{html.escape(rest)}</pre>'))


def markdown(text: str) -> Rich:
    """Markdown shown as Markdown (its text repr the same text, for nbval); links must be resolved
    (:func:`funcbwd_lab.views.markup.resolve_links`): an unresolved reference link is refused."""
    left = markup.unresolved(text)
    if left:
        raise ValueError(f"unresolved reference links would show as text: {', '.join(left[:5])}")
    return Rich(text, markdown=text)


def document_part(text: str, heading: str, *, document: str, here: str = "notebooks",
                  until: str | None = None, keep_heading: bool = False) -> Rich:
    """A section of the Markdown document ``text`` (a file ``document`` of the repository, e.g.
    ``docs/rfc.md``), its reference links resolved to where they point from folder ``here``."""
    part = markup.section(text, heading, until=until, keep_heading=keep_heading)
    return markdown(markup.resolve_links(part, text, document, here))


# ------------------------------------------------------------------------------ saved runs
#: where a notebook (in ``notebooks/``) finds the saved runs
DATA = "../data"


def matrix_results(ops: Sequence[str] | None = None, *, recompute: bool = False,
                   data: str = DATA) -> list[CellResult]:
    """The cells of ``ops`` (default: all 8 test ops) from the saved matrix run
    (``data/matrix-test-ops.json``: every sample, scenario and strategy, written by
    ``tools/update_readme.py``; tests/test_readme.py keeps it equal to a fresh run), or with
    ``recompute`` the same cells run here (a minute or two per op, the slow ``compiled``
    strategy included)."""
    from funcbwd_lab.ops import registry
    from funcbwd_lab.strategies import available
    from funcbwd_lab.studies.matrix import records
    from funcbwd_lab.views.readme import MATRIX_FILE_NAME

    ops = list(ops or registry.TEST_OPS)
    if recompute:
        return matrix.run_matrix(ops, None, available())
    return [r for r in records.load(f"{data}/{MATRIX_FILE_NAME}") if r.op in ops]


def saved_decision(data: str = DATA) -> Any:
    """The decision (:func:`funcbwd_lab.studies.review.review.decision`) of the saved evidence
    (``data/review-evidence.json``): the README's, the overview's and the report's."""
    from funcbwd_lab.studies.review import review

    return review.decision(review.load_evidence(f"{data}/{review.EVIDENCE_FILE}"))
