"""Charts for "Overhead and copies, measured", built from a bench result.

Every function takes the result dict (``funcbwd_lab.studies.bench.bench.run_bench`` or
``funcbwd_lab.studies.bench.results.load``) and returns a ``plotly.graph_objects.Figure``; nothing is
displayed or written here, and no figure references a CDN (the caller chooses how to embed
plotly.js). Figures hold at most a few hundred points.

Conventions: ratios are drawn against a labelled reference line (``handfixed = 1.0``: core's
modern formula through the same machinery, so the distance to it is what functionalizing costs;
or ``builtin = 1.0``), targets are labelled dotted lines, axes carry units, and a label that
failed (its correctness check, its capture, its timing) is drawn as a failure: an ``x`` marker
on the baseline or a note in its panel, with the reason on hover, never as a missing bar that
reads as zero.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from funcbwd.errors import BadInputError
from funcbwd_lab import figstyle
from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.bench.config import COPY_RULE, NO_STRATEGY, NOOP_HOOK

# One colour per label, stable across charts.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf", "#393b79")
_ORDER = ("builtin", "plain", "composite", "hooks", "whole", "per_formula", COPY_RULE,
          "traced", NO_STRATEGY, NOOP_HOOK, "handfixed")
_BATCH_AXIS = "batch size (cotangents per vmap call)"
#: metric -> (y-axis title, chart title, reference label drawn as the 1.0 line or None,
#:            [(target value, target label, the input sizes it applies to (None: all))]).
#: Axis titles stay short (they run along one panel); what a ratio means goes in the title.
_METRICS = {
    "ratio_vs_handfixed": ("time / handfixed's (x)",
                           "batched backward time vs handfixed (the cost of functionalizing; "
                           "lower is better)",
                           "handfixed", [(1.1, "target: traced <= 1.1x handfixed (small, batch >= 8)",
                                          ("small",))]),
    "ratio_vs_builtin": ("time / builtin's (x)",
                         "batched backward time vs builtin (torch's C++ formula; lower is better)",
                         "builtin",
                         [(1.2, "target: traced <= 1.2x builtin (batch >= 64)", ("small",)),
                          (1.0, "target: traced <= 1.0x builtin", ("large",))]),
    "ratio_vs_floor": ("x min(handfixed, builtin)",
                       "batched backward time vs the cheaper of handfixed and builtin (lower is "
                       "better)", bench_results.FLOOR,
                       [(1.1, "target: traced <= 1.1x the cheaper of the two (large, batch >= 8)",
                         ("large",))]),
    "speedup_vs_loop": ("loop time / vmap time (x)",
                        "speedup over the per-sample loop (higher is better)", None,
                        [(10.0, "10x the loop", None)]),
    "speedup_vs_builtin_loop": ("builtin loop / vmap time (x)",
                                "speedup over builtin's per-sample loop (higher is better)", None,
                                [(10.0, "10x the loop", None)]),
}
_REF_LINE = {"dash": "solid", "color": "#444", "width": 1}
_TARGET_LINE = {"dash": "dot", "color": "#888", "width": 1}
_FAIL_MARKER = {"symbol": "x", "size": 11, "line": {"width": 1}}


def label_color(label: str) -> str:
    idx = _ORDER.index(label) if label in _ORDER else len(_ORDER) + sum(map(ord, label))
    return _PALETTE[idx % len(_PALETTE)]


def _ordered(labels: Sequence[str]) -> list[str]:
    return sorted(set(labels), key=lambda s: (_ORDER.index(s) if s in _ORDER else len(_ORDER), s))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x) and not math.isinf(x)


def _grid(n: int, cols: int) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return math.ceil(n / cols), cols


def ratio_vs_batch(results: dict[str, Any], size: str = "small", metric: str = "ratio_vs_handfixed",
                   ops: Sequence[str] | None = None, cols: int = 3) -> go.Figure:
    """One panel per op: ``metric`` against batch size, one line per label, log-log axes; the
    metric's reference as a labelled 1.0 line (not a trace), targets as labelled dotted lines,
    and the labels that failed the correctness check for that op named in the panel."""
    if metric not in _METRICS:
        raise BadInputError(f"unknown metric {metric!r}; valid metrics: {', '.join(_METRICS)}")
    y_title, title, ref, all_targets = _METRICS[metric]
    target_lines = [(v, text) for v, text, sizes in all_targets if sizes is None or size in sizes]
    # a target at the reference's 1.0 sits on the reference line: one line, both labels
    ref_text = "; ".join([f"{ref} = 1.0"] + [t for v, t in target_lines if v == 1.0]) if ref else ""
    rows = [r for r in bench_results.ratios(results) if r["size"] == size and _finite(r[metric])
            and r["label"] != ref]  # (the floor's own labels stay: one of them is 1.0 at each batch)
    fails = {(op, lbl): why for (op, s, lbl), why in bench_results.failures(results).items() if s == size}
    names = [op for op in (ops or results["config"]["ops"])
             if any(r["op"] == op for r in rows) or any(k[0] == op for k in fails)]
    nrows, ncols = _grid(max(len(names), 1), cols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=names or ["(no data)"],
                        horizontal_spacing=0.07, vertical_spacing=0.14)
    shown: set[str] = set()
    shapes: list[dict] = []
    notes: list[dict] = []
    for i, op in enumerate(names):
        r_i, c_i = i // ncols + 1, i % ncols + 1
        op_rows = [r for r in rows if r["op"] == op]
        for label in _ordered([r["label"] for r in op_rows]):
            pts = sorted((r["batch"], r[metric]) for r in op_rows if r["label"] == label)
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=label,
                legendgroup=label, showlegend=label not in shown,
                line={"color": label_color(label)},
                hovertemplate=f"{op} {label}<br>batch %{{x}}: %{{y:.3g}}x<extra></extra>"),
                row=r_i, col=c_i)
            shown.add(label)
        # Lines in every panel, their labels in the first only. (Not add_hline: it makes an
        # annotation whenever any annotation_* argument is given, and plotly draws one without
        # text as "new text"; on a log axis it also puts the label at 10**value.)
        sub = fig.get_subplot(r_i, c_i)
        xref, yref = sub.xaxis.plotly_name.replace("axis", ""), sub.yaxis.plotly_name.replace("axis", "")
        lines = ([(1.0, _REF_LINE, ref_text, "bottom")] if ref else []) + [
            (v, _TARGET_LINE, text, "top") for v, text in target_lines if not (ref and v == 1.0)]
        for value, style, text, where in lines:
            shapes.append({"type": "line", "xref": f"{xref} domain", "x0": 0, "x1": 1, "yref": yref,
                           "y0": value, "y1": value, "line": style, "layer": "below"})
            if i == 0 and text:
                right = where == "bottom"  # the reference's label under its line, at the right
                notes.append({"text": text, "xref": f"{xref} domain", "x": 1 if right else 0,
                              "xanchor": "right" if right else "left", "yref": yref,
                              "y": math.log10(value), "yanchor": "top" if right else "bottom",
                              "showarrow": False, "font": {"size": 11 if right else 10,
                                                           "color": "#444" if right else "#666"}})
        failed = sorted((lbl, why) for (o, lbl), why in fails.items() if o == op and lbl != ref)
        if failed:  # inside the panel's top left, one strategy a line (below it, it sat on the
            # x tick labels; on one line it ran into the next panel)
            fig.add_annotation(text="failed:<br>" + "<br>".join(f"{lbl} ({why})" for lbl, why in failed),
                               xref="x domain", yref="y domain", x=0.01, y=0.99, showarrow=False,
                               xanchor="left", yanchor="top", align="left",
                               bgcolor="rgba(255,255,255,0.85)", font={"size": 9, "color": "#b00"},
                               row=r_i, col=c_i)
    fig.update_layout(shapes=shapes, annotations=list(fig.layout.annotations) + notes)
    # Axis titles once per row (y) and once per column (x, under its lowest panel), so no title
    # runs into the next panel. Log axes with every tick labelled in full (figstyle.log_ticks):
    # the batch sizes measured, and the ratios each panel draws with its reference and targets.
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    batches = sorted({r["batch"] for r in rows})
    fig.update_xaxes(tickvals=batches, ticktext=[str(b) for b in batches])
    for i, op in enumerate(names):
        values = [r[metric] for r in rows if r["op"] == op] + ([1.0] if ref else []) + [
            v for v, _ in target_lines]
        ticks, labels = figstyle.log_ticks(values)
        fig.update_yaxes(tickvals=ticks, ticktext=labels, row=i // ncols + 1, col=i % ncols + 1)
    for i in range(max(len(names), 1), nrows * ncols):  # the grid's empty cells: nothing drawn
        fig.update_xaxes(visible=False, row=i // ncols + 1, col=i % ncols + 1)
        fig.update_yaxes(visible=False, row=i // ncols + 1, col=i % ncols + 1)
    for i in range(len(names) or 1):
        r_i, c_i = i // ncols + 1, i % ncols + 1
        if c_i == 1:
            fig.update_yaxes(title_text=y_title, row=r_i, col=c_i)
        if i + ncols >= max(len(names), 1):
            fig.update_xaxes(title_text=_BATCH_AXIS, row=r_i, col=c_i)
    fig.update_layout(title=f"{title}; {size} inputs", height=300 * nrows + 90,
                      margin={"l": 60, "r": 20, "t": 80, "b": 50}, legend={"title": "strategy"})
    return fig


def _bars_with_failures(fig: go.Figure, ops: list[str], label: str, values: dict[str, Any],
                        failed: dict[str, str], hover: dict[str, str] | None = None) -> None:
    """A bar per op for ``label``, and an ``x`` on the baseline (same slot) where it failed."""
    hover = hover or {}
    fig.add_trace(go.Bar(x=ops, y=[values.get(op) if _finite(values.get(op)) else None for op in ops],
                         name=label, legendgroup=label, offsetgroup=label, marker_color=label_color(label),
                         hovertext=[hover.get(op, "") for op in ops]))
    bad = [op for op in ops if op in failed]
    if bad:
        fig.add_trace(go.Scatter(x=bad, y=[0] * len(bad), mode="markers", name=f"{label} failed",
                                 legendgroup=label, offsetgroup=label, showlegend=False,
                                 marker={**_FAIL_MARKER, "color": label_color(label)},
                                 hovertext=[f"{label} failed: {failed[op]}" for op in bad],
                                 hoverinfo="text"))


def _bar_layout(fig: go.Figure, title: str, y_title: str, legend: str = "strategy") -> None:
    fig.update_layout(barmode="group", scattermode="group", title=title, yaxis_title=y_title,
                      xaxis_title="op", height=400, margin={"l": 60, "r": 20, "t": 60, "b": 50},
                      legend={"title": legend})


def copies_chart(results: dict[str, Any], field: str = "extra_copy_bytes_vs_handfixed",
                 vmap: bool = True) -> go.Figure:
    """Grouped bars per op: copy bytes (or copies) of each label's backward graph beyond
    handfixed's (or builtin's: ``extra_copy_bytes``), from ``funcbwd_lab.studies.graphs.graphs`` copy
    accounting; a failed capture is an ``x``; a titled empty figure when copies were not run."""
    copies = results.get("copies", {})
    if copies.get("status") != "ok":
        fig = go.Figure()
        fig.update_layout(title=f"copies: {copies.get('status', 'missing')} ({copies.get('reason', '')})")
        return fig
    ref = "handfixed" if field.endswith("_vs_handfixed") else "builtin"
    rows = [r for r in bench_results.copy_rows(results, vmap) if r["label"] != ref]
    fig = go.Figure()
    ops = list(dict.fromkeys(r["op"] for r in rows))
    for label in _ordered([r["label"] for r in rows]):
        mine = {r["op"]: r for r in rows if r["label"] == label}
        failed = {op: (r.get("error") or f"{ref} not captured") for op, r in mine.items()
                  if r.get(field) is None}
        _bars_with_failures(fig, ops, label, {op: r.get(field) for op, r in mine.items()}, failed,
                            {op: r.get("copy_ops") or "" for op, r in mine.items()})
    fig.add_hline(y=0, line=_REF_LINE, annotation_text=f"{ref} = 0 (target for traced vs handfixed)",
                  annotation_position="top left")
    unit = "bytes" if "bytes" in field else "copies"
    _bar_layout(fig, f"{field.replace('_', ' ')} ({'under vmap, batch 4' if vmap else 'no vmap'}; "
                f"x = failed to capture)", f"{unit} beyond {ref} ({'B' if unit == 'bytes' else 'count'})")
    return fig


def memory_chart(results: dict[str, Any], batch: int | None = None, size: str = "large",
                 field: str = "allocated_vs_handfixed") -> go.Figure:
    """Grouped bars per op: bytes the batched backward allocates (or its peak) relative to
    handfixed (or builtin); an ``x`` where the label failed its correctness check."""
    ref = "handfixed" if field.endswith("_vs_handfixed") else "builtin"
    rows = [r for r in bench_results.memory_rows(results) if r["size"] == size and r["label"] != ref]
    batch = batch if batch is not None else max((r["batch"] for r in rows), default=None)
    rows = [r for r in rows if r["batch"] == batch]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fails = bench_results.failures(results)
    fig = go.Figure()
    labels = _ordered([r["label"] for r in rows] + [k[2] for k in fails if k[0] in ops and k[1] == size
                                                    and k[2] != ref])
    for label in labels:
        vals = {r["op"]: r[field] for r in rows if r["label"] == label}
        failed = {op: fails[(op, size, label)] for op in ops if (op, size, label) in fails}
        _bars_with_failures(fig, ops, label, vals, failed)
    fig.add_hline(y=1.0, line=_REF_LINE, annotation_text=f"{ref} = 1.0", annotation_position="top left")
    kind = "peak live bytes" if field.startswith("peak") else "bytes allocated"
    _bar_layout(fig, f"{kind} by the batched backward vs {ref} (batch {batch}, {size} inputs; "
                "torch.profiler memory events; x = failed)", f"{kind} / {ref}'s (x)")
    return fig


def overhead_chart(results: dict[str, Any], field: str = "us_per_node_vs_none",
                   ops: Sequence[str] | None = None) -> go.Figure:
    """Grouped bars per op (``ops``: those only): the cost when vmap is off, microseconds per
    backward node over no strategy; the no-op Python hook is the floor a hook-based approach
    cannot beat; an ``x`` where the strategy could not build or run the graph."""
    keep = (lambda op: op in ops) if ops else (lambda op: True)  # noqa: E731
    rows = [r for r in bench_results.overhead_rows(results) if r["label"] != NO_STRATEGY and keep(r["op"])]
    errors = {(r["op"], r["label"]): r["error"] for r in results.get("overhead", [])
              if r.get("error") and keep(r["op"])}
    ops = list(dict.fromkeys([r["op"] for r in rows] + [k[0] for k in errors]))
    fig = go.Figure()
    for label in _ordered([r["label"] for r in rows] + [k[1] for k in errors]):
        vals = {r["op"]: r for r in rows if r["label"] == label}
        _bars_with_failures(
            fig, ops, label, {op: r[field] for op, r in vals.items()},
            {op: why for (op, lbl), why in errors.items() if lbl == label},
            {op: f"ratio {r['ratio_vs_none']:.3g}, noise (IQR/median) {r['rel_iqr']:.2g}"
             for op, r in vals.items()})
    fig.add_hline(y=0, line=_REF_LINE, annotation_text="no strategy = 0", annotation_position="top left")
    _bar_layout(fig, "vmap off: plain torch.autograd.grad, cost per backward node over no strategy "
                "(x = failed)", "time per node over no strategy (us)", legend="installed")
    # Explain values below zero where they are drawn: beyond the run's noise (IQR per node) only
    # builtin / handfixed are expected there, since they run another formula than the baseline.
    base = {r["op"]: r for r in bench_results.overhead_rows(results) if r["label"] == NO_STRATEGY}

    def spread(r: dict) -> float:
        return r["rel_iqr"] * r["median_s"] / r["nodes"] * 1e6

    def noise(r: dict) -> float:  # the two series' spreads added: a difference of two medians
        if field != "us_per_node_vs_none":
            return 0.0
        return spread(r) + (spread(base[r["op"]]) if r["op"] in base else 0.0)

    below = sorted({r["label"] for r in rows if _finite(r[field]) and r[field] < -noise(r)})
    if any(_finite(r[field]) and r[field] < 0 for r in rows):
        expected = [x for x in below if x in ("builtin", "handfixed")]
        other = [x for x in below if x not in expected]
        figstyle.add_caption(fig, " ".join(filter(None, [
            "Below zero = faster than the baseline, which runs the legacy formula as a Python "
            "autograd.Function with no strategy.",
            f"{', '.join(expected)}: below it beyond the run's noise, as expected: builtin runs "
            "torch's C++ formula and handfixed the modern one instead of the legacy formula."
            if expected else "",
            f"{', '.join(other)}: below it beyond the run's noise, not explained by the strategy."
            if other else "",
            "Every other bar below zero is within the run's noise (hover: IQR/median)."])))
    return fig


def all_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The section's charts by name (for the report and the notebook); the ``_large`` ratio
    charts only when the run measured large inputs."""
    figs = {
        "ratio_vs_handfixed": ratio_vs_batch(results, "small", "ratio_vs_handfixed"),
        "ratio_vs_builtin": ratio_vs_batch(results, "small", "ratio_vs_builtin"),
        "speedup_vs_loop": ratio_vs_batch(results, "small", "speedup_vs_loop"),
    }
    if "large" in results["config"].get("sizes", ()):
        # At large inputs handfixed can do more work than a functional formula needs (see
        # bench_results.reference_check), so the cost is drawn against the cheaper reference.
        figs["ratio_vs_floor_large"] = ratio_vs_batch(results, "large", "ratio_vs_floor")
        figs["ratio_vs_handfixed_large"] = ratio_vs_batch(results, "large", "ratio_vs_handfixed")
        figs["ratio_vs_builtin_large"] = ratio_vs_batch(results, "large", "ratio_vs_builtin")
    figs.update(copies=copies_chart(results), memory=memory_chart(results),
                overhead=overhead_chart(results))
    return figs
