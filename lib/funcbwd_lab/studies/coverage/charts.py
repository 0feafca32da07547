"""The sweep's summary as a plotly figure (rendering only: the counts are
:func:`funcbwd_lab.studies.coverage.summary.summarize`'s)."""

from __future__ import annotations

from typing import Any

from funcbwd_lab.figstyle import style

#: the statuses drawn, in stacking order, with their label and colour
BARS = (("pass", "pass", "#4c9f70"), ("fail", "fail", "#d9534f"), ("mismatch", "wrong", "#7b2d26"),
        ("timeout", "budget spent or not started", "#f0ad4e"), ("not_applicable", "n/a", "#b0b0b0"))


def summary_figure(summary: dict[str, Any]):
    """Per composition and strategy, the cells by status: one row each, stacked as shares of that
    row's cells (the counts in the row's label and in the hover). Counts on one axis would squash
    every row into a sliver beside ``vmapvjp``'s (all of its samples, thousands of cells, against
    one sample of the other compositions); shares keep every row readable."""
    import plotly.graph_objects as go

    per_row = [(f"{comp} · {st}", c) for comp, per in summary["compositions"].items()
               for st, c in per.items()]
    totals = [sum(c[key] for key, _, _ in BARS) or 1 for _, c in per_row]
    ys = [f"{name} ({total:,})" for (name, _), total in zip(per_row, totals)]
    fig = go.Figure()
    for key, label, colour in BARS:
        fig.add_bar(y=ys, x=[100 * c[key] / t for (_, c), t in zip(per_row, totals)],
                    customdata=[c[key] for _, c in per_row], name=label, orientation="h",
                    marker_color=colour,
                    hovertemplate="%{y}: %{customdata} cells, %{x:.1f}% (" + label + ")<extra></extra>")
    fig.update_layout(barmode="stack", yaxis=dict(autorange="reversed"),
                      xaxis=dict(range=[0, 100], ticksuffix="%"))
    n_reg = len(summary["regressions"])
    return style(fig, "OpInfo sweep: cells by status, as shares of each row", x_title="share of the "
                 "row's cells [op x sample]; the row's count in brackets",
                 y_title="composition · strategy", height=120 + 22 * len(ys), left=230,
                 legend_title="status",
                 caption=f"{n_reg} regressions against builtin; {len(summary['fixes'])} fixes, "
                         f"{sum(f['inplace'] for f in summary['fixes'])} of vmap's in-place error.")
