"""The sweep's summary as a plotly figure (rendering only: the counts are
:func:`funcbwd.studies.coverage.summary.summarize`'s)."""

from __future__ import annotations

from typing import Any

from funcbwd.figstyle import style

#: the statuses drawn, in stacking order, with their label and colour
BARS = (("pass", "pass", "#4c9f70"), ("fail", "fail", "#d9534f"), ("mismatch", "wrong", "#7b2d26"),
        ("timeout", "budget spent or not started", "#f0ad4e"), ("not_applicable", "n/a", "#b0b0b0"))


def summary_figure(summary: dict[str, Any]):
    """Per composition and strategy, the cells by status (stacked bars, one row per composition)."""
    import plotly.graph_objects as go

    ys = [f"{comp} · {st}" for comp, per in summary["compositions"].items() for st in per]
    counts = [c for per in summary["compositions"].values() for c in per.values()]
    fig = go.Figure()
    for key, label, colour in BARS:
        fig.add_bar(y=ys, x=[c[key] for c in counts], name=label, orientation="h",
                    marker_color=colour, hovertemplate="%{y}: %{x} cells (" + label + ")<extra></extra>")
    fig.update_layout(barmode="stack", yaxis=dict(autorange="reversed"))
    n_reg = len(summary["regressions"])
    return style(fig, "OpInfo sweep: cells by status", x_title="cells [op x sample]",
                 y_title="composition · strategy", height=120 + 22 * len(ys), left=190,
                 legend_title="status",
                 caption=f"{n_reg} regressions against builtin; {len(summary['fixes'])} fixes, "
                         f"{sum(f['inplace'] for f in summary['fixes'])} of vmap's in-place error.")
