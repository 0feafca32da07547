"""Display helpers shared by the notebooks: tables, a heatmap, verdicts and sources.

Everything here turns *computed* results (``funcbwd.run.matrix.CellResult`` lists and the like) into
something to look at; nothing here decides an outcome. Text reprs are deterministic (no timings,
no addresses) so nbval can compare them: a change in library results changes the notebook's
stored text and fails CI. Rich objects carry both ``_repr_html_``/``_repr_markdown_`` and a
plain-text ``__repr__``; no IPython import is needed.
"""

from __future__ import annotations

import html
import inspect
import textwrap
from typing import Any, Callable, Iterable, Mapping, Sequence

from funcbwd.run import matrix
from funcbwd.run.matrix import REASONS, CellResult

STATUS_ORDER = ("pass", "pass_fallback", "mismatch", "fail", "not_applicable")
STATUS_LABEL = {
    "pass": "pass",
    "pass_fallback": "pass (slow fallback)",
    "mismatch": "WRONG result",
    "fail": "FAIL",
    "not_applicable": "n/a",
}
# Colour-blind-safe-ish traffic light; n/a is grey.
STATUS_COLOR = {
    "pass": "#1a9850",
    "pass_fallback": "#a6d96a",
    "mismatch": "#fdae61",
    "fail": "#d73027",
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

    # torch.profiler (used by funcbwd.observe.trace) logs timestamped kineto lines on stderr; level 6
    # silences them (read lazily at the first profile, so setting it here is in time).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    pio.renderers.default = "plotly_mimetype"
    torch.manual_seed(seed)
    # vmap's slow-fallback warning is data (the matrix records it), not noise on stderr.
    warnings.filterwarnings("ignore", message=".*performance drop because we have not yet implemented.*")


class Rich:
    """An object that shows as HTML or Markdown in Jupyter and as plain text elsewhere."""

    def __init__(self, text: str, html_text: str | None = None, markdown: str | None = None):
        self.text, self.html_text, self.markdown = text, html_text, markdown

    def _repr_html_(self) -> str | None:
        return self.html_text

    def _repr_markdown_(self) -> str | None:
        return None if self.html_text is not None else self.markdown

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


# ------------------------------------------------------------------------------ cell summaries
def fallback_names(ops: Iterable[str]) -> list[str]:
    """Fallback op names as recorded, without the sentence's trailing period."""
    return sorted({o.rstrip(".") for o in ops})


def cell_kind(cell: Mapping[str, Any]) -> str:
    """A summarized matrix cell's display status: pass_fallback when vmap needed its slow path."""
    if cell["status"] == "pass" and cell["fallback_ops"]:
        return "pass_fallback"
    return cell["status"]


def cell_text(cell: Mapping[str, Any]) -> str:
    kind = cell_kind(cell)
    text = STATUS_LABEL[kind]
    if cell["status"] in ("fail", "mismatch"):
        text += f" {cell['passed']}/{cell['total']}"
        if cell["reason"]:
            text += f" ({cell['reason']})"
    return text


def cell_hover(cell: Mapping[str, Any]) -> str:
    """Hover text: status, classified reason, fallback ops, failing samples, first message line."""
    lines = [f"<b>{html.escape(cell_text(cell))}</b>",
             f"samples passed: {cell['passed']}/{cell['total']}"]
    if cell["reason"]:
        lines.append("reason: " + html.escape(REASONS.get(cell["reason"], cell["reason"])))
    if cell["fallback_ops"]:
        lines.append("slow fallback for: " + html.escape(", ".join(fallback_names(cell["fallback_ops"]))))
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
                             f"{html.escape(cell_text(c))}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    table = (f'<table class="funcbwd-matrix">{cap}<thead><tr>{head}</tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>")
    return Rich(matrix_text(results), table)


def records_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
                  caption: str = "", fmt: Callable[[Any], str] | None = None) -> Rich:
    """A generic HTML/text table of dict rows (decision tables, per-op summaries)."""
    columns = list(columns or (records[0].keys() if records else []))
    fmt = fmt or _fmt
    text_rows = [columns] + [[fmt(r.get(c, "")) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in text_rows) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in text_rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>"
                   for row in text_rows[1:])
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return Rich("\n".join(lines), f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return "" if v is None else str(v)


# ------------------------------------------------------------------------------ heatmap
def matrix_heatmap(results: Sequence[CellResult], title: str = "op x scenario x strategy"):
    """A plotly heatmap: rows op / scenario, columns strategy, colour = status; hover shows the
    classified failure reason, the fallback ops and the failing samples."""
    import plotly.graph_objects as go

    summary = matrix.summarize(results)
    ops, scenarios, strategies = _axes(results)
    code = {k: i for i, k in enumerate(STATUS_ORDER)}
    rows = [(op, sc) for op in ops for sc in scenarios]
    z, text, hover = [], [], []
    for op, sc in rows:
        zr, tr, hr = [], [], []
        for st in strategies:
            c = summary.get((op, sc, st))
            if c is None:
                zr.append(None), tr.append(""), hr.append("not run")
                continue
            zr.append(code[cell_kind(c)] + 0.5)  # centre of its colour band
            tr.append({"pass": "ok", "pass_fallback": "ok+fb", "mismatch": "WRONG",
                       "fail": "FAIL", "not_applicable": "n/a"}[cell_kind(c)])
            hr.append(f"{op} / {sc} / {st}<br>" + cell_hover(c))
        z.append(zr), text.append(tr), hover.append(hr)
    n = len(STATUS_ORDER)
    colorscale = []
    for i, k in enumerate(STATUS_ORDER):
        colorscale += [[i / n, STATUS_COLOR[k]], [(i + 1) / n, STATUS_COLOR[k]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=strategies, y=[f"{op} · {sc}" for op, sc in rows], text=text,
        texttemplate="%{text}", customdata=hover, hovertemplate="%{customdata}<extra></extra>",
        colorscale=colorscale, zmin=0, zmax=n, xgap=1, ygap=1,
        colorbar=dict(tickvals=[i + 0.5 for i in range(n)],
                      ticktext=[STATUS_LABEL[k] for k in STATUS_ORDER]),
    ))
    fig.update_layout(title=title, height=max(300, 22 * len(rows) + 120),
                      yaxis=dict(autorange="reversed"), margin=dict(l=220, r=20, t=50, b=40))
    return fig


# ------------------------------------------------------------------------------ verdicts
def _by_strategy(results: Sequence[CellResult]) -> dict[str, dict[str, dict[str, Any]]]:
    summary = matrix.summarize(results)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (op, sc, st), cell in summary.items():
        out.setdefault(st, {})[sc] = cell
    return out


def strategy_score(cells: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Counts over one strategy's scenarios: passed, applicable, with fallback, failure reasons."""
    applicable = {sc: c for sc, c in cells.items() if c["status"] != "not_applicable"}
    passed = [sc for sc, c in applicable.items() if c["status"] == "pass"]
    fallback = [sc for sc in passed if applicable[sc]["fallback_ops"]]
    bad = {sc: c for sc, c in applicable.items() if c["status"] != "pass"}
    return {
        "passed": len(passed),
        "applicable": len(applicable),
        "scenarios": len(cells),
        "fallback": fallback,
        "fallback_ops": fallback_names(f for c in applicable.values() for f in c["fallback_ops"]),
        "failing": sorted(bad),
        "wrong": sorted(sc for sc, c in bad.items() if c["status"] == "mismatch"),
        "reasons": sorted({c["reason"] or c["status"] for c in bad.values()}),
        "not_applicable": sorted(sc for sc, c in cells.items() if c["status"] == "not_applicable"),
    }


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
    from funcbwd.ops import registry

    spec = registry.get_op(op)
    return source(spec.formula, f"{spec.source}; later fixed by {spec.fixed_by}")


# ------------------------------------------------------------------------------ recommendation
#: (criterion, direction, description): "max" means larger is better.
CRITERIA: tuple[tuple[str, str, str], ...] = (
    ("coverage", "max", "fraction of applicable matrix cells that pass"),
    ("fallback_cells", "min", "passing cells that needed vmap's slow per-sample fallback"),
    ("error_safe", "max", "1 if no state leaks after a failing backward"),
    ("new_ops", "min", "operators added to the library (FC/BC surface)"),
    ("overhead_vmap_off", "min", "time ratio vs plain when vmap is off"),
    ("copies", "min", "extra copies per backward vs builtin"),
    ("per_op_code", "min", "hand-written lines needed per new formula"),
)


def rank_strategies(evidence: Mapping[str, Mapping[str, Any]],
                    criteria: Sequence[tuple[str, str, str]] = CRITERIA) -> list[dict[str, Any]]:
    """Rank strategies lexicographically by ``criteria`` (in order of importance).

    ``evidence`` maps strategy -> {criterion: number or None}; a None (not measured) sorts last
    for that criterion. Returns rows with the rank and the criterion that decided against the
    next strategy.
    """
    def key(st: str) -> tuple:
        out = []
        for name, direction, _ in criteria:
            v = evidence[st].get(name)
            if v is None:
                out.append((1, 0.0))
            else:
                out.append((0, -float(v) if direction == "max" else float(v)))
        return tuple(out)

    order = sorted(evidence, key=lambda st: (key(st), st))
    rows = []
    for i, st in enumerate(order):
        decided = ""
        if i + 1 < len(order):
            ka, kb = key(st), key(order[i + 1])
            for (name, _, _), a, b in zip(criteria, ka, kb):
                if a != b:
                    decided = name
                    break
        rows.append({"rank": i + 1, "strategy": st, **{c[0]: evidence[st].get(c[0]) for c in criteria},
                     "ahead_of_next_by": decided})
    return rows


def recommendation(evidence: Mapping[str, Mapping[str, Any]],
                   criteria: Sequence[tuple[str, str, str]] = CRITERIA,
                   exclude: Iterable[str] = ("plain", "builtin")) -> Rich:
    """A recommendation paragraph generated from ranked evidence (reference strategies excluded)."""
    exclude = set(exclude)
    ranked = rank_strategies({k: v for k, v in evidence.items() if k not in exclude}, criteria)
    if not ranked:
        return Rich("No candidate strategies in the evidence.")
    best = ranked[0]
    desc = {c[0]: c[2] for c in criteria}
    parts = [f"Recommendation: {best['strategy']}."]
    facts = [f"{name} = {_fmt(best[name])}" for name, _, _ in criteria if best.get(name) is not None]
    parts.append("It ranks first on the evidence (" + "; ".join(facts) + ").")
    if len(ranked) > 1:
        second = ranked[1]
        parts.append(f"Runner-up: {second['strategy']}; {best['strategy']} is ahead on "
                     f"{best['ahead_of_next_by'] or 'no criterion (a tie broken by name)'}"
                     + (f" ({desc[best['ahead_of_next_by']]})." if best["ahead_of_next_by"] else "."))
    order = " > ".join(r["strategy"] for r in ranked)
    parts.append(f"Full order: {order}. Criteria, most important first: "
                 + ", ".join(c[0] for c in criteria) + ".")
    text = " ".join(parts)
    return Rich("\n".join(textwrap.wrap(text, 100)), markdown=text)


# ------------------------------------------------------------------------------ design-review evidence
def matrix_evidence(results: Sequence[CellResult]) -> dict[str, dict[str, Any]]:
    """Per strategy, from matrix results: ``coverage`` (passing / applicable op x scenario cells),
    ``fallback_cells`` (passing only via vmap's slow loop) and ``nesting`` (scenarios in which
    every applicable op passes)."""
    out: dict[str, dict[str, Any]] = {}
    for st, cells in _by_op_scenario(results).items():
        applicable = [c for c in cells.values() if c["status"] != "not_applicable"]
        passed = [c for c in applicable if c["status"] == "pass"]
        scenarios = sorted({sc for (_, sc) in cells})
        full = [sc for sc in scenarios
                if all(c["status"] in ("pass", "not_applicable") for (o, s), c in cells.items() if s == sc)]
        out[st] = {
            "coverage": round(len(passed) / len(applicable), 3) if applicable else None,
            "fallback_cells": sum(bool(c["fallback_ops"]) for c in passed),
            "nesting": len(full),
            "nesting_scenarios": full,
        }
    return out


def _by_op_scenario(results: Sequence[CellResult]) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for (op, sc, st), cell in matrix.summarize(results).items():
        out.setdefault(st, {})[(op, sc)] = cell
    return out


def error_safety(strategy: str, scenarios: Sequence[str] = ("vmap_cotangents", "grad_inside_vmap"),
                 base_exception: Sequence[bool] = (False, True)) -> dict[str, Any]:
    """Run formulas that raise (``funcbwd.ops.inject``: before the first op, mid-formula, inside the
    last op, after it; an Exception and a KeyboardInterrupt) under ``strategy`` and compare torch's
    transform state and the strategy's own bookkeeping before and after.

    The scenario runs directly (not through ``matrix.run``, whose cleanup would hide a leak); a
    leak found is cleaned up here so the caller's process stays usable.
    """
    from funcbwd import internals
    from funcbwd.ops import inject
    from funcbwd.run.scenarios import SCENARIOS, Case
    from funcbwd.strategies import get_strategy

    st = get_strategy(strategy)
    checked, leaks = 0, []
    for sc in scenarios:
        for point in inject.POINTS:
            for base in base_exception:
                spec = inject.raising_op(point, base_exception=base)
                before = (internals.dispatch_state(), st.bookkeeping())
                try:
                    SCENARIOS[sc].run(Case(spec, inject.non_square_sample(), st))
                except BaseException:  # noqa: BLE001 - the point is to raise, including interrupts
                    pass
                after = (internals.dispatch_state(), st.bookkeeping())
                checked += 1
                if before != after:
                    leaks.append(f"{sc}/{point}{'/interrupt' if base else ''}: "
                                 + before[0].describe_difference(after[0]))
                    internals.restore_stack_depth(before[0].depth)
    return {"checked": checked, "leaks": leaks, "error_safe": 0 if leaks else 1}


def needs_per_op_input(strategy: str, op: str = "diag", field: str = "schema") -> int:
    """1 if ``strategy`` stops working when ``op``'s hand-written ``field`` is blanked, else 0:
    a measured answer to "what must be written by hand for each new formula?"."""
    import dataclasses as dc

    from funcbwd.ops import registry

    spec = registry.get_op(op)
    blank = dc.replace(spec, name=f"{op}_without_{field}", **{field: ""})
    sample = next(s for s in spec.samples() if matrix.run(spec, "vmap_cotangents", "plain", s).status == "fail")
    with_field = matrix.run(spec, "vmap_cotangents", strategy, sample).status
    without = matrix.run(blank, "vmap_cotangents", strategy, sample).status
    return int(with_field == "pass" and without != "pass")


def new_operators(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn``; return its result and the operators the dispatcher learned meanwhile.

    torch registers some of its own operators lazily (prims, c10d_functional...) on first use of
    make_fx, functionalize and friends: run a warm-up (:func:`warm_up_strategies`) first so the
    count is the strategy's own library growth."""
    from funcbwd import internals

    before = internals.dispatcher_all_op_names()
    out = fn()
    return out, sorted(internals.dispatcher_all_op_names() - before)


def warm_up_strategies(strategies: Iterable[str], ops: Sequence[str] = ("diag", "prod")) -> None:
    """Run every scenario once per strategy on throwaway copies of ``ops`` (their own names, so
    strategies that register or cache per op do so for the copies, not for the measured ops).
    diag covers the functionalize/make_fx paths; prod the data-dependent one (a failed trace
    loads more of torch's lazily registered operators)."""
    import dataclasses as dc

    from funcbwd.ops import registry
    from funcbwd.run.scenarios import SCENARIO_NAMES

    for op in ops:
        spec = registry.get_op(op)
        copy = dc.replace(spec, name=f"{op}_warmup")
        for st in strategies:
            for sc in SCENARIO_NAMES:
                matrix.run(copy, sc, st, spec.sample())
