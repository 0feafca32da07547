"""Notebook structure checks (fast, no kernel) and the display/explorer helpers.

Executing and comparing the notebooks is nbval's job (see README); these tests catch what nbval
silently passes: unexecuted cells, .py/.ipynb pairs out of sync, op notebooks that drifted from
their template, huge outputs, stored widget state, plotly/widget output in compared cells, and
stored text wider than 100 columns (JupyterLab breaks such a line anywhere, mid-word included, on
a 1280 px screen; tests/test_browser_layout.py measures the rendered page).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat
import pytest

from funcbwd_lab.views import display
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab.studies.matrix.matrix import format_table

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
IGNORE_TAG = "nbval-ignore-output"
UNCOMPARABLE_MIME = ("application/vnd.plotly.v1+json", "application/vnd.jupyter.widget-view+json")
MAX_OUTPUT_BYTES = 200_000
MAX_NOTEBOOK_BYTES = 1_000_000

pytestmark = pytest.mark.notebooks


def _build_tool():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "tools" / "build_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build = _build_tool()
IPYNBS = sorted(NOTEBOOKS.glob("*.ipynb"))


def _code_cells(path: Path):
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


# ------------------------------------------------------------------------------ structure
def test_every_op_notebook_exists_and_is_paired():
    names = {p.stem for p in IPYNBS}
    expected = {"00_overview"} | {f"op_{op}" for op in build.OP_NOTEBOOKS}
    assert expected <= names, f"missing notebooks: {sorted(expected - names)}"
    assert {p.stem for p in NOTEBOOKS.glob("*.py")} == names, "every .py needs its .ipynb and back"


def test_op_notebooks_match_their_template():
    assert build.stale_generated() == [], "run: python tools/build_notebooks.py all"


def test_pairs_in_sync():
    assert build.out_of_sync() == [], "run: python tools/build_notebooks.py execute NAME"


@pytest.mark.parametrize("path", IPYNBS, ids=lambda p: p.stem)
def test_every_code_cell_executed_in_order(path):
    counts = [c.execution_count for c in _code_cells(path)]
    assert all(isinstance(n, int) for n in counts), f"unexecuted cells in {path.name}: nbval would pass them silently"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name} was not executed top to bottom in one run"


@pytest.mark.parametrize("path", IPYNBS, ids=lambda p: p.stem)
def test_no_errors_and_outputs_small(path):
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES, f"{path.name} is {path.stat().st_size} bytes"
    nb = nbformat.read(path, as_version=4)
    assert "widgets" not in nb.metadata, "widget state stored (multi-MB plotly.js bundle)"
    for cell in _code_cells(path):
        for out in cell.outputs:
            assert out.output_type != "error", f"{path.name}: {out.get('ename')}: {out.get('evalue')}"
            size = len(json.dumps(out))
            assert size < MAX_OUTPUT_BYTES, f"{path.name}: a {size}-byte output in cell {cell.source[:60]!r}"


TEXT_WIDTH = 100  # columns: the house rule for text output; 783 px in JupyterLab's 13 px monospace


def too_wide(path: Path, width: int = TEXT_WIDTH) -> list[str]:
    """Lines of ``path``'s stored text outputs (streams, and text/plain where it is what shows)
    wider than ``width`` columns."""
    out = []
    for i, cell in enumerate(_code_cells(path)):
        for o in cell.outputs:
            data = o.get("data", {})
            shown = o.get("text") if o.output_type == "stream" else (
                data.get("text/plain") if not set(data) - {"text/plain"} else None)
            for line in (shown or "").splitlines():
                if len(line) > width:
                    out.append(f"code cell {i}: {len(line)} columns: {line[:70]!r}")
    return out


@pytest.mark.parametrize("path", IPYNBS, ids=lambda p: p.stem)
def test_stored_text_fits_100_columns(path):
    wide = too_wide(path)
    assert not wide, f"{path.name}: text wider than {TEXT_WIDTH} columns (wrap it: tables.fit):\n" + "\n".join(wide[:8])


def test_a_wide_line_is_caught(tmp_path):
    cell = nbformat.v4.new_code_cell("print(...)")
    nb = nbformat.v4.new_notebook(cells=[cell])
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x " * 60 + "\n")]
    nbformat.write(nb, tmp_path / "wide.ipynb")
    assert len(too_wide(tmp_path / "wide.ipynb")) == 1
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x " * 45 + "\n")]
    nbformat.write(nb, tmp_path / "fits.ipynb")
    assert too_wide(tmp_path / "fits.ipynb") == []


@pytest.mark.parametrize("path", IPYNBS, ids=lambda p: p.stem)
def test_uncomparable_outputs_are_tagged_and_text_is_compared(path):
    compared_text = 0
    for cell in _code_cells(path):
        tags = cell.metadata.get("tags", [])
        mimes = {m for out in cell.outputs for m in out.get("data", {})}
        if mimes & set(UNCOMPARABLE_MIME):
            assert IGNORE_TAG in tags, f"{path.name}: plotly/widget output not tagged: {cell.source[:60]!r}"
        if IGNORE_TAG not in tags and any(out.output_type == "stream" or "text/plain" in out.get("data", {})
                                          for out in cell.outputs):
            compared_text += 1
    assert compared_text >= 3, f"{path.name}: too few compared text outputs for nbval to guard results"


@pytest.mark.parametrize("op", build.OP_NOTEBOOKS)
def test_op_notebook_verdict_is_compared(op):
    cells = _code_cells(NOTEBOOKS / f"op_{op}.ipynb")
    verdicts = [c for c in cells if "display.verdict(" in c.source]
    assert len(verdicts) == 1 and IGNORE_TAG not in verdicts[0].metadata.get("tags", [])
    # the verdict first (issue 31): before the first chapter, right after the imports
    nb = nbformat.read(NOTEBOOKS / f"op_{op}.ipynb", as_version=4)
    at = nb.cells.index(next(c for c in nb.cells if "display.verdict(" in c.source))
    first_chapter = next(i for i, c in enumerate(nb.cells)
                         if c.cell_type == "markdown" and c.source.startswith("## 1."))
    assert at < first_chapter and at <= 4, (at, first_chapter)
    text = "".join(o.get("data", {}).get("text/markdown", "") for o in verdicts[0].outputs)
    assert text.startswith(f"**Verdict for `{op}`.**")


def test_op_notebooks_open_with_what_is_particular_to_the_op():
    """Each op notebook opens with its own title and lede, then the verdict (issue 31: it was at
    the bottom), then its own chapter (prose written for the op, not the template's), and that
    chapter's cell asserts what it shows."""
    import jupytext

    openings = {}
    for op in build.OP_NOTEBOOKS:
        cells = jupytext.read(NOTEBOOKS / f"op_{op}.py").cells
        md = [i for i, c in enumerate(cells) if c.cell_type == "markdown"]
        title, verdict, intro = cells[md[0]].source, cells[md[1]].source, cells[md[2]].source
        assert title.startswith(f"# `{op}`:"), title[:80]
        assert verdict.startswith("## The verdict") and "display.verdict(" in cells[md[1] + 1].source
        assert intro.startswith(f"## What is particular to {op}"), intro[:80]
        check = cells[md[2] + 1]
        assert check.cell_type == "code" and "assert " in check.source
        openings[op] = (title.split("The verdict first")[0], intro)
    titles = [t for t, _ in openings.values()]
    intros = [i for _, i in openings.values()]
    assert len(set(titles)) == len(titles) and len(set(intros)) == len(intros)


def test_template_marker_is_required(tmp_path, monkeypatch):
    broken = tmp_path / "op_notebook.py"
    broken.write_text(build.TEMPLATE.read_text().replace(build.TOKEN, "diag"))
    monkeypatch.setattr(build, "TEMPLATE", broken)
    with pytest.raises(SystemExit, match="marker"):
        build.op_notebook_text("diag")


# ------------------------------------------------------------------------------ display helpers
def _cell(op, sc, st, status, reason="", fb=(), sample="s0"):
    return CellResult(op, sample, sc, st, status, reason=reason, fallback_ops=list(fb),
                      message="boom" if status == "fail" else "")


SYNTHETIC = [
    _cell("diag", "vmap_cotangents", "plain", "fail", "vmap_inplace"),
    _cell("diag", "jacrev", "plain", "pass"),
    _cell("diag", "vmap_cotangents", "builtin", "pass"),
    _cell("diag", "jacrev", "builtin", "pass"),
    _cell("diag", "vmap_cotangents", "per_formula", "pass", fb=["aten::copy."]),
    _cell("diag", "jacrev", "per_formula", "pass"),
    _cell("diag", "vmap_cotangents", "traced", "pass"),
    _cell("diag", "jacrev", "traced", "pass"),
    _cell("diag", "vmap_cotangents", "hooks", "fail", "data_dependent"),
    _cell("diag", "jacrev", "hooks", "not_applicable"),
]


def test_verdict_is_generated_from_results():
    text = display.verdict_text("diag", SYNTHETIC)
    assert "plain) fails 1 of 2" in text
    assert "traced passes every applicable scenario without vmap's slow fallback" in text
    assert "per_formula passes every applicable scenario but uses the slow per-sample fallback (for aten::copy)" in text
    assert "hooks passes 0/1; it fails vmap_cotangents" in text
    assert "Data-dependent shapes or control flow stop hooks" in text
    flipped = [_cell("diag", "vmap_cotangents", "traced", "fail", "other") if r.strategy == "traced"
               and r.scenario == "vmap_cotangents" else r for r in SYNTHETIC]
    assert "traced passes 1/2; it fails vmap_cotangents (other error)" in display.verdict_text("diag", flipped)


def test_verdict_rejects_unknown_op():
    with pytest.raises(ValueError, match="ops in the results: diag"):
        display.verdict("topk", SYNTHETIC)


def test_matrix_table_text_is_the_library_table():
    table = display.matrix_table(SYNTHETIC)
    assert repr(table) == format_table(SYNTHETIC)
    assert table._repr_html_().count("<tr") == 1 + 2  # header + two scenarios
    assert "slow fallback for: aten::copy" in table._repr_html_()


def test_heatmap_hover_names_reason_and_fallback():
    fig = display.matrix_heatmap(SYNTHETIC)
    hover = [h for row in fig.data[0].customdata for h in row]
    assert any("vmap in-place error" in h for h in hover)
    assert any("slow fallback for: aten::copy" in h for h in hover)
    assert list(fig.data[0].x) == ["plain", "builtin", "per_formula", "traced", "hooks"]


def test_formula_source_cites_history():
    src = display.formula_source("index_select")
    assert "index_add_" in repr(src) and "pytorch#77578" in repr(src)
    assert "<pre" in src._repr_html_() and "index_add_" in src._repr_html_()


def test_setup_notebook_uses_mimetype_renderer():
    import plotly.io as pio

    old = pio.renderers.default
    try:
        display.setup_notebook()
        assert pio.renderers.default == "plotly_mimetype"
    finally:
        pio.renderers.default = old


# ------------------------------------------------------------------------------ explorer
def test_explorer_updates_views_in_place():
    pytest.importorskip("ipywidgets")
    from funcbwd_lab.views.widgets import Explorer

    calls = []

    def fake_view(op, st, sc):
        calls.append((op, st, sc))
        return f"<pre>{op}/{st}/{sc}</pre>"

    ex = Explorer(SYNTHETIC, strategies=["plain", "builtin", "per_formula", "traced", "hooks"],
                  scenarios=["vmap_cotangents", "jacrev"], trace_view=fake_view, graph_view=fake_view)
    fig = ex.figure
    assert "FAIL" in ex.status.value and ex.trace.value == "<pre>diag/plain/vmap_cotangents</pre>"
    ex.select(strategy="traced")
    assert ex.figure is fig  # updated in place, never re-created
    assert ex.trace.value == "<pre>diag/traced/vmap_cotangents</pre>"
    assert "pass" in ex.status.value
    assert list(fig.data[0].marker.line.width) == [0, 0, 0, 3, 0]
    assert fig.data[0].marker.color[0] == display.STATUS_COLOR["fail"]
    assert fig.data[0].marker.color[2] == display.STATUS_COLOR["pass_fallback"]
    with pytest.raises(Exception, match="valid strategies"):
        Explorer(SYNTHETIC, strategy="nope", trace_view=fake_view, graph_view=fake_view)


def test_explorer_panels_open_on_their_content():
    """The trace and graph diff are tabs (one open, under its tab), the graph diff open first,
    each as tall as its content up to PANEL_HEIGHT: a short diff is not an empty fixed-height box
    (the browser test checks the same on the page); the stored snapshot shows the diff open."""
    w = pytest.importorskip("ipywidgets")
    from funcbwd_lab.views import widgets

    def fake_view(op, st, sc):
        return f"<pre>{op}/{st}/{sc}</pre>"

    ex = widgets.Explorer(SYNTHETIC, strategies=["plain", "traced"], scenarios=["vmap_cotangents"],
                          trace_view=fake_view, graph_view=fake_view)
    (tabs,) = [c for c in ex.widget.children if isinstance(c, (w.Tab, w.Accordion))]
    assert isinstance(tabs, w.Tab) and tabs.selected_index == 0
    assert list(tabs.titles) == list(widgets.PANEL_TITLES) and tabs.children == (ex.graph, ex.trace)
    for panel in (ex.graph, ex.trace):
        assert not panel.layout.height and panel.layout.max_height == widgets.PANEL_HEIGHT
    assert "<details open><summary>graph diff</summary>" in ex.snapshot_html()


def test_verdict_groups_strategies_with_the_same_outcome():
    same = SYNTHETIC + [_cell("diag", "vmap_cotangents", "whole", "fail", "data_dependent"),
                        _cell("diag", "jacrev", "whole", "not_applicable")]
    text = display.verdict_text("diag", same)
    assert "hooks and whole each pass 0/1; they fail vmap_cotangents" in text
