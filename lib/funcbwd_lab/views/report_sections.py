"""What each section of ``python -m funcbwd_lab report`` shows (:mod:`funcbwd_lab.views.report`
lays them out in one page): the decision, today's hand-written branches, the matrix, a verdict per
op, dispatch-key traces (plain and the decision's pick), graph diffs, bench charts and the OpInfo
coverage, each built from a :class:`Context` (the matrix cells, the data directory) and degraded
on its own (:class:`Missing`: a note instead of the section).
"""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

from funcbwd_lab import figstyle
from funcbwd_lab.run import outcomes, runner
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.tables import fit
from funcbwd_lab.views import markup
from funcbwd_lab.views.readme import MATRIX_FILE_NAME

#: saved results read from the data directory (written by the bench and coverage commands)
BENCH_FILE = "bench-quick.json"


# ------------------------------------------------------------------------------ figures
class FigureEmbedder:
    """Turns plotly figures into ``<div>`` + ``Plotly.newPlot`` snippets; the page embeds
    plotly.js once (:meth:`script`) instead of once per figure."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: Any) -> str:
        self.count += 1
        body = fig.to_html(full_html=False, include_plotlyjs=False, include_mathjax=False,
                           div_id=f"funcbwd-fig-{self.count}", config=dict(figstyle.CONFIG))
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
    #: the directory of saved results (bench-quick.json, coverage-all.json.gz)
    data_dir: Path
    results: list[runner.CellResult] = dataclasses.field(default_factory=list)
    #: where the matrix came from: "saved" (the data directory's saved run) or "live"
    matrix_source: str = "live"
    _decision: Any = None

    def data_file(self, name: str) -> Path:
        return Path(self.data_dir) / name


def shown_path(path: Path) -> str:
    """``path`` as a reader should see it: relative to the current directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def matrix_section(ctx: Context) -> str:
    from funcbwd_lab.studies.review import review
    from funcbwd_lab.views import display
    basis = review.basis_text(review.basis(ctx.results))
    # rows where no strategy applies (a backward-only op in a forward-mode scenario) are named
    # once instead of drawn as rows of n/a
    empty = [(op, sc) for op, sc in dict.fromkeys((r.op, r.scenario) for r in ctx.results)
             if all(r.status == "not_applicable" for r in ctx.results if (r.op, r.scenario) == (op, sc))]
    shown = [r for r in ctx.results if (r.op, r.scenario) not in set(empty)]
    by_op: dict[str, list[str]] = {}
    for op, sc in empty:
        by_op.setdefault(op, []).append(sc)
    left_out = ("<p>Not applicable to any strategy, so not drawn: " + html.escape("; ".join(
        f"{op}: {', '.join(scs)}" for op, scs in by_op.items())) + ".</p>") if empty else ""
    origin = (f"the saved run {html.escape(shown_path(ctx.data_file(MATRIX_FILE_NAME)))}"
              if ctx.matrix_source == "saved" else "this report's own run")
    parts = [f"<p>From {origin}: cells over {html.escape(basis)}. Sample runs by status: "
             + html.escape(", ".join(f"{s} {sum(r.status == s for r in ctx.results)}"
                                     for s in outcomes.STATUSES)) + ".</p>",
             display.matrix_table(shown, caption="op x scenario rows, strategy columns",
                                  pick=pick_of(ctx)).html_text + left_out,
             ctx.figure(display.matrix_heatmap(ctx.results)),
             "<details><summary>the same matrix as text</summary>"
             + _pre(matrix.format_table(ctx.results)) + "</details>"]
    return "\n".join(parts)


def verdict_section(ctx: Context) -> str:
    from funcbwd_lab.studies.review import review
    from funcbwd_lab.views import display
    intro = (f"<p>Counts of scenarios (cells) per op, over "
             f"{html.escape(review.basis_text(review.basis(ctx.results)))}.</p>")
    return intro + "\n".join(f'<div class="verdict"><b>{html.escape(op)}.</b> '
                             f"{markup.inline(display.verdict_text(op, ctx.results))}</div>" for op in ctx.ops)


def _trace_scenario(ctx: Context, op: str) -> str:
    """The first scenario where the legacy formula (plain) fails on ``op``, else the first run."""
    fails = [r.scenario for r in ctx.results if r.op == op and r.strategy == "plain" and r.status == "fail"]
    return fails[0] if fails else ctx.scenarios[0]


def trace_section(ctx: Context) -> str:
    from funcbwd_lab.studies.trace import trace
    pick = pick_of(ctx)
    parts = ["<p>What each backward formula executes in one scenario, and how vmap handles each "
             f"call: the legacy formula (plain) where it fails, then the decision's pick "
             f"(<code>{html.escape(str(pick))}</code>) in the same scenario.</p>"]
    for op in ctx.ops:
        sc = _trace_scenario(ctx, op)
        for st in [s for s in ("plain", pick) if s in ctx.strategies] or ctx.strategies[:1]:
            tr = trace.trace(op, st, sc)
            parts.append(f"<details><summary>{html.escape(f'{op} / {st} / {sc}: {tr.status}')}"
                         f"</summary>{tr.html_fragment()}</details>")
    return "\n".join(parts)


def graph_section(ctx: Context) -> str:
    from funcbwd_lab.studies.graphs import graphs
    from funcbwd_lab.views import display
    parts = ["<p>Each op's backward formula as written (plain) against what the traced strategy "
             "runs (functionalized, copies elided): FX graphs, removed lines red, added green.</p>"]
    for op in ctx.ops:
        parts.append(f"<details><summary>{html.escape(op)}: plain vs traced</summary>"
                     f"{display.graph_diff_html(graphs.formula_diff(op, 'plain', 'traced'))}</details>")
    return "\n".join(parts)


def bench_section(ctx: Context) -> str:
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import text as bench_text
    from funcbwd_lab.studies.bench import charts as plots
    path = ctx.data_file(BENCH_FILE)
    if not path.exists():
        raise Missing(f"no saved bench results at {shown_path(path)} (produce them with: python -m "
                      f"funcbwd_lab bench --quick --out {shown_path(path)}, or pass --data DIR)")
    results = bench_results.load(str(path))
    parts = [f"<p>From {html.escape(shown_path(path))}; times only as ratios "
             "(same machine, same run).</p>"]
    parts.append(_pre(bench_text.format_summary(results)))
    for name, fig in plots.all_figures(results).items():
        parts.append(f"<h3>{html.escape(name)}</h3>" + ctx.figure(fig))
    return "\n".join(parts)


def coverage_section(ctx: Context) -> str:
    """The OpInfo sweep from its saved file (:mod:`funcbwd_lab.studies.coverage`): what it covers,
    per composition and strategy the counts, regressions and fixes against builtin, the verdict
    of every upstream expected failure, and the saved cost of functionalizing every backward."""
    from funcbwd_lab.studies.coverage import cost as coverage_cost
    from funcbwd_lab.studies.coverage import data, render, summary, verdicts

    path = ctx.data_file(data.FILE_NAME)
    if not path.exists():
        raise Missing(f"no saved coverage sweep at {shown_path(path)} (produce it with: python -m "
                      f"funcbwd_lab coverage --workers 2 --out {shown_path(path)}, or pass --data DIR)")
    doc = data.load(path)
    s = summary.summarize(doc["records"])
    parts = [f"<p>{html.escape(render.meta_line(doc['meta']))}</p>",
             f"<p><b>{'at least ' if s.get('unknown') else ''}{len(s['regressions'])} regressions</b> "
             f"(builtin passes, a functionalizing strategy fails"
             + (f"; {s['unknown']} more cells where builtin passes are unfinished: unknown" if s.get("unknown") else "")
             + f"), {len(s['fixes'])} fixes, of which {sum(f['inplace'] for f in s['fixes'])} "
             "fix an in-place failure.</p>",
             _pre(render.text(doc, s)),
             "<details><summary>every upstream expected failure with its verdict</summary>\n"
             + render.verdicts_html(verdicts.of_document(doc)) + "\n</details>"]
    cost_file = ctx.data_file(coverage_cost.COST_FILE)
    if cost_file.exists():
        costs = json.loads(cost_file.read_text())["cost"]
        parts += [_pre(fit(coverage_cost.format_cost(coverage_cost.summarize_cost(costs)))),
                  ctx.figure(coverage_cost.cost_figure(costs))]
    return "\n".join(parts)


def _agreement(ctx: Context, evidence: Any) -> str:
    """Whether this report's own matrix run agrees with the saved evidence's counts (only when it
    ran on the same basis: every sample of the same ops and scenarios)."""
    from funcbwd_lab.studies.review import review

    mine = review.basis(ctx.results)
    same = (mine["samples"] == evidence.basis["samples"] == "all" and mine["ops"] == evidence.basis["ops"]
            and mine["scenarios"] == evidence.basis["scenarios"])
    if not same:
        return (f"<p>This report ran {html.escape(review.basis_text(mine))}, not the evidence's basis, "
                "so its matrix below is not compared with the evidence.</p>")
    counts = review.matrix_evidence(ctx.results)
    keys = ("fixes", "plain_failures", "wrong", "no_fallback", "applicable")
    diffs = [f"{st}.{k}: report {counts[st][k]} vs evidence {evidence.strategies[st].get(k)}"
             for st in counts if st in evidence.strategies for k in keys
             if counts[st][k] != evidence.strategies[st].get(k)]
    if diffs:
        return _note(f"The report's matrix ({_run(ctx)}) DISAGREES with the saved evidence (regenerate it "
                     "with python tools/update_readme.py): " + "; ".join(diffs), "error")
    return (f"<p>The report's matrix (below: {_run(ctx)}) agrees with the saved evidence on every count "
            f"({len(counts)} strategies x {len(keys)} counts).</p>")


def _run(ctx: Context) -> str:
    return "the saved run" if ctx.matrix_source == "saved" else "its own run"


def decision_of(ctx: Context) -> tuple[Any, str]:
    """The decision (:func:`funcbwd_lab.studies.review.review.decision`) of the saved review
    evidence in the data directory, with a note on where it comes from and whether this report's
    matrix agrees; without saved evidence, of this report's run (its basis stated). Computed once
    per report (the decision, the matrix and the traces all show its pick)."""
    if ctx._decision is not None:
        return ctx._decision
    from funcbwd_lab.studies.review import review

    path = ctx.data_file(review.EVIDENCE_FILE)
    if path.exists():
        evidence = review.load_evidence(path)
        origin = (f"<p>From {html.escape(shown_path(path))} (written by tools/update_readme.py).</p>"
                  + _agreement(ctx, evidence))
    else:
        bench_path = ctx.data_file(BENCH_FILE)
        bench = None
        if bench_path.exists():
            from funcbwd_lab.studies.bench import results as bench_results

            bench = bench_results.load(str(bench_path))
        if not any(st in ctx.strategies for st in review.CANDIDATES):
            raise Missing(f"no saved evidence at {shown_path(path)} and none of the candidate strategies ("
                          + ", ".join(review.CANDIDATES) + ") was run")
        evidence = review.collect_evidence(ctx.results, bench, bench_source=shown_path(bench_path))
        origin = (f"<p>No saved evidence at {html.escape(shown_path(path))}: computed from this report's "
                  "own run and the live probes.</p>")
    ctx._decision = (review.decision(evidence), origin)
    return ctx._decision


def pick_of(ctx: Context) -> str | None:
    """The decision's pick, or None when there is no decision to show (a note says why)."""
    try:
        return decision_of(ctx)[0].pick
    except Missing:
        return None


def decision_section(ctx: Context) -> str:
    """The decision block (:mod:`funcbwd_lab.studies.review.decision`) and its chart."""
    from funcbwd_lab.studies.review import decision as dv

    d, origin = decision_of(ctx)
    return "\n".join([dv.html_block(d), origin, ctx.figure(dv.chart(d))])


def live_section(ctx: Context) -> str:
    """Today's hand-written branches: the deletable-branches table from its saved file."""
    from funcbwd_lab.studies.deletable import render as live

    path = ctx.data_file(live.LIVE_FILE_NAME)
    if not path.exists():
        raise Missing(f"no saved deletable-branches table at {shown_path(path)} (produce it with: "
                      f"{live.COMMAND}, or pass --data DIR)")
    return live.html_block(json.loads(path.read_text()))
