"""``python -m funcbwd report``: one self-contained HTML file with every section, no URL that a
browser would fetch, plotly.js embedded once; and (marker ``browser``) it renders in Chromium
offline with the plotly heatmap drawn."""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import pytest

from funcbwd import cli
from funcbwd.run import matrix
from funcbwd.views import report

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "test-output" / "report"
OPS = ["diag"]
STRATEGIES = "plain,per_formula"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A small report (one op, first sample, two strategies) written through the CLI."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    rc = cli.main(["report", "--ops", ",".join(OPS), "--quick", "--strategies", STRATEGIES,
                   "--quiet", "--out", str(out)])
    return rc, out, out.read_text(encoding="utf-8")


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
        if sid in ("matrix", "verdicts", "traces", "graphs", "design"):
            assert status == "ok", f"section {sid} is {status}: its module should exist"
    assert 'class="funcbwd-matrix"' in page  # the matrix table
    assert "funcbwd-graphdiff" in page  # a graph diff
    assert "diag / plain / vmap_cotangents: fail" in page  # the failing legacy trace
    # computed verdict text for the op (display.verdict_text), not a placeholder
    assert "The legacy formula as written (plain) fails" in page


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


def test_missing_saved_data_becomes_a_visible_note(monkeypatch, tmp_path):
    results = matrix.run_matrix(["diag"], ["vmap_cotangents"], ["plain"], samples="first")
    ctx = report.Context(ops=["diag"], scenarios=["vmap_cotangents"], strategies=["plain"],
                         samples="first", figure=report.FigureEmbedder(), results=results)
    monkeypatch.setattr(report, "BENCH_JSON", report.ROOT / "data" / "no-such-bench.json")
    sections = {s.id: s for s in report.build_sections(ctx)}
    assert sections["bench"].status == "missing"
    assert "no saved bench results" in sections["bench"].body
    assert sections["matrix"].status == "ok"


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


@pytest.mark.browser
def test_report_renders_offline_in_chromium(built, tmp_path):
    import importlib.util

    # the same Chromium launch as the JupyterLab test (loaded by path: any pytest import mode)
    spec = importlib.util.spec_from_file_location("_funcbwd_test_browser", ROOT / "tests" / "test_browser.py")
    browser = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(browser)

    _, path, _ = built
    fetched: list[str] = []

    def only_files(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            fetched.append(route.request.url)
            route.abort()

    with browser.chromium_page(tmp_path / "chromium") as page:
        page.route("**/*", only_files)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri(), wait_until="load")
        page.wait_for_selector(".js-plotly-plot svg.main-svg", timeout=30_000)
        heat = page.locator("#matrix .js-plotly-plot")
        assert heat.count() == 1
        assert heat.locator(".heatmaplayer image, .hm").count() >= 1, "heatmap not drawn"
        assert "op x scenario x strategy" in heat.locator(".gtitle").text_content()
        OUTPUT.mkdir(parents=True, exist_ok=True)
        heat.scroll_into_view_if_needed()
        page.screenshot(path=str(OUTPUT / "report_matrix.png"))
        page.screenshot(path=str(OUTPUT / "report_full.png"), full_page=True)
    assert not fetched, f"the report tried to fetch: {fetched}"
    assert not errors, f"JavaScript errors: {errors}"
