"""The decision block: which strategy, and why, drawn from a :class:`funcbwd_lab.studies.review.review.Decision`.

One rendering for every place the decision appears (the top of ``00_overview`` and
``design_review``, the report's first section, the README's ``decision`` block): the pick and its
three sentences, a table of candidates x criteria (units in the headers, the deciding value of
each candidate marked), the references for context, the basis of every count, and a chart of the
same numbers. Everything shown is read from the decision; nothing here weighs anything.
"""

from __future__ import annotations

import html
import textwrap
from typing import Any, Mapping

from funcbwd_lab.studies.review.review import Criterion, Decision
from funcbwd_lab.studies.review.text import value_text
from funcbwd_lab import figstyle
from funcbwd_lab.tables import Rich

PICK_COLOR, BEHIND_COLOR, OTHER_COLOR = "#1a9850", "#f46d43", "#9ecae1"
#: what the orange (chart) and bold (tables) mark: one criterion per candidate, the deciding one
BEHIND = "the criterion that ranks it behind the pick (the first on which they differ)"
_CSS = ("font:13px/1.45 system-ui,sans-serif;max-width:100%;border:2px solid #1a9850;"
        "border-radius:6px;padding:8px 12px;margin:4px 0;box-sizing:border-box")


def header(c: Criterion) -> str:
    """A column header with its unit: "fixes over plain [cells]"."""
    return f"{c.label} [{c.unit}]"


def _cell(c: Criterion, row: Mapping[str, Any]) -> str:
    return value_text(c, row.get(c.name), row.get("details"))


def table_rows(d: Decision) -> list[list[str]]:
    """The table as text cells: header, one row per candidate (ranked), then the references."""
    out = [["rank", "strategy", *(header(c) for c in d.criteria)]]
    out += [[str(r["rank"]), r["strategy"], *(_cell(c, r) for c in d.criteria)] for r in d.rows]
    out += [["ref", r["strategy"], *(_cell(c, r) for c in d.criteria)] for r in d.references]
    return out


def text(d: Decision, width: int = 100) -> str:
    """The block as plain text (what nbval compares): pick, sentences, table, basis."""
    lines = [f"Decision: {d.pick}" + (f" (runner-up: {d.runner_up})" if d.runner_up else "")]
    for s in d.sentences:
        lines += textwrap.wrap(s, width)
    rows = table_rows(d)
    cols = [[r[i] for r in rows] for i in range(len(rows[0]))]  # transposed: criteria as rows
    cols[0] = ["rank"] + cols[0][1:]
    widths = [max(len(v) for v in col) for col in zip(*cols)]
    # strategies as columns, in blocks that fit ``width`` (each block repeats the criteria labels)
    blocks, block = [], [1]
    for i in range(2, len(widths)):
        if sum(widths[j] + 2 for j in [0, *block, i]) - 2 > width:
            blocks.append(block)
            block = []
        block.append(i)
    blocks.append(block)
    for block in blocks:
        lines.append("")
        lines += ["  ".join(col[j].ljust(widths[j]) for j in [0, *block]).rstrip() for col in cols]
    lines.append("")
    lines += textwrap.wrap(footnote(d), width)
    return "\n".join(lines)


def footnote(d: Decision) -> str:
    """How to read the table, the basis of the counts, where the numbers come from, and the notes."""
    return " ".join([
        "Ranked on the columns left to right (the first one that differs decides; timings come last, "
        f"so they only break ties); marked (bold): {BEHIND}; ref rows are "
        f"references, not candidates; – = not measured. Counts over {d.basis}.",
        f"Costs: {d.sources.get('costs', '')}.", f"Probes: {d.sources.get('probes', '')}.", *d.notes])


def _md(s: str) -> str:
    """Backticks from the sentences become <code>; everything else is escaped."""
    parts = html.escape(s).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def html_block(d: Decision) -> str:
    """The block as self-contained HTML (inline styles only: it survives notebook sanitizers)."""
    head = "".join(f'<th style="padding:2px 6px;border:1px solid #ccc;background:#eee;'
                   f'text-align:left;font-weight:600" title="{html.escape(c.how)}">{html.escape(header(c))}</th>'
                   for c in d.criteria)
    body = []
    for r in d.rows:
        pick = r["strategy"] == d.pick
        tds = []
        for c in d.criteria:
            style = "padding:2px 6px;border:1px solid #ccc;white-space:nowrap"
            if r.get("behind_on") == c.name:
                style += f";background:{BEHIND_COLOR}33;font-weight:700"
            tds.append(f'<td style="{style}">{html.escape(_cell(c, r))}</td>')
        lead = (f'<td style="padding:2px 6px;border:1px solid #ccc">{r["rank"]}</td>'
                f'<td style="padding:2px 6px;border:1px solid #ccc;text-align:left;font-weight:{700 if pick else 400}">'
                f'<code>{html.escape(r["strategy"])}</code>{" (pick)" if pick else ""}</td>')
        bg = f' style="background:{PICK_COLOR}22"' if pick else ""
        body.append(f"<tr{bg}>{lead}{''.join(tds)}</tr>")
    for r in d.references:
        tds = "".join(f'<td style="padding:2px 6px;border:1px solid #ccc;white-space:nowrap">'
                      f"{html.escape(_cell(c, r))}</td>" for c in d.criteria)
        body.append(f'<tr style="color:#666;font-style:italic"><td style="padding:2px 6px;border:1px solid '
                    f'#ccc">ref</td><td style="padding:2px 6px;border:1px solid #ccc;text-align:left"><code>'
                    f'{html.escape(r["strategy"])}</code></td>{tds}</tr>')
    sentences = "".join(f'<li style="margin:2px 0">{_md(s)}</li>' for s in d.sentences)
    title = f"Decision: <code>{html.escape(d.pick)}</code>" + (
        f' <span style="font-weight:400">(runner-up <code>{html.escape(d.runner_up)}</code>)</span>'
        if d.runner_up else "")
    return (f'<div class="funcbwd-decision" data-pick="{html.escape(d.pick)}" style="{_CSS}">'
            f'<div style="font-size:17px;font-weight:700;margin-bottom:2px">{title}</div>'
            f'<ol style="margin:2px 0 6px 18px;padding:0">{sentences}</ol>'
            f'<div style="overflow-x:auto;max-width:100%"><table style="border-collapse:collapse;'
            f'font-size:12px"><thead><tr><th style="padding:2px 6px;border:1px solid #ccc;'
            f'background:#eee;white-space:nowrap">rank</th><th style="padding:2px 6px;border:1px solid #ccc;'
            f'background:#eee">strategy</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'
            f'<div style="font-size:12px;color:#555;margin-top:4px">{_md(footnote(d))}</div></div>')


def block(d: Decision) -> Rich:
    """The decision block for a notebook cell: HTML in Jupyter, :func:`text` elsewhere."""
    return Rich(text(d), html_block(d))


def markdown(d: Decision) -> str:
    """The block as Markdown for the README (the same sentences and table)."""
    rows = table_rows(d)
    lines = [f"**Decision: `{d.pick}`**" + (f" (runner-up `{d.runner_up}`)" if d.runner_up else "") + ".", ""]
    lines += [f"{i}. {s}" for i, s in enumerate(d.sentences, 1)]
    lines += ["", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    behind = [r.get("behind_on") for r in d.rows] + [None] * len(d.references)
    names = ["", ""] + [c.name for c in d.criteria]
    lines += ["| " + " | ".join(f"`{v}`" if i == 1 else f"**{v}**" if b and names[i] == b else v
                                for i, v in enumerate(r)) + " |" for r, b in zip(rows[1:], behind)]
    lines += ["", f"_{footnote(d)} Computed by `funcbwd_lab.studies.review.review.decision` from "
              "`data/review-evidence.json` (regenerate with `python tools/update_readme.py`); "
              "`notebooks/design_review.ipynb` recomputes every row from the saved matrix and its own "
              "probes (`RECOMPUTE = True` there runs the matrix too)._"]
    return "\n".join(lines)


def chart(d: Decision):
    """Small multiples, one panel per criterion in ranking order: a horizontal bar per candidate
    (the pick green, a candidate orange on the criterion that puts it behind the pick), the
    references as hollow markers, units on every value axis."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    crit = list(d.criteria)
    cols, left, spacing = 4, 90, 0.09
    nrows = -(-len(crit) // cols)
    # Subplot titles wrapped to their panel's width on a 1280 px screen (a long one was clipped).
    panel = (figstyle.SCREEN_WIDTH - left - 24) * (1 - spacing * (cols - 1)) / cols
    titles = [figstyle.wrap_to(c.label, panel - 8, 16) for c in crit]
    lines = max(t.count("<br>") + 1 for t in titles)
    fig = make_subplots(rows=nrows, cols=cols, subplot_titles=titles, horizontal_spacing=spacing,
                        vertical_spacing=(0.2 + 0.04 * lines) if nrows > 1 else 0.1)
    names = [r["strategy"] for r in d.rows][::-1]
    missing = []
    for i, c in enumerate(crit):
        ri, ci = i // cols + 1, i % cols + 1
        rows = d.rows[::-1]
        vals = [r.get(c.name) for r in rows]
        colors = [PICK_COLOR if r["strategy"] == d.pick else BEHIND_COLOR if r.get("behind_on") == c.name
                  else OTHER_COLOR for r in rows]
        fig.add_trace(go.Bar(x=[v if v is not None else 0 for v in vals], y=names, orientation="h",
                             marker_color=colors, showlegend=False, cliponaxis=False,
                             text=[_cell(c, r) if r.get(c.name) is not None else "not measured"
                                   for r in rows], textposition="outside",
                             hovertemplate="%{y}: %{text}<extra>" + html.escape(c.label) + "</extra>"),
                      row=ri, col=ci)
        if all(v is None for v in vals):
            missing.append(c.label)
        fig.update_xaxes(title_text=c.unit, row=ri, col=ci, rangemode="tozero")
        fig.update_yaxes(type="category", row=ri, col=ci, showticklabels=ci == 1)
    for label, color in (("pick", PICK_COLOR), (BEHIND, BEHIND_COLOR),
                         ("other candidate", OTHER_COLOR)):
        fig.add_trace(go.Bar(x=[None], y=[None], name=label, marker_color=color, showlegend=True,
                             hoverinfo="skip"), row=1, col=1)
    caption = ("One panel per criterion, in ranking order (left to right, then the next row); the "
               "first criterion on which a candidate differs from the pick decides. Counts over "
               f"{d.basis}. Costs: {d.sources.get('costs', '')}."
               + (f" Not measured: {', '.join(missing)}." if missing else ""))
    figstyle.style(fig, f"Decision: {d.pick}, ranked on the criteria in order", x_title="", y_title="",
                   height=(250 + 22 * lines) * nrows + 200, caption=caption, left=left,
                   above=22 * lines + 6)
    for i, c in enumerate(crit):  # style() set one x title for all panels: put the units back
        vals = [r.get(c.name) for r in d.rows if r.get(c.name) is not None]
        top = max([abs(v) for v in vals] + [1e-9 if c.unit in ("x time", "µs/node") else 4])
        fig.update_xaxes(title_text=c.unit, row=i // cols + 1, col=i % cols + 1,
                         range=[min(0, *vals) * 1.3 if vals else 0, top * 1.35 if vals else 1])
    return fig
