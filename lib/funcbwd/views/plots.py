"""Charts for "Overhead and copies, measured", built from a :mod:`funcbwd.measure.bench` result.

Every function takes the result dict (``bench.run_bench`` or ``bench.load``) and returns a
``plotly.graph_objects.Figure``; nothing is displayed or written here, and no figure references a
CDN (the caller chooses how to embed plotly.js). Figures hold at most a few hundred points.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from funcbwd.measure import bench
from funcbwd.errors import BadInputError

# One colour per label, stable across charts.
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")
_ORDER = ("builtin", "plain", "composite", "hooks", "whole", "per_formula", bench.COPY_RULE,
          "traced", bench.NO_STRATEGY, bench.NOOP_HOOK)
_METRICS = {
    "ratio_vs_builtin": ("time / builtin under vmap (lower is better)", 1.2),
    "speedup_vs_loop": ("per-sample loop / vmap (higher is better)", 10.0),
    "speedup_vs_builtin_loop": ("builtin loop / vmap (higher is better)", 10.0),
}


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


def ratio_vs_batch(results: dict[str, Any], size: str = "small", metric: str = "ratio_vs_builtin",
                   ops: Sequence[str] | None = None, cols: int = 3) -> go.Figure:
    """One panel per op: ``metric`` against batch size, one line per strategy, log-log axes, with
    the target as a dotted line (1.2x builtin, or 10x the loop)."""
    if metric not in _METRICS:
        raise BadInputError(f"unknown metric {metric!r}; valid metrics: {', '.join(_METRICS)}")
    title, target = _METRICS[metric]
    rows = [r for r in bench.ratios(results) if r["size"] == size and _finite(r[metric])]
    if metric != "speedup_vs_builtin_loop":
        rows = [r for r in rows if not (metric == "ratio_vs_builtin" and r["label"] == "builtin")]
    names = [op for op in (ops or results["config"]["ops"]) if any(r["op"] == op for r in rows)]
    nrows, ncols = _grid(max(len(names), 1), cols)
    fig = make_subplots(rows=nrows, cols=ncols, subplot_titles=names or ["(no data)"],
                        horizontal_spacing=0.06, vertical_spacing=0.12)
    shown: set[str] = set()
    for i, op in enumerate(names):
        r_i, c_i = i // ncols + 1, i % ncols + 1
        op_rows = [r for r in rows if r["op"] == op]
        for label in _ordered([r["label"] for r in op_rows]):
            pts = sorted((r["batch"], r[metric]) for r in op_rows if r["label"] == label)
            fig.add_trace(go.Scatter(
                x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=label,
                legendgroup=label, showlegend=label not in shown,
                line={"color": label_color(label)},
                hovertemplate=f"{op} {label}<br>batch %{{x}}: %{{y:.3g}}<extra></extra>"),
                row=r_i, col=c_i)
            shown.add(label)
        fig.add_hline(y=target, line={"dash": "dot", "color": "#888", "width": 1}, row=r_i, col=c_i)
    fig.update_xaxes(type="log", title_text="batch size")
    fig.update_yaxes(type="log")
    fig.update_layout(title=f"{title}; {size} inputs", height=280 * nrows + 80,
                      margin={"l": 50, "r": 20, "t": 80, "b": 40}, legend={"title": "strategy"})
    return fig


def copies_chart(results: dict[str, Any], field: str = "extra_copies", vmap: bool = True) -> go.Figure:
    """Grouped bars per op: copies (or bytes) of each strategy's backward graph beyond builtin's,
    from ``funcbwd.observe.graphs`` copy accounting; a titled empty figure when that was unavailable."""
    copies = results.get("copies", {})
    if copies.get("status") != "ok":
        fig = go.Figure()
        fig.update_layout(title=f"copies: {copies.get('status', 'missing')} ({copies.get('reason', '')})")
        return fig
    rows = [r for r in copies["rows"] if r.get("vmap") == vmap and r["label"] != "builtin"]
    fig = go.Figure()
    ops = list(dict.fromkeys(r["op"] for r in rows))
    for label in _ordered([r["label"] for r in rows]):
        vals = {r["op"]: r.get(field) for r in rows if r["label"] == label}
        fig.add_trace(go.Bar(
            x=ops, y=[vals.get(op) if _finite(vals.get(op)) else None for op in ops], name=label,
            marker_color=label_color(label),
            hovertext=[next((r["copy_ops"] or r["error"] or "" for r in rows
                             if r["op"] == op and r["label"] == label), "") for op in ops]))
    fig.update_layout(barmode="group", title=f"{field.replace('_', ' ')} vs builtin "
                      f"({'under vmap' if vmap else 'no vmap'}; blank = failed to capture)",
                      yaxis_title=field, height=380, margin={"l": 50, "r": 20, "t": 60, "b": 40},
                      legend={"title": "strategy"})
    return fig


def memory_chart(results: dict[str, Any], batch: int | None = None, size: str = "large",
                 field: str = "allocated_vs_builtin") -> go.Figure:
    """Grouped bars per op: bytes the batched backward allocates (or its peak), relative to builtin."""
    rows = [r for r in bench.memory_rows(results) if r["size"] == size and r["label"] != "builtin"]
    batch = batch if batch is not None else max((r["batch"] for r in rows), default=None)
    rows = [r for r in rows if r["batch"] == batch]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig = go.Figure()
    for label in _ordered([r["label"] for r in rows]):
        vals = {r["op"]: r[field] for r in rows if r["label"] == label}
        fig.add_trace(go.Bar(x=ops, y=[vals.get(op) if _finite(vals.get(op)) else None for op in ops],
                             name=label, marker_color=label_color(label)))
    fig.add_hline(y=1.0, line={"dash": "dot", "color": "#888", "width": 1})
    fig.update_layout(barmode="group", title=f"{field.replace('_', ' ')} (batched backward, "
                      f"batch {batch}, {size} inputs; torch.profiler memory events)",
                      height=380, margin={"l": 50, "r": 20, "t": 60, "b": 40}, legend={"title": "strategy"})
    return fig


def overhead_chart(results: dict[str, Any], field: str = "us_per_node_vs_none") -> go.Figure:
    """Grouped bars per op: the cost when vmap is off, microseconds per backward node over no
    strategy; the no-op Python hook is the floor a hook-based approach cannot beat."""
    rows = [r for r in bench.overhead_rows(results) if r["label"] != bench.NO_STRATEGY]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    fig = go.Figure()
    for label in _ordered([r["label"] for r in rows]):
        vals = {r["op"]: r for r in rows if r["label"] == label}
        fig.add_trace(go.Bar(
            x=ops, y=[vals[op][field] if op in vals and _finite(vals[op][field]) else None for op in ops],
            name=label, marker_color=label_color(label),
            hovertext=[f"ratio {vals[op]['ratio_vs_none']:.3g}, noise (IQR/median) "
                       f"{vals[op]['rel_iqr']:.2g}" if op in vals else "" for op in ops]))
    fig.update_layout(barmode="group", title="vmap off: plain torch.autograd.grad, us per node over "
                      "no strategy", yaxis_title="us per node", height=380,
                      margin={"l": 50, "r": 20, "t": 60, "b": 40}, legend={"title": "installed"})
    return fig


def all_figures(results: dict[str, Any]) -> dict[str, go.Figure]:
    """The section's charts by name (for the report and the notebook)."""
    return {
        "ratio_vs_builtin": ratio_vs_batch(results, "small", "ratio_vs_builtin"),
        "speedup_vs_loop": ratio_vs_batch(results, "small", "speedup_vs_loop"),
        "copies": copies_chart(results),
        "memory": memory_chart(results),
        "overhead": overhead_chart(results),
    }
