"""``python -m funcbwd report``: the workbench's views in ONE self-contained static HTML file.

For readers without Jupyter (or without a network): the matrix (table + heatmap), a verdict per
op, dispatch-key traces, graph diffs, bench charts, the OpInfo coverage and the design review,
all computed by the library when the report is built (bench and coverage from their saved JSON
results, which take minutes to produce). plotly.js is embedded inline exactly once and every
figure reuses it; nothing references a CDN or any other URL, so the file opens offline.

A section whose module or data file is missing shows a visible note instead; a section that
raises shows the error and makes the command exit 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import html
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from funcbwd.ops import registry
from funcbwd.run import matrix
from funcbwd.errors import parse_names
from funcbwd.run.scenarios import SCENARIO_NAMES
from funcbwd.strategies import available
from funcbwd.errors import first_line

ROOT = Path(__file__).resolve().parents[3]
BENCH_JSON = ROOT / "data" / "bench-quick.json"
COVERAGE_JSON = ROOT / "data" / "coverage-default.json"
#: the strategy whose trace and graph the report contrasts with the legacy formula (plain)
FIX_STRATEGY = "per_formula"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222}
header{background:#243447;color:#fff;padding:16px 28px}header h1{margin:0 0 4px;font-size:22px}
header p{margin:2px 0;color:#cfd8e3}main{padding:8px 28px 40px;max-width:1400px}
nav ol{columns:2;max-width:700px}section{border-top:1px solid #ddd;margin-top:24px}
h2{margin:18px 0 8px}h3{margin:16px 0 6px}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}thead th{background:#eee}
pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px;margin:8px 0}
.error{background:#fdecea;border-left:4px solid #d73027;padding:6px 10px;margin:8px 0}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.verdict{margin:6px 0 12px}.figure{margin:8px 0}
"""


# ------------------------------------------------------------------------------ figures
class FigureEmbedder:
    """Turns plotly figures into ``<div>`` + ``Plotly.newPlot`` snippets; the page embeds
    plotly.js once (:meth:`script`) instead of once per figure."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: Any) -> str:
        self.count += 1
        body = fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                           div_id=f"funcbwd-fig-{self.count}", config={"displaylogo": False})
        return f'<div class="figure">{body}</div>'

    def script(self) -> str:
        if not self.count:
            return ""
        from plotly.offline import get_plotlyjs

        return f'<script type="text/javascript">{get_plotlyjs()}</script>'


# ------------------------------------------------------------------------------ sections
@dataclasses.dataclass
class Section:
    id: str
    title: str
    body: str = ""
    status: str = "ok"  # ok | missing (module or data absent: a note) | error (raised)
    seconds: float = 0.0


class Missing(Exception):
    """A section cannot be built because a module or data file is absent (shown as a note)."""


def _note(text: str, cls: str = "note") -> str:
    return f'<div class="{cls}">{html.escape(text)}</div>'


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


@dataclasses.dataclass
class Context:
    ops: list[str]
    scenarios: list[str]
    strategies: list[str]
    samples: str
    figure: FigureEmbedder
    results: list[matrix.CellResult] = dataclasses.field(default_factory=list)


def matrix_section(ctx: Context) -> str:
    from funcbwd.views import display
    parts = [f"<p>{len(ctx.results)} cells ({ctx.samples} samples): "
             + html.escape(", ".join(f"{s} {sum(r.status == s for r in ctx.results)}"
                                     for s in matrix.STATUSES)) + ".</p>",
             display.matrix_table(ctx.results, caption="op x scenario rows, strategy columns; "
                                  "hover a cell for the reason").html_text,
             ctx.figure(display.matrix_heatmap(ctx.results)),
             "<details><summary>the same matrix as text</summary>"
             + _pre(matrix.format_table(ctx.results)) + "</details>"]
    return "\n".join(parts)


def verdict_section(ctx: Context) -> str:
    from funcbwd.views import display
    return "\n".join(f'<div class="verdict"><b>{html.escape(op)}.</b> '
                     f"{html.escape(display.verdict_text(op, ctx.results))}</div>" for op in ctx.ops)


def _trace_scenario(ctx: Context, op: str) -> str:
    """The first scenario where the legacy formula (plain) fails on ``op``, else the first run."""
    fails = [r.scenario for r in ctx.results if r.op == op and r.strategy == "plain" and r.status == "fail"]
    return fails[0] if fails else ctx.scenarios[0]


def trace_section(ctx: Context) -> str:
    from funcbwd.observe import trace
    parts = ["<p>What each backward formula executes in one scenario, and how vmap handles each "
             f"call: the legacy formula (plain) where it fails, then {FIX_STRATEGY} in the same "
             "scenario.</p>"]
    for op in ctx.ops:
        sc = _trace_scenario(ctx, op)
        for st in [s for s in ("plain", FIX_STRATEGY) if s in ctx.strategies] or ctx.strategies[:1]:
            tr = trace.trace(op, st, sc)
            parts.append(f"<details><summary>{html.escape(f'{op} / {st} / {sc}: {tr.status}')}"
                         f"</summary>{tr.html()}</details>")
    return "\n".join(parts)


def graph_section(ctx: Context) -> str:
    from funcbwd.observe import graphs
    parts = ["<p>Each op's backward formula as written (plain) against what the traced strategy "
             "runs (functionalized, copies elided): FX graphs, removed lines red, added green.</p>"]
    for op in ctx.ops:
        parts.append(f"<details><summary>{html.escape(op)}: plain vs traced</summary>"
                     f"{graphs.formula_diff(op, 'plain', 'traced').html()}</details>")
    return "\n".join(parts)


def bench_section(ctx: Context) -> str:
    from funcbwd.measure import bench
    from funcbwd.views import plots
    if not BENCH_JSON.exists():
        raise Missing(f"no saved bench results at {BENCH_JSON.relative_to(ROOT)} "
                      "(produce them with: python -m funcbwd bench --out data/bench-quick.json)")
    results = bench.load(str(BENCH_JSON))
    parts = [f"<p>From {html.escape(str(BENCH_JSON.relative_to(ROOT)))}; times only as ratios "
             "(same machine, same run).</p>"]
    parts.append(_pre(bench.format_headline(bench.headline(results))))
    for name, fig in plots.all_figures(results).items():
        parts.append(f"<h3>{html.escape(name)}</h3>" + ctx.figure(fig))
    return "\n".join(parts)


def coverage_section(ctx: Context) -> str:
    from funcbwd.measure import coverage
    if not COVERAGE_JSON.exists():
        raise Missing(f"no saved coverage sweep at {COVERAGE_JSON.relative_to(ROOT)} "
                      "(produce it with: python -m funcbwd coverage --out data/coverage-default.json)")
    records = coverage.load(str(COVERAGE_JSON))
    return "\n".join([
        f"<p>{len(records)} records from {html.escape(str(COVERAGE_JSON.relative_to(ROOT)))}.</p>",
        _pre(coverage.format_summary(coverage.summarize(records))),
        ctx.figure(coverage.summary_figure(records)),
        "<details><summary>per-op table</summary>" + coverage.table_html(records) + "</details>",
    ])


CANDIDATES = ("composite", "hooks", "whole", "per_formula", "traced")


def design_evidence(ctx: Context) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The design-review criteria, measured with the same library calls as
    notebooks/design_review (without a saved bench run the timing criterion stays None = not
    measured, which ranks last). Returns (evidence, criterion -> how it was measured)."""
    from funcbwd.observe import graphs
    from funcbwd.views import display

    cands = [st for st in CANDIDATES if st in ctx.strategies]
    evidence = {st: dict(e) for st, e in display.matrix_evidence(ctx.results).items() if st in cands}
    how = {"coverage": "matrix above", "fallback_cells": "matrix above",
           "error_safe": "display.error_safety (formulas raising mid-backward)",
           "copies": "graphs.copy_table (vmap, extra copies over builtin)",
           "per_op_code": "display.needs_per_op_input (diag without its schema)"}
    rows = graphs.copy_table(ops=ctx.ops, vmap=True)
    for st in cands:
        evidence[st]["error_safe"] = display.error_safety(st)["error_safe"]
        form = graphs.STRATEGY_FORMS.get(st)
        evidence[st]["copies"] = sum(r["extra_copies"] for r in rows
                                     if r["form"] == form and r["extra_copies"] is not None)
        evidence[st]["per_op_code"] = display.needs_per_op_input(st)
    if BENCH_JSON.exists():
        from funcbwd.measure import bench

        rows = bench.overhead_rows(bench.load(str(BENCH_JSON)))
        for st in cands:
            ratios = [r["ratio_vs_none"] for r in rows if r["label"] == st]
            evidence[st]["overhead_vmap_off"] = round(sum(ratios) / len(ratios), 2) if ratios else None
        how["overhead_vmap_off"] = f"{BENCH_JSON.relative_to(ROOT)} (bench.overhead_rows)"
    return evidence, how


def design_section(ctx: Context) -> str:
    from funcbwd.views import display
    evidence, how = design_evidence(ctx)
    if not evidence:
        raise Missing("none of the candidate strategies (" + ", ".join(CANDIDATES) + ") was run")
    criteria = [c for c in display.CRITERIA if c[0] in how]
    unmeasured = [c[0] for c in display.CRITERIA if c[0] not in how]
    rows = display.rank_strategies(evidence, criteria)
    parts = ["<p>The candidate strategies ranked lexicographically on evidence computed for this "
             f"report's ops ({html.escape(', '.join(ctx.ops))}), criteria most important first:</p><ul>"
             + "".join(f"<li><b>{html.escape(c[0])}</b>: {html.escape(c[2])}; from "
                       f"{html.escape(how[c[0]])}</li>" for c in criteria) + "</ul>",
             display.records_table(rows, columns=["rank", "strategy", *(c[0] for c in criteria),
                                                   "ahead_of_next_by"]).html_text,
             "<p>" + html.escape(display.recommendation(evidence, criteria).text.replace("\n", " ")) + "</p>"]
    if unmeasured:
        parts.append(_note("Not measured in this report (see notebooks/design_review for the full "
                           "evidence): " + ", ".join(unmeasured) + "."))
    return "\n".join(parts)


SECTIONS: tuple[tuple[str, str, Callable[[Context], str]], ...] = (
    ("matrix", "Matrix: op x scenario x strategy", matrix_section),
    ("verdicts", "Verdicts per op", verdict_section),
    ("traces", "Dispatch-key traces", trace_section),
    ("graphs", "Graph diffs", graph_section),
    ("bench", "Overhead and copies (bench charts)", bench_section),
    ("coverage", "OpInfo coverage", coverage_section),
    ("design", "Design review", design_section),
)


def build_sections(ctx: Context, progress: Callable[[str], None] | None = None) -> list[Section]:
    """Every section, each degraded on its own: Missing -> note, any other error -> error box."""
    out = []
    for sid, title, build in SECTIONS:
        start = time.perf_counter()
        sec = Section(sid, title)
        try:
            sec.body = build(ctx)
        except Missing as e:
            sec.status, sec.body = "missing", _note(f"Section not available: {e}.")
        except Exception as e:  # noqa: BLE001 - one broken view must not lose the others
            sec.status = "error"
            sec.body = _note(f"This section failed to build: {type(e).__name__}: "
                             f"{first_line(str(e))}", "error")
        sec.seconds = time.perf_counter() - start
        if progress:
            progress(f"{sid}: {sec.status} ({sec.seconds:.1f} s)")
        out.append(sec)
    return out


def render(ctx: Context, sections: Sequence[Section], seconds: float) -> str:
    import torch

    toc = "".join(f'<li><a href="#{s.id}">{html.escape(s.title)}</a>'
                  + ("" if s.status == "ok" else f" ({s.status})") + "</li>" for s in sections)
    body = "\n".join(f'<section id="{s.id}" data-status="{s.status}"><h2>{html.escape(s.title)}</h2>'
                     f"\n{s.body}\n</section>" for s in sections)
    meta = (f"torch {torch.__version__}, Python {platform.python_version()}; "
            f"ops: {', '.join(ctx.ops)}; strategies: {', '.join(ctx.strategies)}; "
            f"{len(ctx.scenarios)} scenarios; {ctx.samples} samples; built in {seconds:.0f} s on "
            f"{datetime.date.today().isoformat()}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>funcbwd report</title><style>{CSS}</style>
{ctx.figure.script()}
</head><body>
<header><h1>funcbwd: functionalizing in-place backward formulas for vmap(vjp(f))</h1>
<p>{html.escape(meta)}</p>
<p>Every result below was computed by the funcbwd library when this file was built
(bench and coverage from their saved results). Self-contained: opens offline.</p></header>
<main><nav><h2>Contents</h2><ol>{toc}</ol></nav>
{body}
</main></body></html>
"""


def build_report(ops: str | Sequence[str] | None = None, *, quick: bool = False,
                 scenarios: str | Sequence[str] | None = None,
                 strategies: str | Sequence[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> tuple[str, list[Section]]:
    """The report's HTML and its sections (default ops: the 8 test ops of functorch#241)."""
    start = time.perf_counter()
    ctx = Context(ops=parse_names("op", ops if ops is not None else list(registry.TEST_OPS),
                                  registry.op_names()),
                  scenarios=parse_names("scenario", scenarios, SCENARIO_NAMES),
                  strategies=parse_names("strategy", strategies, available()),
                  samples="first" if quick else "all", figure=FigureEmbedder())
    ctx.results = matrix.run_matrix(ctx.ops, ctx.scenarios, ctx.strategies, samples=ctx.samples)
    if progress:
        progress(f"matrix: {len(ctx.results)} cells ({time.perf_counter() - start:.1f} s)")
    sections = build_sections(ctx, progress)
    return render(ctx, sections, time.perf_counter() - start), sections


# ------------------------------------------------------------------------------ CLI
def configure_report(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--ops", default=None,
                   help="comma-separated ops (default: the 8 test ops; see `python -m funcbwd ops`)")
    p.add_argument("--scenarios", default=None, help="comma-separated scenarios (default all)")
    p.add_argument("--strategies", default=None, help="comma-separated strategies (default all)")
    p.add_argument("--quick", action="store_true", help="only the first sample of each op")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def main_report(args: argparse.Namespace) -> int:
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    page, sections = build_report(args.ops, quick=args.quick, scenarios=args.scenarios,
                                  strategies=args.strategies, progress=progress)
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True)
    out.write_text(page, encoding="utf-8")
    missing = [s.id for s in sections if s.status == "missing"]
    errors = [s.id for s in sections if s.status == "error"]
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB)"
          + (f"; sections without data or module: {', '.join(missing)}" if missing else "")
          + (f"; FAILED sections: {', '.join(errors)}" if errors else ""))
    return 1 if errors else 0
