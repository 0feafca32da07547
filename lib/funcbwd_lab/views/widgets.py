"""The explorer: pick op / strategy / scenario, see the outcome, the trace, the graph diff, a chart.

Every view is updated *in place*: HTML widgets get a new ``.value`` and the chart is a
``go.FigureWidget`` updated inside ``batch_update``. Nothing re-renders into an
``ipywidgets.Output`` (that made nbclient hang in ~20% of executions, see jupyter-notes.md).
Cells come from ``funcbwd_lab.run.runner.run`` (cached per op/sample/scenario/strategy), traces from
``funcbwd_lab.studies.trace.trace.trace`` and graph diffs from ``funcbwd_lab.studies.graphs.graphs``; a view whose module is missing
says so instead of failing.

Opened without a kernel (a stored notebook, nbviewer, an untrusted notebook in JupyterLab), a
widget cannot render: the explorer's output then carries a static HTML snapshot of its current
view (:meth:`Explorer.snapshot_html`, inline styles only, so sanitizers keep it) saying "run this
cell to interact", instead of the widget's raw text repr. With a kernel the live widget wins.
"""

from __future__ import annotations

import html
import itertools
import uuid
from typing import Any, Callable, Sequence

from funcbwd_lab.ops import registry
from funcbwd_lab.run import runner
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.views import display
from funcbwd_lab import figstyle
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab.run.scenarios import BACKWARD_NAMES
from funcbwd_lab.strategies import available
from funcbwd.errors import first_line


def _trace_html(op: str, strategy: str, scenario: str) -> str:
    try:
        from funcbwd_lab.studies.trace import trace
    except ImportError:
        return "<i>funcbwd_lab.studies.trace.trace is not available in this checkout.</i>"
    try:
        return trace.trace(op, strategy, scenario).html_fragment()
    except Exception as e:  # noqa: BLE001 - the view shows why there is no trace
        return f"<i>no trace: {html.escape(type(e).__name__)}: {html.escape(first_line(str(e)))}</i>"


def _graph_html(op: str, strategy: str, scenario: str) -> str:
    try:
        from funcbwd_lab.studies.graphs import graphs
    except ImportError:
        return "<i>funcbwd_lab.studies.graphs.graphs is not available in this checkout.</i>"
    try:
        # The formula as written against the form this strategy runs (plain: against traced).
        form = getattr(graphs, "STRATEGY_FORMS", {}).get(strategy, "traced")
        return display.graph_diff_html(graphs.diff(op, "plain", "traced" if form == "plain" else form))
    except Exception as e:  # noqa: BLE001
        return f"<i>no graph: {html.escape(type(e).__name__)}: {html.escape(first_line(str(e)))}</i>"


#: the most a trace or graph diff panel takes on the page (a longer one scrolls inside)
PANEL_HEIGHT = "460px"
#: the explorer's tabs, the first open (the graph diff: short, and what the strategy changes)
PANEL_TITLES = ("graph diff", "dispatch-key trace")
#: the n-th explorer a kernel makes gets the n-th id (see :func:`_model_id`)
_EXPLORER_IDS = itertools.count()
_ID_NAMESPACE = uuid.UUID("6f1d3a52-5c7e-4f0b-9a36-0d2c1e8b7a41")


def _model_id() -> str:
    """The explorer's widget model id (the comm id JupyterLab finds the live widget by, and the
    only part of a widget's output a saved notebook stores): the same in every fresh kernel run
    top to bottom, so re-running and saving a notebook does not rewrite it; a random id (the
    ipywidgets default) would. Unique within a kernel: each explorer takes the next number."""
    return uuid.uuid5(_ID_NAMESPACE, f"funcbwd-explorer-{next(_EXPLORER_IDS)}").hex


class Explorer:
    """Dropdowns op / strategy / scenario driving a status line, a trace, a graph diff and a
    bar chart of every strategy on the chosen op and scenario."""

    def __init__(self, results: Sequence[CellResult] = (), *, ops: Sequence[str] | None = None,
                 strategies: Sequence[str] | None = None, scenarios: Sequence[str] | None = None,
                 op: str = "diag", strategy: str = "plain", scenario: str = "vmap_cotangents",
                 trace_view: Callable[[str, str, str], str] = _trace_html,
                 graph_view: Callable[[str, str, str], str] = _graph_html):
        import ipywidgets as w
        import plotly.graph_objects as go

        self.ops = list(ops or registry.op_names("test"))
        self.strategies = list(strategies or available())
        self.scenarios = list(scenarios or BACKWARD_NAMES)
        for kind, value, valid in (("op", op, self.ops), ("strategy", strategy, self.strategies),
                                   ("scenario", scenario, self.scenarios)):
            if value not in valid:
                from funcbwd.errors import UnknownNameError
                raise UnknownNameError(kind, value, valid)
        self._cells: dict[tuple[str, str, str], list[CellResult]] = {}
        for r in results:
            self._cells.setdefault((r.op, r.scenario, r.strategy), []).append(r)
        self._trace_view, self._graph_view = trace_view, graph_view

        self.op = w.Dropdown(options=self.ops, value=op, description="op")
        self.strategy = w.Dropdown(options=self.strategies, value=strategy, description="strategy")
        self.scenario = w.Dropdown(options=self.scenarios, value=scenario, description="scenario")
        self.status = w.HTML()
        # The panels are tabs, one open at a time under the tab bar, each as tall as its content
        # up to PANEL_HEIGHT (then it scrolls inside): a tab opens on its content, right under the
        # tab just clicked. (An accordion of fixed-height boxes opened a short graph diff as an
        # empty box with the diff above the view; boxes as tall as a long trace shrank the page by
        # thousands of px on a switch and left the view blank past its end.)
        self.trace = w.HTML(layout=w.Layout(max_height=PANEL_HEIGHT, overflow="auto"))
        self.graph = w.HTML(layout=w.Layout(max_height=PANEL_HEIGHT, overflow="auto"))
        self.figure = go.FigureWidget(data=[go.Bar(
            x=self.strategies, y=[0] * len(self.strategies), marker_color="#bdbdbd", cliponaxis=False,
            text=[""] * len(self.strategies), textposition="outside", showlegend=False,
            hovertemplate="%{x}: %{customdata}<extra></extra>", customdata=[""] * len(self.strategies))])
        figstyle.status_legend(self.figure, display.STATUS_ORDER, display.STATUS_LABEL, display.STATUS_COLOR)
        figstyle.style(self.figure, "", x_title="strategy", y_title="samples passed [%]", height=400,
                       legend_title="status:",
                       caption="Bar: share of this cell's samples that match the per-sample loop; "
                               "the label names the cell's status (a FAIL at 0% has no bar).")
        self.figure.update_yaxes(range=[0, 1.18], tickformat=".0%")
        self.figure.update_xaxes(type="category")
        for dd in (self.op, self.strategy, self.scenario):
            dd.observe(self._on_change, names="value")
        self.widget = w.VBox([
            w.HBox([self.op, self.strategy, self.scenario]),
            self.status, self.figure,
            w.Tab(children=[self.graph, self.trace], titles=PANEL_TITLES, selected_index=0),
        ], model_id=_model_id())
        self.update()

    # --- data ------------------------------------------------------------------------------
    def cells(self, op: str, scenario: str, strategy: str) -> list[CellResult]:
        """The results for one cell: given ones, else run (first sample) and cache."""
        key = (op, scenario, strategy)
        if key not in self._cells:
            self._cells[key] = [runner.run(op, scenario, strategy)]
        return self._cells[key]

    def summary(self, op: str, scenario: str, strategy: str) -> dict[str, Any]:
        return matrix.summarize(self.cells(op, scenario, strategy))[(op, scenario, strategy)]

    # --- views ---------------------------------------------------------------------------
    def _on_change(self, change: dict) -> None:
        self.update()

    def update(self) -> None:
        op, st, sc = self.op.value, self.strategy.value, self.scenario.value
        cell = self.summary(op, sc, st)
        kind = display.cell_kind(cell)
        self.status.value = (f'<div style="padding:4px;background-color:{display.STATUS_COLOR[kind]}">'
                             f"<b>{html.escape(op)} / {html.escape(st)} / {html.escape(sc)}</b>: "
                             f"{display.cell_hover(cell)}</div>")
        summaries = [self.summary(op, sc, s) for s in self.strategies]
        with self.figure.batch_update():
            bar = self.figure.data[0]
            bar.y = [c["passed"] / c["total"] if c["total"] else 0 for c in summaries]
            bar.marker.color = [display.STATUS_COLOR[display.cell_kind(c)] for c in summaries]
            bar.marker.line = dict(width=[3 if s == st else 0 for s in self.strategies], color="black")
            bar.customdata = [display.cell_text(c, long=True) for c in summaries]
            bar.text = [display.STATUS_SHORT[display.cell_kind(c)] + f" {c['passed']}/{c['total']}"
                        for c in summaries]
            bar.textfont = dict(color=[display.STATUS_COLOR["fail"] if c["status"] in ("fail", "mismatch")
                                       else "#333" for c in summaries])
            self.figure.layout.title.text = self.title()
        self.trace.value = self._trace_view(op, st, sc)
        self.graph.value = self._graph_view(op, st, sc)

    def title(self) -> str:
        return (f"{self.op.value} / {self.scenario.value}: every strategy "
                f"(selected: {self.strategy.value})")

    def snapshot_html(self) -> str:
        """The current view as static HTML (what a reader sees without a kernel): the status line,
        every strategy's status on the chosen op and scenario as bars, and the graph diff; the
        trace is left to the live explorer (it is long)."""
        op, st, sc = self.op.value, self.strategy.value, self.scenario.value
        rows = []
        for s in self.strategies:
            c = self.summary(op, sc, s)
            kind = display.cell_kind(c)
            share = c["passed"] / c["total"] if c["total"] else 0.0
            mark = "font-weight:700;" if s == st else ""
            text = display.cell_text(c, long=True) + ("" if c["status"] in ("fail", "mismatch")
                                           else f" ({c['passed']}/{c['total']} samples)")
            rows.append(
                f'<tr><td style="{mark}padding:1px 8px 1px 0;white-space:nowrap;text-align:left">'
                f'{html.escape(s)}</td><td style="padding:1px 0;width:55%"><div style="background-color:'
                f'{display.STATUS_COLOR[kind]};width:{max(share * 100, 1.5):.0f}%;height:14px"></div></td>'
                f'<td style="padding:1px 8px;text-align:left">{html.escape(text)}</td></tr>')
        return (
            '<div class="funcbwd-explorer-static" style="border:1px dashed #888;padding:6px 10px;max-width:100%">'
            '<div style="background-color:#fff8e1;padding:4px 8px;margin-bottom:6px"><b>Static snapshot</b> '
            "of the explorer's first view: run this cell (with a kernel) to interact with the "
            "op / strategy / scenario dropdowns.</div>"
            f"{self.status.value}"
            f"<div style=\"margin:6px 0 2px;font-weight:600\">{html.escape(self.title())}</div>"
            f'<table style="border-collapse:collapse;font-size:12px;width:100%">{"".join(rows)}</table>'
            f"<details open><summary>graph diff</summary>{self.graph.value}</details></div>")

    def select(self, op: str | None = None, strategy: str | None = None,
               scenario: str | None = None) -> "Explorer":
        """Change the selection from code (what a dropdown change does)."""
        for dd, v in ((self.op, op), (self.strategy, strategy), (self.scenario, scenario)):
            if v is not None:
                dd.value = v
        return self

    def _repr_mimebundle_(self, **kwargs: Any):
        """The live widget, plus the static snapshot as text/html for renderers without a
        kernel or widget manager (which would otherwise show the widget's text repr)."""
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        bundle["text/html"] = self.snapshot_html()
        bundle["text/plain"] = (f"funcbwd explorer ({self.title()}); run this cell with a kernel "
                                "to interact")
        return bundle
