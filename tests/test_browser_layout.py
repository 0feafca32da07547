"""What a reader sees at 1280 px, in every notebook as stored and in the report: nothing hidden.

A design reviewer opens the workbench with ``make lab`` on a 1280x900 screen (JupyterLab's file
browser open, as it opens) and reads the committed notebooks before running anything.
tests/test_browser_open.py does the same in a real JupyterLab in headless Chromium, in the session
that opens every notebook under ``notebooks/`` as stored (no cell run: the outputs are the
committed ones, shown untrusted, so through JupyterLab's HTML sanitizer), every cell laid out at
once (notebook windowing off, :func:`activate`), and runs this module's detectors over each
whole notebook (:func:`read_open`):

* **hidden or clipped columns** (:data:`HIDDEN`): content behind a horizontal scroll bar, content
  past the output area's right edge, and a table cell whose content runs over its column into
  the next one;
* **unrendered Markdown** (:data:`RAW_MARKDOWN`): Markdown syntax shown as text (a pipe table's
  rule line, a reference link ``[text][ref]`` left unresolved, a ``## heading``, ``**bold**``
  outside code);
* **mid-word breaks** (:data:`MIDWORD_CUTS`): a word of one text node laid out on two lines, or
  text clipped at its box's edge;
* **walls**: an output, as opened, taller than :data:`MAX_SCREENS` screens;
* **what the sanitizer takes** (:data:`SANITIZED`): a stored HTML output from which JupyterLab's
  own sanitizer (the page's, not a copy of its rules) removes a ``<style>`` element or a style
  declaration, so that it renders otherwise than when it was run.

Each detector is shown to fire on a notebook broken that way (:func:`broken_notebook`: a copy of
a real notebook with one output per kind of breakage, opened in the same session,
tests/test_browser_open.py) and on a page broken that way (here,
``test_the_detectors_fire_on_a_broken_page``). The report gets the same detectors
(tests/test_report.py). Screenshots of what was found go to test-output/browser/.
Helpers (server, browser) come from tests/test_browser.py.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

import test_browser as tb

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1280, 900
MAX_SCREENS = 3  # an output taller than this many screens, as opened, is a wall to scroll past
ROOT = tb.ROOT

# Text that is code or a chart, never prose: not checked for breaks or Markdown.
SKIP = "svg, .js-plotly-plot, .cm-editor, .CodeMirror, .jp-InputArea, style, script"

# Cuts inside ``root``: words of one text node laid out on two lines, and clipped text.
MIDWORD_CUTS = """(root) => {
  const cuts = [];
  const skip = el => el.closest('""" + SKIP + """');
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

# Hidden or clipped columns inside ``root`` (an output area, or the report's main column):
# content behind a horizontal scroll bar, content past ``root``'s right edge, and a table cell's
# content running over the cell's right edge into the next column.
HIDDEN = """(root) => {
  const found = [];
  const skip = el => el.closest('""" + SKIP + """');
  const name = e => e.tagName.toLowerCase() + (typeof e.className === 'string' && e.className
                    ? '.' + e.className.trim().split(/\\s+/)[0] : '');
  const text = e => (e.innerText || '').trim().replace(/\\s+/g, ' ').slice(0, 50);
  const right = root.getBoundingClientRect().right;
  for (const e of [root, ...root.querySelectorAll('*')]) {
    if (found.length >= 12 || skip(e) || !e.getClientRects().length) continue;
    const s = getComputedStyle(e);
    if (['auto', 'scroll'].includes(s.overflowX) && e.scrollWidth > e.clientWidth + 2 && text(e))
      found.push({kind: 'behind a horizontal scroll', what: name(e),
                  px: e.scrollWidth - e.clientWidth, of: e.scrollWidth, text: text(e)});
    const r = e.getBoundingClientRect();
    const box = e.parentElement && e.parentElement.closest('*');
    let scrolled = false;
    for (let p = e.parentElement; p && p !== root.parentElement; p = p.parentElement)
      if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX) && p !== e) { scrolled = true; break; }
    if (!scrolled && r.width > 0 && r.right > right + 2)
      found.push({kind: 'past the right edge', what: name(e), px: Math.round(r.right - right), text: text(e)});
    if (e.matches('td, th')) {
      const cell = r.right;
      for (const c of e.querySelectorAll('*')) {
        const q = c.getBoundingClientRect();
        if (q.width > 0 && q.right > cell + 1) {
          found.push({kind: 'runs over its column', what: name(c), px: Math.round(q.right - cell), text: text(e)});
          break;
        }
      }
    }
  }
  return found;
}"""

# Markdown shown as text: a pipe table's rule line, a reference link left unresolved, a heading
# (``## ``) at a line's start, bold left as asterisks (outside code, where they may be code).
# Backticks are not looked for: torch's own error messages quote names in them.
RAW_MARKDOWN = """(root) => {
  const found = [];
  const skip = el => el.closest('""" + SKIP + """');
  const rules = [
    ['table rule', /^\\s*\\|?\\s*:?-{3,}:?\\s*(\\|\\s*:?-{3,}:?\\s*)+\\|?\\s*$/m, true],
    ['reference link', /\\[[^\\[\\]\\n]{2,}\\]\\[[A-Za-z][\\w-]*\\]/, true],
    ['heading', /^#{2,6} \\w/m, true],
    ['bold', /\\*\\*[^*\\n]+\\*\\*/, false],
  ];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || skip(el) || !el.getClientRects().length) continue;
    const inCode = !!el.closest('pre, code, kbd, samp');
    for (const [kind, re, evenInCode] of rules) {
      if (inCode && !evenInCode) continue;
      const m = n.textContent.match(re);
      if (m && found.length < 12)
        found.push({kind, text: n.textContent.slice(Math.max(0, m.index - 20), m.index + m[0].length + 20)});
    }
  }
  return found;
}"""

# What JupyterLab's sanitizer (the page's own) takes from the stored HTML outputs of the open
# notebook: <style> elements and style declarations, per code cell (index among all cells).
SANITIZED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const sanitizer = panel.content.rendermime.sanitizer;
  const parse = h => new DOMParser().parseFromString(h, 'text/html').body;
  const decls = body => [...body.querySelectorAll('[style]')]
    .flatMap(e => e.getAttribute('style').split(';').map(d => d.trim().replace(/\\s+/g, '')).filter(Boolean));
  const out = [];
  [...panel.content.model.cells].forEach((cell, i) => {
    if (cell.type !== 'code') return;
    for (const o of cell.outputs.toJSON()) {
      let h = (o.data || {})['text/html'];
      if (!h) continue;
      h = Array.isArray(h) ? h.join('') : h;
      const before = parse(h), after = parse(sanitizer.sanitize(h));
      const kept = new Set(decls(after));
      const lost = [...new Set(decls(before).filter(d => !kept.has(d)))];
      const styles = before.querySelectorAll('style').length - after.querySelectorAll('style').length;
      if (lost.length || styles) out.push({cell: i, styles, lost: lost.slice(0, 6)});
    }
  });
  return out;
}"""

# Every cell of the open notebook: its output heights and what the detectors find in it.
NOTEBOOK_CELLS = """async ([detectors]) => {
  const [cuts, hidden, raw] = detectors.map(src => eval(src));
  const nb = window.jupyterapp.shell.currentWidget.content;
  // heights as opened (a collapsed <details> counts as its summary), then everything opened
  const heights = nb.widgets.map(w => [...w.node.querySelectorAll('.jp-OutputArea-child')]
    .map(o => Math.round(o.getBoundingClientRect().height)));
  nb.node.querySelectorAll('details').forEach(d => d.open = true);
  await new Promise(r => setTimeout(r, 300));
  return nb.widgets.map((w, i) => {
    const area = w.node.querySelector('.jp-OutputArea') || w.node.querySelector('.jp-MarkdownOutput');
    const res = {index: i, type: w.model.type, cuts: [], hidden: [], raw: [], outputs: heights[i]};
    if (!area) return res;
    res.cuts = cuts(area); res.raw = raw(area);
    res.hidden = w.model.type === 'code'
      ? [...area.querySelectorAll('.jp-OutputArea-output')].flatMap(o => hidden(o)) : hidden(area);
    return res;
  });
}"""
DETECTORS = [MIDWORD_CUTS, HIDDEN, RAW_MARKDOWN]
# Scroll the open notebook to code or Markdown cell ``i`` (for a screenshot of what was found).
SCROLL_TO = """async (i) => { const node = window.jupyterapp.shell.currentWidget.content.widgets[i].node;
  let p = node.parentElement;
  while (p && !(p.scrollHeight > p.clientHeight + 1 && ['auto', 'scroll'].includes(getComputedStyle(p).overflowY)))
    p = p.parentElement;
  if (p) p.scrollTop += node.getBoundingClientRect().top - p.getBoundingClientRect().top;
  await new Promise(r => setTimeout(r, 200)); }"""


def activate(page, path: str) -> None:
    """Show the open notebook ``path``, every cell laid out (JupyterLab's notebook windowing,
    ``contentVisibility`` by default, lays out only the cells near the view: turned off on this
    notebook's widget, so the whole notebook is measured in one pass), and wait until its layout
    stops changing (outputs render asynchronously: plotly, Markdown). Windowing is turned off on
    the open widget only: set in the user settings, it makes JupyterLab draw every plotly figure at
    once, and jupyterlab-plotly's snapshot of each marks the notebook modified."""
    page.evaluate("""(path) => { const w = [...window.jupyterapp.shell.widgets('main')]
      .find(w => w.context && w.context.path === path); window.jupyterapp.shell.activateById(w.id); }""", path)
    page.wait_for_function(
        "(path) => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.context && w.context.path === path && w.context.isReady"
        " && w.content.widgets.length > 0; }", arg=path, timeout=60_000)
    page.evaluate("""() => { const nb = window.jupyterapp.shell.currentWidget.content;
      nb.notebookConfig = {...nb.notebookConfig, windowingMode: 'none'}; }""")
    last, stable = None, 0
    deadline = time.monotonic() + 30
    while stable < 3 and time.monotonic() < deadline:
        height = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.node.scrollHeight")
        stable = stable + 1 if height == last else 0
        last = height
        page.wait_for_timeout(250)


def read_open(page, path: str) -> dict:
    """What the detectors find in the open notebook ``path``, as stored: per kind, (cell index,
    finding) pairs; a screenshot of the first cells found, per kind."""
    activate(page, path)
    cells = page.evaluate(NOTEBOOK_CELLS, [DETECTORS])
    found = {"cuts": [(c["index"], x) for c in cells for x in c["cuts"]],
             "hidden": [(c["index"], x) for c in cells for x in c["hidden"]],
             "raw": [(c["index"], x) for c in cells for x in c["raw"]],
             "walls": [(c["index"], h) for c in cells for h in c["outputs"] if h > MAX_SCREENS * HEIGHT],
             "sanitized": [(x["cell"], x) for x in page.evaluate(SANITIZED)]}
    for kind, items in found.items():
        for index in sorted({i for i, _ in items})[:2]:
            page.evaluate(SCROLL_TO, index)
            page.wait_for_timeout(200)
            tb.shot(page, f"stored_{Path(path).stem}_cell{index}_{kind}.png")
    return {"cells": len(cells), **found}


def problems(seen: dict) -> list[str]:
    """The findings as lines a person can act on."""
    out = []
    for kind, what in (("hidden", "hidden or clipped"), ("raw", "unrendered Markdown"),
                       ("cuts", "cut mid-word"), ("walls", f"taller than {MAX_SCREENS} screens"),
                       ("sanitized", "loses CSS to JupyterLab's sanitizer as stored")):
        for index, x in seen[kind]:
            out.append(f"cell {index}: {what}: {x}")
    return out


# ------------------------------------------------------------------------------ mutations
BROKEN_HTML = {
    # a table wider than the output area, inside a scroll box: its last columns are hidden
    "hidden": '<div style="overflow-x:auto"><table><tr>' + "".join(
        f"<td>column_{i}_with_a_long_name</td>" for i in range(12)) + "</tr></table></div>",
    # an identifier in a fixed-width column, wider than it: it runs into the next column
    "hidden_cell": '<table style="table-layout:fixed;width:300px"><tr><td style="width:60px">'
                   "<code>a_site_name_far_longer_than_its_column#1</code></td><td>kind</td></tr></table>",
    # a word broken by the browser to fit a narrow column
    "cuts": '<div style="width:70px;word-break:break-all">functionalization</div>',
    # CSS the sanitizer removes: a <style> element the output depends on
    "sanitized": "<div class='x'><style>.x td{color:red}</style><table><tr><td>styled</td></tr></table></div>",
}
BROKEN_TEXT = {
    # Markdown printed as text: a heading, a pipe table with an unresolved reference link
    "raw": "## The ten objections\n\n| # | objection | evidence |\n|---|---|---|\n| 1 | fixes | [coverage][e1] |\n",
    # an output of screens: 200 lines
    "walls": "".join(f"line {i}\n" for i in range(200)),
}


def check_broken(seen: dict, where: dict[str, int]) -> None:
    """Each detector reported the cell of :func:`broken_notebook` broken its way."""
    found = {kind: {i for i, _ in seen[kind]} for kind in ("hidden", "raw", "cuts", "sanitized")}
    assert {where["hidden"], where["hidden_cell"]} <= found["hidden"], seen["hidden"]
    raw = {x["kind"] for i, x in seen["raw"] if i == where["raw"]}
    assert {"heading", "table rule", "reference link"} <= raw, seen["raw"]
    assert where["walls"] in {i for i, _ in seen["walls"]}, seen["walls"]
    assert where["cuts"] in found["cuts"], seen["cuts"]
    assert where["sanitized"] in found["sanitized"], seen["sanitized"]


def broken_notebook(source: Path, dest: Path) -> dict[str, int]:
    """A copy of ``source`` with one cell appended per kind of breakage (stored outputs only);
    returns each kind's cell index."""
    nb = json.loads(source.read_text())
    template = next(c for c in nb["cells"] if c["cell_type"] == "code")
    where = {}
    for kind, body in [*BROKEN_HTML.items(), *BROKEN_TEXT.items()]:
        cell = copy.deepcopy(template)
        cell["source"] = [f"# broken on purpose: {kind}"]
        cell["outputs"] = ([{"output_type": "display_data", "metadata": {},
                             "data": {"text/html": [body], "text/plain": [kind]}}] if kind in BROKEN_HTML
                           else [{"output_type": "stream", "name": "stdout", "text": [body]}])
        where[kind] = len(nb["cells"])
        nb["cells"].append(cell)
    dest.write_text(json.dumps(nb, indent=1))
    return where


def test_the_detectors_fire_on_a_broken_page(tmp_path):
    """A page made to have each fault (and its fixed twin): the detectors report the broken ones
    only."""
    tb.chromium_or_skip()
    twins = {
        "cuts": ('<div style="width:80px;word-break:break-all">functionalization everywhere</div>',
                 '<div style="width:120px">functionalization is fine</div>'),
        "clip": ('<div style="width:60px;overflow:hidden;white-space:nowrap">clipped words here</div>',
                 '<div style="width:60px">wrapped words here</div>'),
        "hidden": (BROKEN_HTML["hidden"], "<table><tr><td>a</td><td>b</td></tr></table>"),
        "hidden_cell": (BROKEN_HTML["hidden_cell"],
                        '<table style="width:300px"><tr><td><code>a_site_name#1</code></td><td>kind</td></tr></table>'),
        "raw": (f"<pre>{BROKEN_TEXT['raw']}</pre>",
                "<table><tr><th>#</th></tr><tr><td><a href='x'>coverage</a></td></tr></table>"),
        "bold": ("<p>a **bold** claim</p>", "<p>a <b>bold</b> claim; code: <code>`x`</code></p>"),
    }
    detector = {"cuts": MIDWORD_CUTS, "clip": MIDWORD_CUTS, "hidden": HIDDEN, "hidden_cell": HIDDEN,
                "raw": RAW_MARKDOWN, "bold": RAW_MARKDOWN}
    body = "".join(f'<div id="{k}-bad" style="width:600px">{bad}</div><div id="{k}-good" style="width:600px">'
                   f"{good}</div>" for k, (bad, good) in twins.items())
    with tb.chromium_page(tmp_path / "chromium", width=WIDTH, height=HEIGHT) as page:
        page.set_content(f"<body style='margin:0'>{body}</body>")
        seen = {f"{k}-{v}": page.evaluate(f"() => ({detector[k]})(document.getElementById('{k}-{v}'))")
                for k in twins for v in ("bad", "good")}
    for k in twins:
        assert seen[f"{k}-bad"], f"{k}: the broken page was not caught"
        assert not seen[f"{k}-good"], f"{k}: the fixed page was reported: {seen[k + '-good']}"
