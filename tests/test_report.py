"""``python -m funcbwd_lab report``: one self-contained HTML file with every section, no URL that a
browser would fetch, plotly.js embedded once; and (marker ``browser``) it renders in Chromium
offline with the plotly heatmap drawn, and reads at 1280 px: the detectors of
tests/test_browser_layout.py (hidden or clipped columns, unrendered Markdown, words cut
mid-word) find nothing with every ``<details>`` open, and find each fault in a copy of the report
broken that way."""

from __future__ import annotations

import dataclasses
import html.parser
import re
from pathlib import Path

import pytest

from funcbwd_lab import cli
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.views import report

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "test-output" / "report"
OPS = ["diag"]


STDERR: dict[str, str] = {}  # what the report command printed on stderr, by fixture


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small report (one op, first sample, every strategy: the matrix as wide as the full one,
    the pick's trace) written by ``python -m funcbwd_lab report`` in a fresh interpreter from the
    repository (its ``data/``); keeps what it printed on stderr (``built_stderr``)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("report") / "report.html"
    done = subprocess.run([sys.executable, "-m", "funcbwd_lab", "report", "--ops", ",".join(OPS), "--quick",
                           "--quiet", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    STDERR["built"] = done.stderr
    return done.returncode, out, out.read_text(encoding="utf-8")


class Fetches(html.parser.HTMLParser):
    """Everything in a page that a browser would fetch: src/href of script, link, img, iframe,
    source, embed, object (data), and url()/@import in inline styles."""

    TAGS = {"script": "src", "link": "href", "img": "src", "iframe": "src", "source": "src",
            "embed": "src", "object": "data", "audio": "src", "video": "src"}

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.scripts = 0
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag in self.TAGS and a.get(self.TAGS[tag]):
            self.urls.append(f"<{tag}> {a[self.TAGS[tag]]}")
        if "style" in a:
            self._css(a["style"] or "")
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self._css(data)

    def _css(self, css: str) -> None:
        self.urls += [f"css {m}" for m in re.findall(r"(?:url\(|@import)\s*['\"]?([^'\")\s;]+)", css)]


def test_report_has_every_section(built):
    rc, _, page = built
    assert rc == 0, "a section raised while building the report"
    for sid, title, _ in report.SECTIONS:
        m = re.search(rf'<section id="{sid}" data-status="(\w+)">', page)
        assert m, f"section {sid!r} missing"
        status = m.group(1)
        assert status in ("ok", "missing"), (sid, status)
        if sid in ("decision", "matrix", "verdicts", "traces", "graphs"):
            assert status == "ok", f"section {sid} is {status}: its module should exist"
    assert 'class="funcbwd-matrix"' in page  # the matrix table
    assert "funcbwd-graphdiff" in page  # a graph diff
    assert "diag / plain / vmap_cotangents: fail" in page  # the failing legacy trace
    # computed verdict text for the op (display.verdict_text), not a placeholder
    assert "The legacy formula as written (plain) fails" in page


def test_report_opens_with_the_decision(built):
    _, _, page = built
    main = page.index("<main>")
    first = page.index("<section", main)
    assert page.startswith('<section id="decision" data-status="ok">', first), "the report must open with the decision"
    assert first < page.index("<nav>"), "the decision comes before the contents"
    decision = page[first:page.index("</section>", first)]
    assert 'class="funcbwd-decision"' in decision and "Decision: <code>" in decision
    assert "Counts over " in decision  # the basis of every count is stated


def test_report_command_prints_nothing_on_stderr(built):
    """--quiet: no progress lines, and no warning torch or the strategies raise on the way."""
    rc, _, _ = built
    assert rc == 0 and STDERR["built"] == "", f"stderr of python -m funcbwd_lab report:\n{STDERR['built'][-2000:]}"


def test_report_fetches_nothing(built):
    _, _, page = built
    parser = Fetches()
    parser.feed(page)
    assert not parser.urls, f"the report references files or URLs a browser would fetch: {parser.urls}"
    assert parser.scripts >= 2  # plotly.js + at least one figure


def test_plotlyjs_embedded_once_and_figures_reuse_it(built):
    from plotly.offline import get_plotlyjs

    _, _, page = built
    head = get_plotlyjs()[:300]
    assert page.count(head) == 1, "plotly.js must be embedded exactly once"
    figures = len(re.findall(r'<div class="figure">', page))
    assert figures >= 1 and page.count("Plotly.newPlot(") - get_plotlyjs().count("Plotly.newPlot(") == figures


def test_missing_saved_data_becomes_a_visible_note(tmp_path):
    # An empty data directory: the saved results are read from it, never from the checkout.
    results = matrix.run_matrix(["diag"], ["vmap_cotangents"], ["plain"], samples="first")
    ctx = report.Context(ops=["diag"], scenarios=["vmap_cotangents"], strategies=["plain"],
                         samples="first", figure=report.FigureEmbedder(), data_dir=tmp_path,
                         results=results)
    sections = {s.id: s for s in report.build_sections(ctx)}
    assert sections["bench"].status == "missing" and sections["coverage"].status == "missing"
    assert "no saved bench results" in sections["bench"].body
    assert str(tmp_path / report.BENCH_FILE) in sections["bench"].body
    assert sections["matrix"].status == "ok"


def test_data_dir_is_explicit_and_read(tmp_path, monkeypatch):
    """--data DIR is where the saved results come from (default: $FUNCBWD_DATA, else ./data)."""
    from funcbwd_lab import command as cli_report
    from funcbwd_lab.studies.coverage.data import FILE_NAME as COVERAGE_FILE

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli_report.DATA_ENV, raising=False)
    assert cli_report.default_data_dir() == tmp_path / "data"
    monkeypatch.setenv(cli_report.DATA_ENV, str(tmp_path / "elsewhere"))
    assert cli_report.default_data_dir() == tmp_path / "elsewhere"
    # The sections open the file in the given directory (garbage there: they fail reading it,
    # not with "missing"); an empty directory: Missing, naming the file in that directory.
    data, empty = tmp_path / "d", tmp_path / "empty"
    data.mkdir(), empty.mkdir()
    for name in (report.BENCH_FILE, COVERAGE_FILE):
        (data / name).write_text("not a saved result")
    for section, name in ((report.bench_section, report.BENCH_FILE),
                          (report.coverage_section, COVERAGE_FILE)):
        ctx = report.Context(ops=["diag"], scenarios=["vmap_cotangents"], strategies=["plain"],
                             samples="first", figure=report.FigureEmbedder(), data_dir=data)
        with pytest.raises(Exception) as read:
            section(ctx)
        assert not isinstance(read.value, report.Missing), read.value
        with pytest.raises(report.Missing, match=f"empty/{name}"):
            section(dataclasses.replace(ctx, data_dir=empty))


def test_section_error_is_shown_and_fails_the_command(monkeypatch, tmp_path, capsys):
    def broken(ctx):
        raise RuntimeError("boom in the verdicts")

    sections = tuple((sid, t, broken if sid == "verdicts" else f) for sid, t, f in report.SECTIONS
                     if sid in ("matrix", "verdicts"))
    monkeypatch.setattr(report, "SECTIONS", sections)
    out = tmp_path / "r.html"
    rc = cli.main(["report", "--ops", "diag", "--quick", "--strategies", "plain",
                   "--scenarios", "vmap_cotangents", "--quiet", "--out", str(out)])
    assert rc == 1
    assert "FAILED sections: verdicts" in capsys.readouterr().out
    assert 'data-status="error"' in out.read_text() and "boom in the verdicts" in out.read_text()


def test_bad_op_names_the_valid_choices(capsys):
    assert cli.main(["report", "--ops", "no_such_op", "--out", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "no_such_op" in err and "diag" in err


def _load(name: str):
    """A test module loaded by path (any pytest import mode)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_funcbwd_{name}", ROOT / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_page(page) -> dict[str, list]:
    """What the detectors of tests/test_browser_layout.py find in the report's main column, with
    every ``<details>`` open."""
    layout = _load("test_browser_layout")
    page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
    page.wait_for_timeout(500)
    return {kind: page.evaluate(f"() => ({js})(document.querySelector('main'))")
            for kind, js in (("hidden", layout.HIDDEN), ("cuts", layout.MIDWORD_CUTS),
                             ("raw", layout.RAW_MARKDOWN))}


@pytest.mark.browser
def test_report_renders_offline_in_chromium(built, tmp_path):
    browser = _load("test_browser")  # the same Chromium launch as the JupyterLab tests
    _, path, _ = built
    fetched: list[str] = []

    def only_files(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            fetched.append(route.request.url)
            route.abort()

    with browser.chromium_page(tmp_path / "chromium", width=browser.WIDTH, height=900) as page:
        page.route("**/*", only_files)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_selector(".js-plotly-plot svg.main-svg", timeout=30_000)
        heat = page.locator("#matrix .js-plotly-plot")
        assert heat.count() == 1
        assert heat.locator(".heatmaplayer image, .hm").count() >= 1, "heatmap not drawn"
        assert "op x scenario x strategy" in heat.locator(".gtitle").text_content()
        # The decision is on the first screen, before any scrolling.
        top = page.evaluate("() => document.querySelector('#decision .funcbwd-decision').getBoundingClientRect().top")
        assert 0 <= top < 900 - 150, f"the decision block starts at y={top:.0f}, below the first screen"
        # At 1280 px, with every collapsed part (traces, graph diffs, tables) opened: nothing
        # wider than the page, nothing hidden or clipped, no raw Markdown, no word cut.
        seen = read_page(page)
        wide = page.evaluate("""() => [...document.querySelectorAll('body *')]
            .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
            .slice(0, 5).map(e => e.tagName + '.' + (e.className.baseVal ?? e.className))""")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        OUTPUT.mkdir(parents=True, exist_ok=True)
        heat.scroll_into_view_if_needed()
        page.screenshot(path=str(OUTPUT / "report_matrix.png"))
    assert width <= browser.WIDTH and not wide, f"the report is {width} px wide at {browser.WIDTH} px: {wide}"
    assert not any(seen.values()), f"the report at {browser.WIDTH} px: {seen}"
    assert not fetched, f"the report tried to fetch: {fetched}"
    assert not errors, f"JavaScript errors: {errors}"


@pytest.mark.browser
def test_a_broken_report_is_caught(built, tmp_path):
    """Mutation: the built report with a section broken each way (a table behind a horizontal
    scroll, a name running over its column, Markdown printed as text, a word cut mid-word); the
    detectors find each."""
    browser, layout = _load("test_browser"), _load("test_browser_layout")
    _, _, page_html = built
    broken = "".join(f'<div id="broken-{k}">{v}</div>' for k, v in layout.BROKEN_HTML.items()
                     if k != "sanitized")
    broken += f'<div id="broken-raw"><pre>{layout.BROKEN_TEXT["raw"]}</pre></div>'
    path = tmp_path / "broken.html"
    path.write_text(page_html.replace("<main>", "<main>" + broken, 1), encoding="utf-8")
    with browser.chromium_page(tmp_path / "chromium", width=browser.WIDTH, height=900) as page:
        page.goto(path.as_uri(), wait_until="load")
        seen = read_page(page)
    assert {"behind a horizontal scroll", "runs over its column"} <= {x["kind"] for x in seen["hidden"]}, seen
    assert {"table rule", "reference link"} <= {x["kind"] for x in seen["raw"]}, seen
    assert any(x["word"] == "functionalization" for x in seen["cuts"]), seen


def test_the_matrix_has_no_row_of_only_na_and_never_breaks_a_name(built):
    """Issue 31: the report's matrix drew rows where nothing applies (all n/a) and broke op names
    mid-word; such rows are named once under the table, and no cell ever wraps (issue 36: compact
    marks, so the table fits 1280 px instead of scrolling; the browser test measures it)."""
    import re

    _, _, page = built
    table = page[page.index('<div class="funcbwd-matrix">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table[table.index("<tbody>"):], re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[1:] for row in rows]
    assert rows and not [c for c in cells if len(c) > 1 and all(x == "n/a" for x in c)]
    marks = [x for c in cells for x in c]  # no space in a mark: nothing for a line to break at
    assert marks and not [x for x in marks if " " in x]
    assert 'class="wide"' not in page


def test_rows_where_nothing_applies_are_named_not_drawn():
    from funcbwd_lab.run.runner import CellResult

    results = [CellResult("diag", "s", "jacrev", "plain", "pass"),
               CellResult("diag", "s", "vmap_jvp", "plain", "not_applicable")]
    ctx = report.Context(ops=["diag"], scenarios=["jacrev", "vmap_jvp"], strategies=["plain"],
                         samples="first", figure=report.FigureEmbedder(), data_dir=ROOT / "data",
                         results=results)
    body = report.matrix_section(ctx)
    table = body[body.index('<div class="funcbwd-matrix">'):body.index("</table>")]
    assert "vmap_jvp" not in table and "jacrev" in table
    assert "Not applicable to any strategy, so not drawn: diag: vmap_jvp." in body
