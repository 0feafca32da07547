"""What a reader sees at 1280 px: no word cut mid-word, no output that runs for screens.

Opens notebooks/coverage.ipynb as stored (no kernel run: its outputs are what is committed) in a
real JupyterLab in headless Chromium at 1280x800 with the file browser collapsed, walks every cell
(JupyterLab renders only cells near the view, so each is scrolled to in turn), opens every
``<details>`` in its output and checks, on the laid-out page:

* **no mid-word cut**: a run of word characters (letters, digits, ``_``) of one text node that the
  browser laid out on two lines (its client rects have two tops), or text clipped at its box's
  edge (``overflow: hidden`` with content wider than the box). A word cut by truncating a string
  before rendering cannot be seen here; the renderers' unit tests check that (tests/test_charts.py
  and tests/test_notebooks.py);
* **no output runs for screens**: no output, as opened (a collapsed ``<details>`` counts as its
  summary), is taller than MAX_SCREENS screens (the upstream verdicts table ran about 40).

The detector is shown to find a cut on a page made to have one (``test_the_detector_finds_a_cut``).
Screenshots go to test-output/browser/ (coverage_*.png). Helpers from tests/test_browser.py.
"""

from __future__ import annotations

import contextlib
import json

import pytest

import test_browser as tb

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1280, 800
MAX_SCREENS = 3  # an output taller than this many screens, as opened, is a wall to scroll past

# Cuts inside ``root``: words of one text node laid out on two lines, and clipped text. Plotly's
# SVG text and code editors (which scroll, never wrap) are not prose and are skipped.
MIDWORD_CUTS = """(root) => {
  const cuts = [];
  const skip = el => el.closest('svg, .js-plotly-plot, .cm-editor, .CodeMirror');
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || skip(el) || !el.getClientRects().length) continue;
    const text = n.textContent;
    for (const m of text.matchAll(/\\w{2,}/g)) {
      const r = document.createRange();
      r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
      const tops = new Set([...r.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top)));
      if (tops.size > 1 && cuts.length < 20)
        cuts.push({word: m[0], where: text.slice(Math.max(0, m.index - 30), m.index + m[0].length + 10)});
    }
  }
  for (const el of [root, ...root.querySelectorAll('*')]) {
    if (skip(el)) continue;
    const s = getComputedStyle(el);
    if ((s.overflowX === 'hidden' || s.textOverflow === 'ellipsis') && el.scrollWidth > el.clientWidth + 1
        && el.innerText.trim() && cuts.length < 20)
      cuts.push({word: '(clipped)', where: el.innerText.slice(0, 60)});
  }
  return cuts;
}"""

# Scroll to code cell ``i`` (until it is rendered and on screen), open its <details>, measure.
CELL_LAYOUT = """async ([i, cutsSrc]) => {
  const cutsOf = eval(cutsSrc);
  const nb = window.jupyterapp.shell.currentWidget.content;
  const w = nb.widgets[i];
  for (let k = 0; k < 6; k++) {
    if (nb.scrollToItem) await nb.scrollToItem(i, 'start');
    w.node.scrollIntoView({block: 'start'});
    await new Promise(r => setTimeout(r, 400));
    const r = w.node.getBoundingClientRect();
    if (w.node.isConnected && r.top >= -5 && r.top < window.innerHeight / 2) break;
  }
  const area = w.node.querySelector('.jp-OutputArea');
  if (!area) return {type: w.model.type, outputs: [], cuts: cutsOf(w.node)};
  const outputs = [...area.querySelectorAll(':scope > .jp-OutputArea-child')]
    .map(o => Math.round(o.getBoundingClientRect().height));
  area.querySelectorAll('details').forEach(d => d.open = true);
  await new Promise(r => setTimeout(r, 100));
  const cuts = cutsOf(w.node);
  area.querySelectorAll('details').forEach(d => d.open = d.hasAttribute('data-was-open'));
  return {type: w.model.type, outputs, cuts};
}"""
MARK_OPEN = """() => document.querySelectorAll('details[open]').forEach(d => d.setAttribute('data-was-open', ''))"""


def walk_notebook(page, base: str, notebook: str, name: str) -> dict:
    """Open ``notebook`` as stored; per cell, the output heights and the cuts found."""
    page.goto(f"{base}/lab/tree/{notebook}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.content", timeout=30_000)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    page.wait_for_timeout(2000)
    tb.shot(page, f"{name}_first_screen.png")
    count = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.length")
    cells = []
    for i in range(count):
        page.evaluate(MARK_OPEN)
        seen = page.evaluate(CELL_LAYOUT, [i, MIDWORD_CUTS])
        seen["index"] = i
        cells.append(seen)
        if seen["cuts"] or any(h > MAX_SCREENS * HEIGHT for h in seen["outputs"]):
            tb.shot(page, f"{name}_cell{i}.png")
    return {"cells": cells}


@contextlib.contextmanager
def lab_page(tmp):
    with tb.jupyterlab(tb.ROOT, tmp / "jupyter") as base, \
            tb.chromium_page(tmp / "chromium", width=WIDTH, height=HEIGHT) as page:
        yield base, page


def test_coverage_notebook_has_no_midword_cut_and_no_wall_at_1280px(tmp_path):
    tb.chromium_or_skip()
    with lab_page(tmp_path) as (base, page):
        seen = walk_notebook(page, base, "notebooks/coverage.ipynb", "coverage")
    tb.OUTPUT.mkdir(parents=True, exist_ok=True)
    (tb.OUTPUT / "coverage_layout.json").write_text(json.dumps(seen, indent=1))
    cells = seen["cells"]
    assert len(cells) > 10 and any(c["outputs"] for c in cells), "the notebook's outputs did not render"
    cuts = [(c["index"], cut) for c in cells for cut in c["cuts"]]
    assert not cuts, f"words cut mid-word at {WIDTH} px (cell, word, context): {cuts[:8]}"
    walls = [(c["index"], h) for c in cells for h in c["outputs"] if h > MAX_SCREENS * HEIGHT]
    assert not walls, (f"outputs taller than {MAX_SCREENS} screens of {HEIGHT} px as opened "
                       f"(cell, px): {walls}; paginate or collapse them")


def test_the_detector_finds_a_cut(tmp_path):
    """A mutation of the page: a long word in a narrow box with ``word-break: break-all`` (how a
    cell is cut mid-word) and a clipped one; the detector must report both, and nothing for the
    same words wrapped at spaces."""
    tb.chromium_or_skip()
    with tb.chromium_page(tmp_path / "chromium", width=WIDTH, height=HEIGHT) as page:
        page.set_content(
            '<div id="bad" style="width:80px;word-break:break-all">functionalization everywhere</div>'
            '<div id="clip" style="width:60px;overflow:hidden;white-space:nowrap">clipped words here</div>'
            '<div id="good" style="width:120px">functionalization is fine</div>')
        bad = page.evaluate(f"() => ({MIDWORD_CUTS})(document.getElementById('bad'))")
        clip = page.evaluate(f"() => ({MIDWORD_CUTS})(document.getElementById('clip'))")
        good = page.evaluate(f"() => ({MIDWORD_CUTS})(document.getElementById('good'))")
    assert any(c["word"] == "functionalization" for c in bad), bad
    assert any(c["word"] == "(clipped)" for c in clip), clip
    assert good == [], good
