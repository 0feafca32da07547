"""How the workbench's own plotly figures look (rendering only; nothing here computes a result).

* titles left-aligned and short, so plotly's toolbar (top right, shown on hover) never covers
  them; the explanation of a value goes into a caption under the plot, not into the title;
* axis titles always, with the unit in brackets when there is one;
* statuses as a categorical legend (one entry per status, its colour) instead of a colour bar;
* :data:`CONFIG`: the plotly config every embedding uses (toolbar on hover, no logo).
"""

from __future__ import annotations

import textwrap
from typing import Any, Mapping, Sequence

#: passed to plotly's ``config`` wherever a figure is embedded (report, notebook renderer)
CONFIG = {"displaylogo": False, "displayModeBar": "hover",
          "modeBarButtonsToRemove": ["lasso2d", "select2d", "autoScale2d"]}
TOP = 64  # px above the plot: the title's line, clear of the toolbar row
CAPTION_GAP = 56  # px between the plot's bottom edge and the caption (tick labels + axis title)


def caption_lines(text: str, width: int = 120) -> list[str]:
    return textwrap.wrap(text, width) if text else []


def style(fig: Any, title: str, *, x_title: str, y_title: str, height: int,
          caption: str = "", legend_title: str | None = None, left: int = 70,
          x_on_top: bool = False, above: int = 0) -> Any:
    """Apply the house style to ``fig`` (returned): left title, axis titles, a caption under the
    plot (wrapped) with the room it needs, the legend above the plot at the left (above the x
    axis when ``x_on_top``: tall charts put their column labels on top; ``above`` px higher still,
    e.g. over subplot titles)."""
    lines = caption_lines(caption)
    above += 48 if x_on_top else 0  # room for tick labels and axis title above the plot
    bottom = (10 if x_on_top else 50) + (CAPTION_GAP - (40 if x_on_top else 0) + 16 * len(lines) if lines else 0)
    top = TOP + 26 + above
    plot_h = max(height - top - bottom, 1)
    fig.update_layout(
        title=dict(text=title, x=0, xref="container", xanchor="left", pad=dict(l=12), y=1,
                   yref="container", yanchor="top", font=dict(size=15)),
        height=height, margin=dict(l=left, r=24, t=top, b=bottom),
        legend=dict(orientation="h", x=0, xanchor="left", y=1.0 + above / plot_h, yanchor="bottom",
                    title=dict(text=legend_title or "")),
    )
    if x_on_top:
        fig.update_xaxes(side="top")
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    if lines:
        gap = CAPTION_GAP - (40 if x_on_top else 0)
        fig.add_annotation(text="<br>".join(lines), xref="paper", yref="paper", x=0, xanchor="left",
                           y=-gap / plot_h, yanchor="top", showarrow=False, align="left",
                           font=dict(size=12, color="#444"))
    return fig


def add_caption(fig: Any, text: str) -> Any:
    """Add a caption under an already laid-out figure (its height and margins set), growing the
    figure by the room the caption needs."""
    lines = caption_lines(text)
    if not lines:
        return fig
    extra = CAPTION_GAP + 16 * len(lines)
    m = fig.layout.margin
    top, bottom = (m.t if m.t is not None else 80), (m.b if m.b is not None else 80)
    height = (fig.layout.height or 450) + extra
    fig.update_layout(height=height, margin=dict(b=bottom + extra))
    plot_h = max(height - top - bottom - extra, 1)
    fig.add_annotation(text="<br>".join(lines), xref="paper", yref="paper", x=0, xanchor="left",
                       y=-(bottom - 10 + 4) / plot_h, yanchor="top", showarrow=False, align="left",
                       font=dict(size=12, color="#444"))
    return fig


def status_legend(fig: Any, statuses: Sequence[str], labels: Mapping[str, str],
                  colors: Mapping[str, str]) -> Any:
    """One legend entry per status (a coloured square), drawn by empty scatter traces so the
    legend is categorical whatever the chart type."""
    import plotly.graph_objects as go

    for s in statuses:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=labels[s], hoverinfo="skip",
                                 marker=dict(symbol="square", size=13, color=colors[s],
                                             line=dict(width=1, color="#555")),
                                 showlegend=True))
    return fig
