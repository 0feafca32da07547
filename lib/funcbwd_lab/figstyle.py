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


# ------------------------------------------------------------------------------ log axes
#: tick mantissas on a log axis: 1-2-5 per decade when the values span more than
#: :data:`WIDE_SPAN`, denser when they span less (so a narrow panel still gets a few ticks)
MANTISSAS, DENSE_MANTISSAS, WIDE_SPAN = (1, 2, 5), (1, 1.5, 2, 3, 5, 7), 30.0


def log_ticks(values: Sequence[float]) -> tuple[list[float], list[str]]:
    """Tick values and their labels for a log axis showing ``values`` (positive ones count):
    every label a whole number as it reads (``20``, ``0.5``), never plotly's default on a log axis,
    which labels the ticks between decades with their first digit only (a "2" above "10" that
    means 20). The ticks run from the largest tick at or under the smallest value to the smallest
    at or over the largest."""
    import math

    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return [], []
    lo, hi = min(vals), max(vals)
    mantissas = MANTISSAS if hi / lo > WIDE_SPAN else DENSE_MANTISSAS
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.floor(math.log10(hi)) + 2)
             for m in mantissas]
    below = max([t for t in ticks if t <= lo * (1 + 1e-9)], default=min(ticks))
    above = min([t for t in ticks if t >= hi * (1 - 1e-9)], default=max(ticks))
    shown = [float(f"{t:.6g}") for t in ticks if below <= t <= above]
    return shown, [f"{t:g}" for t in shown]


# ------------------------------------------------------------------------------ layout budget
#: the width a figure gets on a 1280 px screen: JupyterLab's output area (side bar collapsed,
#: prompt column) and the report's main column are both at least this wide
SCREEN_WIDTH = 1100
_NARROW = set("iljtfrI.,:;|!'()[] /")
_WIDE = set("mwMW@%")


def text_width(text: str, size: float = 12) -> float:
    """Estimated rendered width in px of ``text`` (plotly's HTML subset: tags dropped, the longest
    ``<br>`` line) in plotly's default sans-serif at ``size`` px; errs a little wide."""
    import re

    lines = re.split(r"<br\s*/?>", text or "")
    widths = []
    for line in lines:
        line = re.sub(r"<[^>]+>", "", line)
        w = 0.0
        for ch in line:
            w += 0.30 if ch in _NARROW else 0.85 if ch in _WIDE else 0.66 if ch.isupper() else 0.56
        widths.append(w * size)
    return max(widths, default=0.0)


def wrap_to(text: str, width_px: float, size: float = 12) -> str:
    """``text`` wrapped with ``<br>`` so that each line fits ``width_px`` at ``size`` px."""
    words, lines = text.split(), []
    for word in words:
        if lines and text_width(lines[-1] + " " + word, size) <= width_px:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def _font_size(font: Any, default: float) -> float:
    return float(font.size) if font is not None and font.size is not None else default


def layout_problems(fig: Any, width: int = SCREEN_WIDTH) -> list[str]:
    """What would not read well when ``fig`` is drawn ``width`` px wide (its own height), from its
    layout alone: annotations with no text (plotly draws its "new text" placeholder there), log
    axes whose ticks are not all labelled in full (:func:`log_ticks`), titles
    wider than their room (figure title, subplot titles, axis titles), and too little space
    between panels for the tick labels, axis title and subplot title that sit in the gap.
    Text widths are estimated (:func:`text_width`); an empty list means nothing found."""
    lay = fig.layout
    m = lay.margin
    ml, mr = (m.l if m.l is not None else 80), (m.r if m.r is not None else 80)
    mt, mb = (m.t if m.t is not None else 100), (m.b if m.b is not None else 80)
    height = lay.height or 450
    plot_w, plot_h = width - ml - mr, height - mt - mb
    problems = []
    title = lay.title.text if lay.title is not None else None
    if title and text_width(title, _font_size(lay.title.font, 17)) > width - 24:
        problems.append(f"figure title wider than {width - 24} px: {title!r}")
    axes = {}
    for name in dir(lay):
        if name.startswith(("xaxis", "yaxis")) and lay[name] is not None:
            axes[name] = lay[name]
    xs = {k: a for k, a in axes.items() if k.startswith("x")}
    ys = {k: a for k, a in axes.items() if k.startswith("y")}

    def dom(a):
        return tuple(a.domain) if a.domain is not None else (0.0, 1.0)

    panels = []  # (xaxis, yaxis): each x axis with the y axis it is anchored to
    for kx, ax in xs.items():
        ky = "yaxis" + (ax.anchor[1:] if ax.anchor and ax.anchor != "free" else kx[5:])
        if ky in ys:
            panels.append((kx, ax, ky, ys[ky]))
    titles_by_x = {}
    for i, a in enumerate(lay.annotations or ()):
        if not (a.text or "").strip():
            problems.append(f"annotation {i} has no text (plotly shows 'new text'): "
                            f"x={a.x}, y={a.y}, xref={a.xref}")
            continue
        w = text_width(a.text, _font_size(a.font, 12))
        if a.xref == "paper" and a.yref == "paper" and _font_size(a.font, 12) == 16:
            # a subplot title: centred over its panel
            for kx, ax, ky, ay in panels:
                x0, x1 = dom(ax)
                if abs((x0 + x1) / 2 - (a.x or 0)) < 1e-6 and abs(dom(ay)[1] - (a.y or 0)) < 1e-6:
                    titles_by_x[kx] = a.text.count("<br") + 1
                    if w > (x1 - x0) * plot_w + 4:
                        problems.append(f"subplot title wider than its panel "
                                        f"({w:.0f} > {(x1 - x0) * plot_w:.0f} px): {a.text!r}")
        elif w > width - 8:
            problems.append(f"annotation wider than the figure ({w:.0f} px): {a.text[:60]!r}")
    for name, a in axes.items():
        if a.type == "log" and a.visible is not False and (a.tickvals is None or a.ticktext is None
                                or list(a.ticktext) != [f"{v:g}" for v in a.tickvals]):
            problems.append(f"{name} is a log axis without every tick labelled in full (plotly "
                            "labels the ticks between decades with one digit): use log_ticks")
    for kx, ax, ky, ay in panels:
        (x0, x1), (y0, y1) = dom(ax), dom(ay)
        xt, yt = ax.title.text if ax.title else None, ay.title.text if ay.title else None
        if xt and text_width(xt, _font_size(ax.title.font, 14)) > (x1 - x0) * plot_w + 4:
            problems.append(f"x axis title wider than its panel: {xt!r}")
        if yt and text_width(yt, _font_size(ay.title.font, 14)) > (y1 - y0) * plot_h + 4:
            problems.append(f"y axis title taller than its panel ({(y1 - y0) * plot_h:.0f} px): {yt!r}")
        for kx2, ax2, ky2, ay2 in panels:
            (u0, u1), (v0, v1) = dom(ax2), dom(ay2)
            same_row = min(y1, v1) - max(y0, v0) > 1e-6
            same_col = min(x1, u1) - max(x0, u0) > 1e-6
            if same_row and u0 > x1 - 1e-9 and not any(
                    x1 - 1e-9 < dom(a)[0] < u0 for k, a, _, b in panels
                    if min(y1, dom(b)[1]) - max(y0, dom(b)[0]) > 1e-6 and k not in (kx, kx2)):
                need = (36 if ay2.showticklabels is not False else 4) + (22 if ay2.title and ay2.title.text else 0)
                gap = (u0 - x1) * plot_w
                if gap < need:
                    problems.append(f"{kx}/{kx2}: {gap:.0f} px between panels, the right one's y tick "
                                    f"labels and title need {need}")
            if same_col and v1 < y0 + 1e-9 and not any(
                    v1 - 1e-9 < dom(b)[1] < y0 + 1e-9 for k, a, _, b in panels
                    if min(x1, dom(a)[1]) - max(x0, dom(a)[0]) > 1e-6 and k not in (kx, kx2)):
                # (kx2 is below kx) the gap holds kx's x tick labels and title and kx2's subplot title
                below_x = ax.side != "top"
                need = ((22 if ax.showticklabels is not False else 4) + (22 if xt else 0)) * below_x \
                    + 22 * titles_by_x.get(kx2, 0)
                gap = (y0 - v1) * plot_h
                if gap < need:
                    problems.append(f"{kx}/{kx2}: {gap:.0f} px between rows, the upper one's x labels "
                                    f"and title and the lower one's subplot title need {need}")
    return problems
