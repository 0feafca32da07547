"""``python -m funcbwd_lab report``: the workbench's views in ONE self-contained static HTML file.

For readers without Jupyter (or without a network): first the decision (which strategy, and why:
:mod:`funcbwd_lab.studies.review.decision` of the saved review evidence, checked against the
report's matrix), then the matrix (table + heatmap), a verdict per op, dispatch-key traces (plain
and the pick), graph diffs, bench charts and the OpInfo coverage. The matrix is the saved run
(``data/matrix-test-ops.json``) unless ops, scenarios or strategies are named, ``quick`` or
``recompute`` (then it runs here, for minutes: the command says how many before it starts); the
bench, coverage and review evidence are always their saved results. Laid out for a 1280 px
screen: tables fit it, names are never broken mid-word, nothing hides behind a horizontal scroll
(tests/test_report.py). plotly.js is embedded once; nothing references a URL: it opens offline.

Saved results are read from an explicit directory (``build_report(data_dir=...)``; the CLI's
``--data DIR``, :mod:`funcbwd_lab.cli.report`), never from a checkout the library happens to sit in.
A section whose module or data file is missing shows a visible note instead; a section that
raises shows the error (and ``python -m funcbwd_lab report`` exits 1).
"""

from __future__ import annotations

import datetime
import html
import platform
import time
from pathlib import Path
from typing import Callable, Sequence

from funcbwd.errors import first_line, parse_names
from funcbwd_lab.ops import registry
from funcbwd_lab.progress import Progress
from funcbwd_lab.run.scenarios import MATRIX_NAMES, SCENARIO_GROUPS
from funcbwd_lab.strategies import available
from funcbwd_lab.studies.matrix import matrix
# the saved matrix run the default report shows (written by tools/update_readme.py, kept equal to
# a fresh run by tests/test_readme.py)
from funcbwd_lab.views.readme import MATRIX_FILE_NAME
from funcbwd_lab.views.report_sections import (  # noqa: F401 (BENCH_FILE, Missing, ...: tests use them here)
    BENCH_FILE, Context, FigureEmbedder, Missing, Section, bench_section, coverage_section,
    decision_section, graph_section, live_section, matrix_section, shown_path, trace_section,
    verdict_section, _note)

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222}
header{background:#243447;color:#fff;padding:16px 28px}header h1{margin:0 0 4px;font-size:22px}
header p{margin:2px 0;color:#cfd8e3}
main{padding:8px 28px 40px;max-width:1400px;box-sizing:border-box}
nav ol{columns:2;max-width:700px}section{border-top:1px solid #ddd;margin-top:24px}
h2{margin:18px 0 8px}h3{margin:16px 0 6px}table{border-collapse:collapse;font-size:12px;max-width:100%}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}thead th{background:#eee}
pre{background:#f6f8fa;padding:8px;font-size:12px;max-width:100%;white-space:pre-wrap}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px;margin:8px 0}
.error{background:#fdecea;border-left:4px solid #d73027;padding:6px 10px;margin:8px 0}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.verdict{margin:6px 0 12px}.figure{margin:8px 0;max-width:100%}
"""

SECTIONS: tuple[tuple[str, str, Callable[[Context], str]], ...] = (
    ("decision", "Decision: which strategy, and why", decision_section),
    ("live", "Today's hand-written branches: which would generic functionalization delete?",
     live_section),
    ("matrix", "Matrix: op x scenario x strategy", matrix_section),
    ("verdicts", "Verdicts per op", verdict_section),
    ("traces", "Dispatch-key traces", trace_section),
    ("graphs", "Graph diffs", graph_section),
    ("bench", "Overhead and copies (bench charts)", bench_section),
    ("coverage", "OpInfo coverage", coverage_section),
)


def build_sections(ctx: Context, progress: Progress | None = None) -> list[Section]:
    """Every section, each degraded on its own: Missing -> note, any other error -> error box;
    ``progress`` counts the sections."""
    out = []
    progress = progress or Progress.off()
    progress.start(len(SECTIONS), "report sections")
    for sid, title, build in SECTIONS:
        progress.doing(sid)
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
        progress(f"{sid}: {sec.status} ({sec.seconds:.1f} s)")
        progress.advance(failed=sec.status == "error")
        out.append(sec)
    return out


def render(ctx: Context, sections: Sequence[Section], seconds: float) -> str:
    import torch

    toc = "".join(f'<li><a href="#{s.id}">{html.escape(s.title)}</a>'
                  + ("" if s.status == "ok" else f" ({s.status})") + "</li>" for s in sections)
    shown_sections = [f'<section id="{s.id}" data-status="{s.status}"><h2>{html.escape(s.title)}</h2>'
                      f"\n{s.body}\n</section>" for s in sections]
    # The decision opens the page (before the contents); the other sections follow the contents.
    first = shown_sections[0] if sections and sections[0].id == "decision" else ""
    body = "\n".join(shown_sections[1:] if first else shown_sections)
    saved = f" (the saved run {MATRIX_FILE_NAME})" if ctx.matrix_source == "saved" else ""
    meta = (f"torch {torch.__version__}, Python {platform.python_version()}; ops: {', '.join(ctx.ops)}; "
            f"strategies: {', '.join(ctx.strategies)}; {len(ctx.scenarios)} scenarios; {ctx.samples} "
            f"samples{saved}; built in {seconds:.0f} s on {datetime.date.today().isoformat()}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>funcbwd report</title><style>{CSS}</style>
{ctx.figure.script()}
</head><body>
<header><h1>funcbwd: functionalizing in-place backward formulas for vmap(vjp(f))</h1>
<p>{html.escape(meta)}</p>
<p>Every result below was computed by the funcbwd library: the matrix when this file was built or
in its saved run, the bench, coverage and review evidence in theirs. Self-contained: opens offline.</p>
</header>
<main>{first}<nav><h2>Contents</h2><ol>{toc}</ol></nav>
{body}
</main></body></html>
"""


#: seconds per live matrix cell and for the sections, measured here (2 cores; the default report's
#: live matrix: 3024 cells in 465 s under a load of 4 other jobs) and used only to say up front how
#: long a report will take
SECONDS_PER_CELL, SECTIONS_SECONDS = 0.15, 60


def build_report(ops: str | Sequence[str] | None = None, *, quick: bool = False,
                 scenarios: str | Sequence[str] | None = None,
                 strategies: str | Sequence[str] | None = None, data_dir: str | Path,
                 progress: Progress | None = None, recompute: bool = False) -> tuple[str, list[Section]]:
    """The report's HTML and its sections (default ops: the 8 test ops of functorch#241).

    ``data_dir``: the directory holding the saved results (a section whose file is absent there
    shows a note). With no ops, scenarios or strategies named, not ``quick`` and not
    ``recompute``, the matrix is the saved run in ``data_dir`` (:data:`MATRIX_FILE_NAME`), when
    there is one; otherwise it runs here. ``progress`` (:class:`funcbwd_lab.progress.Progress`)
    first says how long the report will take, then counts the matrix's cells and the sections."""
    from funcbwd_lab.studies.matrix import records

    start = time.perf_counter()
    progress = progress or Progress.off()
    saved = Path(data_dir) / MATRIX_FILE_NAME
    if (ops, scenarios, strategies, quick, recompute) == (None, None, None, False, False) and saved.exists():
        results = records.load(saved)
        ctx = Context(ops=list(dict.fromkeys(r.op for r in results)),
                      scenarios=list(dict.fromkeys(r.scenario for r in results)),
                      strategies=list(dict.fromkeys(r.strategy for r in results)), samples="all",
                      figure=FigureEmbedder(), data_dir=Path(data_dir), results=results,
                      matrix_source="saved")
        progress(f"the matrix from the saved run {shown_path(saved)} ({len(results)} cells; "
                 f"recompute it: --recompute), then {len(SECTIONS)} sections: about "
                 f"{SECTIONS_SECONDS} s on 2 cores")
    else:
        ctx = Context(ops=parse_names("op", ops if ops is not None else list(registry.TEST_OPS),
                                      registry.op_groups()),
                      scenarios=(list(MATRIX_NAMES) if scenarios is None
                                 else parse_names("scenario", scenarios, SCENARIO_GROUPS)),
                      strategies=parse_names("strategy", strategies, available()),
                      samples="first" if quick else "all", figure=FigureEmbedder(),
                      data_dir=Path(data_dir))
        cells = sum(len(registry.get_op(op).samples()[:1] if quick else registry.get_op(op).samples())
                    for op in ctx.ops) * len(ctx.scenarios) * len(ctx.strategies)
        minutes = (cells * SECONDS_PER_CELL + SECTIONS_SECONDS) / 60
        progress(f"a live matrix of {cells} cells, then {len(SECTIONS)} sections: about "
                 f"{max(1, round(minutes))} min on 2 cores")
        progress.what = "report matrix"
        ctx.results = matrix.run_matrix(ctx.ops, ctx.scenarios, ctx.strategies, samples=ctx.samples,
                                        progress=progress)
        progress(f"matrix: {len(ctx.results)} cells ({time.perf_counter() - start:.1f} s)")
    sections = build_sections(ctx, progress)
    return render(ctx, sections, time.perf_counter() - start), sections
