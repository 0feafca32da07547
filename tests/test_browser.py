"""What a person sees: the overview notebook opened in a real JupyterLab in a real Chromium.

Starts JupyterLab on 127.0.0.1 (free port, no token, throwaway Jupyter dirs, autosave off so the
repo's notebook is never rewritten), opens notebooks/00_overview.ipynb, runs all cells, waits
until the kernel is idle (REST API and page indicator, stable for a while), then checks the
plotly heatmap and the explorer widgets rendered, changes the op dropdown and checks the shown
text changed. At 1280 px wide, as stored (opened, before running) and after running: the
decision block is on the first screen without scrolling; the stored explorer shows its static
snapshot, not the widget's raw text repr; nothing in the explorer's output (graph diff and trace
opened) is wider than the output area; each of the explorer's tabs opens on its content (first
line on screen, no empty box, no word cut mid-word); with the long trace open and the notebook
scrolled to its end, switching to the graph diff leaves its text on screen. Screenshots go to test-output/browser/. Server and
browser are always stopped.

Chromium is Debian's (/usr/bin/chromium, driven by the playwright package); Playwright's own
browser download cannot work here. tests/browser_setup.sh installs it when missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "notebooks/00_overview.ipynb"
OUTPUT = ROOT / "test-output" / "browser"
CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps dialling Google's hosts (component
# updates, sync, safe browsing); on a machine without internet access those calls only fail and
# slow the page down, so they are turned off.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
RUN_TIMEOUT = 300.0  # seconds for run-all to finish: a hang guard, not a performance threshold
WIDTH = 1280  # px: the narrowest screen a reviewer is expected to read the workbench on
IDLE_STABLE = 3.0  # seconds both idle indicators must agree before outputs are read


# ------------------------------------------------------------------------------ browser
def chromium_or_skip() -> Path:
    """Debian's Chromium; installed once via tests/browser_setup.sh when missing."""
    if not CHROMIUM.exists():
        setup = subprocess.run(["bash", str(ROOT / "tests" / "browser_setup.sh")],
                               capture_output=True, text=True, timeout=600)
        if not CHROMIUM.exists():
            pytest.skip("NO BROWSER: /usr/bin/chromium is missing and tests/browser_setup.sh could "
                        f"not install it (exit {setup.returncode}: {setup.stderr.strip()[-300:]}). "
                        "THE REAL-BROWSER TESTS DID NOT RUN.")
    pytest.importorskip("playwright.sync_api", reason="the playwright python package is missing")
    return CHROMIUM


@contextlib.contextmanager
def chromium_page(tmp: Path, width: int = 1400, height: int = 1000):
    """A headless Chromium page with temporary profile/config/cache dirs; always closed."""
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "HOME": str(tmp), "XDG_CONFIG_HOME": str(tmp / "xdg-config"),
           "XDG_CACHE_HOME": str(tmp / "xdg-cache")}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_or_skip()), headless=True,
                                    args=CHROMIUM_ARGS, env=env)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


# ------------------------------------------------------------------------------ server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, method: str = "GET", timeout: float = 5.0):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if body else None


def write_lab_settings(settings: Path) -> None:
    """User settings: no news pop-up, no update check, and NO AUTOSAVE (the repo's notebook
    must not be rewritten with this run's outputs)."""
    files = {
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    }
    for rel, data in files.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(data))


@contextlib.contextmanager
def jupyterlab(root: Path, tmp: Path):
    """JupyterLab serving ``root`` on a free loopback port, no token; yields the base URL.
    Stopped with POST /api/shutdown (which also stops kernels), then its process group."""
    port = free_port()
    dirs = {name: tmp / name for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    write_lab_settings(dirs["settings"])
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_DATA_DIR": str(dirs["data"]),
           "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]), "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
           "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]), "IPYTHONDIR": str(dirs["ipython"]),
           "JUPYTER_PLATFORM_DIRS": "1", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--port-retries=0", "--IdentityProvider.token=", "--ServerApp.password=",
           "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={root}",
           "--LabApp.expose_app_in_browser=True", "--FileContentsManager.delete_to_trash=False",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly", "--allow-root",
           # checkpoints (made when a notebook is opened) go to the temp dir, not the repo
           f"--FileCheckpoints.checkpoint_dir={tmp / 'checkpoints'}"]
    log = (tmp / "jupyterlab.log").open("w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"jupyter lab exited with {proc.returncode}:\n"
                                     + (tmp / "jupyterlab.log").read_text()[-3000:])
            try:
                http(f"{base}/api/status", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise AssertionError("jupyter lab did not answer /api/status within 60 s:\n"
                                         + (tmp / "jupyterlab.log").read_text()[-3000:])
                time.sleep(0.3)
        yield base
    finally:
        with contextlib.suppress(Exception):
            http(f"{base}/api/shutdown", method="POST", timeout=5)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        # Kernels and anything else the server started live in its process group.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
                break
        log.close()


# ------------------------------------------------------------------------------ page helpers
PAGE_KERNEL_STATUS = """() => {
  const el = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status]')
          || document.querySelector('.jp-Notebook-ExecutionIndicator[data-status]');
  return el ? el.getAttribute('data-status') : null;
}"""

# Cell models of the open notebook: execution counts and error outputs, read from the model.
NOTEBOOK_CELLS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const out = [];
  for (const cell of panel.content.model.cells) {
    if (cell.type !== 'code') continue;
    const outputs = cell.outputs.toJSON();
    out.push({count: cell.executionCount,
              errors: outputs.filter(o => o.output_type === 'error')
                             .map(o => o.ename + ': ' + o.evalue)});
  }
  return out;
}"""


def wait_idle(page, base: str, *, since_busy: bool, timeout: float) -> float:
    """Wait until the REST API and the page both say idle for IDLE_STABLE seconds.

    The page indicator says idle before the kernel is even connected, so with ``since_busy``
    the wait first requires having seen the kernel busy (or all cells executed)."""
    start = time.monotonic()
    seen_busy = not since_busy
    stable_since = None
    while time.monotonic() - start < timeout:
        kernels = http(f"{base}/api/kernels")
        rest = [k["execution_state"] for k in kernels]
        shown = page.evaluate(PAGE_KERNEL_STATUS)
        if "busy" in rest or shown == "busy":
            seen_busy = True
        idle = bool(rest) and all(s == "idle" for s in rest) and shown == "idle"
        if idle and seen_busy:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= IDLE_STABLE:
                return time.monotonic() - start
        else:
            stable_since = None
        time.sleep(0.25)
    raise AssertionError(f"kernel not idle after {timeout:.0f} s (REST: {rest}, page: {shown})")


def shot(page, name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / name
    page.screenshot(path=str(path))
    return path


# ------------------------------------------------------------------------------ the test
# The first screen: where the decision block is (the output whose text starts "Decision:").
DECISION_ON_SCREEN = """() => {
  const out = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output')]
    .find(o => o.innerText.trim().startsWith('Decision:'));
  if (!out) return {found: false, viewport: window.innerHeight};
  const r = out.getBoundingClientRect();
  return {found: true, top: r.top, bottom: r.bottom, viewport: window.innerHeight,
          text: out.innerText.slice(0, 80)};
}"""

# Scroll the notebook to the code cell whose source is exactly ``source`` and return the text of
# its rendered output and what in it reaches past the output area's right edge (with ``openAll``:
# measured again with every <details> open and with each accordion panel open in turn).
CELL_OUTPUT = """async ([source, openAll]) => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const i = nb.widgets.findIndex(w => w.model.type === 'code' && w.model.sharedModel.getSource().trim() === source);
  if (i < 0) return {found: false};
  const node = nb.widgets[i].node;
  // Cells off screen may not be rendered (JupyterLab's windowing): scroll until it is on screen
  // and stays there (the heights above it change while they render).
  for (let k = 0; k < 6; k++) {
    if (nb.scrollToItem) await nb.scrollToItem(i, 'start');
    node.scrollIntoView({block: 'start'});
    await new Promise(r => setTimeout(r, 800));
    const r = node.getBoundingClientRect();
    if (node.isConnected && r.top >= 0 && r.top < window.innerHeight / 2) break;
  }
  const area = node.querySelector('.jp-OutputArea');
  if (!area) return {found: true, text: '', overflow: []};
  const overflow = [], panels = [];
  const measure = () => {
    panels.push(area.innerText);
    const right = area.getBoundingClientRect().right;
    // inside a scroll box of the output (a panel with overflow auto) wide content scrolls: not cut
    const scrolls = [...area.querySelectorAll('*')].filter(e => ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
                                                        && e.getBoundingClientRect().right <= right + 2);
    for (const e of area.querySelectorAll('*')) {
      const r = e.getBoundingClientRect();
      if (scrolls.some(b => b !== e && b.contains(e))) continue;
      if (r.width > 0 && r.right > right + 2 && overflow.length < 5)
        overflow.push(e.tagName + '.' + (e.className.baseVal ?? e.className) + ' ' + Math.round(r.right));
    }
  };
  measure();
  if (openAll) {
    node.querySelectorAll('details').forEach(d => d.open = true);
    measure();
    // The explorer's tabs show one panel at a time: select each in turn (Lumino selects a tab on
    // a pointer press at its position) and measure it.
    for (const tab of node.querySelectorAll('.lm-TabBar-tab')) {
      const r = tab.getBoundingClientRect();
      const at = {bubbles: true, button: 0, clientX: r.left + r.width / 2, clientY: r.top + r.height / 2};
      tab.dispatchEvent(new PointerEvent('pointerdown', at));
      tab.dispatchEvent(new PointerEvent('pointerup', at));
      await new Promise(r => setTimeout(r, 1500));
      measure();
    }
  }
  return {found: true, text: area.innerText, overflow, panels};
}"""


def check_decision_on_first_screen(page, when: str) -> None:
    seen = page.evaluate(DECISION_ON_SCREEN)
    assert seen["found"], f"{when}: no output starting with 'Decision:' is rendered on the first screen"
    assert 0 <= seen["top"] < seen["viewport"] - 150, \
        f"{when}: the decision block starts at y={seen['top']:.0f}, below the first screen ({seen['viewport']} px)"


def run_overview_in_lab(root: Path, notebook: str, tmp: Path) -> dict:
    """Open ``notebook`` in JupyterLab, run all, check heatmap and explorer; returns timings."""
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    with jupyterlab(root, tmp / "jupyter") as base, chromium_page(tmp / "chromium", width=WIDTH) as page:
        try:
            t = _drive(page, base, notebook, timings, t0)
        except BaseException:
            with contextlib.suppress(Exception):
                print("screenshot of the failure:", shot(page, "overview_failure.png"))
            raise
    timings["stop"] = time.monotonic() - t
    saves = [ln for ln in (tmp / "jupyter" / "jupyterlab.log").read_text().splitlines()
             if "Saving file at" in ln]
    assert not saves, f"the browser session wrote files into the repo: {saves}"
    timings["total"] = time.monotonic() - t0
    return {k: round(v, 1) for k, v in timings.items()}


def _drive(page, base: str, notebook: str, timings: dict[str, float], t0: float) -> float:
    """The person's session, on an open page; returns the time it ended."""
    timings["server_and_browser_start"] = time.monotonic() - t0
    console = []
    page.on("pageerror", lambda e: console.append(str(e)))
    page.goto(f"{base}/lab/tree/{notebook}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.content", timeout=30_000)
    wait_idle(page, base, since_busy=False, timeout=60)
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # room for the figures
    timings["open_notebook"] = time.monotonic() - t0 - timings["server_and_browser_start"]

    # As stored (opened, not run: an untrusted notebook without live widgets).
    page.wait_for_timeout(1500)
    shot(page, "overview_stored_first_screen.png")
    check_decision_on_first_screen(page, "as stored")
    stored = page.evaluate(CELL_OUTPUT, ["explorer", True])
    assert stored["found"], "no cell displaying the explorer"
    shot(page, "overview_stored_explorer.png")
    assert "VBox(children=" not in stored["text"], "the stored explorer shows the widget's raw text repr"
    assert "run this cell" in stored["text"], \
        f"the stored explorer shows no static snapshot: {stored['text'][:200]!r}"
    assert not stored["overflow"], f"the stored explorer is wider than its output area: {stored['overflow']}"
    page.evaluate("() => window.jupyterapp.shell.currentWidget.content.scrollToItem(0, 'start')")

    t = time.monotonic()
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    # Done when every code cell has an execution count and the kernel is idle, stably.
    page.wait_for_function(f"() => ({NOTEBOOK_CELLS})().every(c => c.count)",
                           timeout=RUN_TIMEOUT * 1000, polling=500)
    wait_idle(page, base, since_busy=False, timeout=RUN_TIMEOUT)
    timings["run_all"] = time.monotonic() - t
    cells = page.evaluate(NOTEBOOK_CELLS)
    errors = [e for c in cells for e in c["errors"]]
    assert not errors, f"cells raised: {errors}"
    assert cells and all(c["count"] for c in cells), f"unexecuted code cells: {cells}"
    page.evaluate("() => window.jupyterapp.shell.currentWidget.content.scrollToItem(0, 'start')")
    page.wait_for_timeout(1000)
    shot(page, "overview_run_first_screen.png")
    check_decision_on_first_screen(page, "after run")

    # The matrix heatmap: a plotly plot with its SVG, drawn as a heatmap.
    # (The first plotly figure is the decision chart; the matrix is the one holding a heatmap.)
    page.locator(".jp-NotebookPanel .js-plotly-plot").first.wait_for(state="attached", timeout=30_000)
    plot = page.locator(".jp-NotebookPanel .js-plotly-plot", has=page.locator(".heatmaplayer")).first
    plot.wait_for(state="attached", timeout=30_000)
    plot.evaluate("el => el.scrollIntoView({block: 'start'})")
    shot(page, "overview_heatmap.png")
    assert plot.locator("svg.main-svg").count() >= 1
    assert plot.locator(".heatmaplayer image").count() >= 1, "the matrix heatmap is not drawn"

    # The explorer: ipywidgets dropdowns; the op dropdown is the one offering catalog ops.
    page.wait_for_selector(".jupyter-widgets .widget-dropdown select", timeout=30_000)
    from funcbwd_lab.ops import registry

    op_names = set(registry.op_names())
    selects = page.locator(".widget-dropdown select")
    op_select = None
    for i in range(selects.count()):
        options = selects.nth(i).locator("option").all_text_contents()
        if len(op_names.intersection(options)) >= 2:
            op_select = selects.nth(i)
            break
    assert op_select is not None, "no dropdown offering catalog ops"
    options = [o for o in op_select.locator("option").all_text_contents() if o in op_names]
    current = op_select.input_value()
    new = next(o for o in options if o != current)
    # The text a person reads next to the widgets: the whole output of the explorer's cell.
    cell = page.locator(".jp-Cell", has=op_select)
    cell.scroll_into_view_if_needed()
    before_text = cell.locator(".jp-OutputArea").inner_text()
    shot(page, "overview_explorer_before.png")

    t = time.monotonic()
    op_select.select_option(label=new)
    page.wait_for_function(
        "([sel, old]) => { const c = [...document.querySelectorAll('.jp-Cell')]"
        ".find(c => c.contains(document.querySelectorAll('.widget-dropdown select')[sel]));"
        " return c && c.querySelector('.jp-OutputArea').innerText !== old; }",
        arg=[_index_of(page, op_select), before_text], timeout=60_000, polling=250)
    wait_idle(page, base, since_busy=False, timeout=60)
    timings["dropdown_update"] = time.monotonic() - t
    after_text = cell.locator(".jp-OutputArea").inner_text()
    assert after_text != before_text
    assert new in after_text, f"the explorer output does not mention the chosen op {new!r}"
    # The explorer's chart must show data for the chosen op (an empty plotly frame with
    # default axes is what a broken FigureWidget sync looks like).
    chart = wait_chart(page, _index_of(page, op_select), new)
    shot(page, "overview_explorer_after.png")
    assert chart["marks"] > 0 and new in chart["title"], \
        f"the explorer's chart shows no data for {new!r} (seen: {chart}); see overview_explorer_after.png"
    live = page.evaluate(CELL_OUTPUT, ["explorer", True])
    shot(page, "overview_explorer_opened.png")
    assert any("trace: " in t for t in live["panels"]) and any("def forward" in t for t in live["panels"]), \
        "the explorer's trace and graph diff panels did not open (nothing was measured)"
    assert not live["overflow"], \
        f"the live explorer (trace and graph diff opened) is wider than its output area: {live['overflow']}"
    check_panels_open_on_their_content(page)
    check_switch_to_graph_diff(page)
    assert not console, f"JavaScript errors on the page: {console}"
    return time.monotonic()


# The explorer's tabs: the panel on show, how much of its text is on screen, whether its box is
# taller than its content (an empty box), and (MIDWORD_CUTS, tests/test_browser_layout.py) words
# cut mid-word in it.
SHOWN_PANEL = """([cutsSrc]) => {
  const nb = window.jupyterapp.shell.currentWidget.content;
  const cell = nb.widgets.find(w => w.node.querySelector('.lm-TabBar-tab') && w.node.innerText.includes('graph diff'));
  if (!cell) return {found: false};
  const tab = cell.node.querySelector('.lm-TabBar-tab.lm-mod-current');
  const panel = [...cell.node.querySelectorAll('.widget-tab-contents .widget-html, .jupyter-widget-TabPanel-tabContents .widget-html, .widget-tab .widget-html')]
    .find(p => p.offsetParent !== null && p.getBoundingClientRect().height > 0);
  if (!panel) return {found: true, tab: tab ? tab.innerText : '', panel: false};
  const box = panel.getBoundingClientRect();
  const view = (nb.outerNode || nb.node).getBoundingClientRect();
  const content = panel.querySelector('.widget-html-content') || panel;
  const text = content.innerText.trim();
  // the first line of text: where a reader's eye lands when the panel opens
  const walker = document.createTreeWalker(content, NodeFilter.SHOW_TEXT);
  let first = null;
  let firstTop = box.top;
  for (let n = walker.nextNode(); n && !first; n = walker.nextNode()) {
    if (!n.textContent.trim() || !n.parentElement || n.parentElement.closest('style, script')) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    const rect = r.getBoundingClientRect();
    if (rect.height > 0) { first = n; firstTop = rect.top; }
  }
  return {found: true, tab: tab ? tab.innerText.trim() : '', panel: true, text: text.slice(0, 80),
          box_height: box.height, content_height: content.scrollHeight,
          first_line_top: firstTop, view_top: view.top, view_bottom: view.bottom,
          on_screen: Math.max(0, Math.min(box.bottom, view.bottom) - Math.max(box.top, view.top)),
          cuts: eval(cutsSrc)(panel)};
}"""
TO_THE_END = """() => { const nb = window.jupyterapp.shell.currentWidget.content;
  const o = nb.outerNode || nb.node; o.scrollTop = o.scrollHeight; }"""


def open_tab(page, title: str) -> dict:
    """Click the explorer's tab ``title`` (a real click) and measure the panel it shows."""
    from test_browser_layout import MIDWORD_CUTS

    tab = page.locator(".lm-TabBar-tab", has_text=title).first
    tab.scroll_into_view_if_needed()
    tab.click()
    page.wait_for_timeout(1500)
    return page.evaluate(SHOWN_PANEL, [MIDWORD_CUTS])


def check_panels_open_on_their_content(page) -> None:
    """Each tab, clicked, shows its panel right under the tab bar with its first line on screen,
    the panel no taller than its content (no empty box), and no word cut mid-word at WIDTH."""
    from funcbwd_lab.views.widgets import PANEL_TITLES

    for i, title in enumerate(PANEL_TITLES):
        seen = open_tab(page, title)
        shot(page, f"overview_explorer_tab{i}.png")
        assert seen.get("panel") and seen["tab"] == title, f"clicking {title!r} showed {seen}"
        assert seen["view_top"] <= seen["first_line_top"] < seen["view_bottom"] - 20, \
            f"the {title!r} panel opened with its first line off screen: {seen}"
        assert seen["box_height"] <= seen["content_height"] + 12, \
            f"the {title!r} panel is an empty box taller than its content: {seen}"
        assert not seen["cuts"], f"words cut mid-word in the {title!r} panel: {seen['cuts'][:5]}"


def check_switch_to_graph_diff(page) -> None:
    """With the long trace open and the notebook scrolled to its end, switching the explorer to
    "graph diff" must leave the graph diff's text on screen (it used to open an empty box with the
    diff above the view; before that, the page shrank by the trace's height and left it blank)."""
    open_tab(page, "dispatch-key trace")
    page.evaluate(TO_THE_END)
    page.wait_for_timeout(1000)
    seen = open_tab(page, "graph diff")
    shot(page, "overview_explorer_graph_diff_after_trace.png")
    assert seen.get("panel") and seen["tab"] == "graph diff" and seen["text"], seen
    assert seen["view_top"] <= seen["first_line_top"] < seen["view_bottom"] - 20, \
        f"after switching from the trace to the graph diff its first line is off screen: {seen}"
    assert seen["on_screen"] >= min(100, seen["box_height"]), \
        f"after switching from the trace to the graph diff the view shows {seen['on_screen']:.0f} px of it: {seen}"


EXPLORER_CHART = """([sel]) => {
  const c = [...document.querySelectorAll('.jp-Cell')]
    .find(c => c.contains(document.querySelectorAll('.widget-dropdown select')[sel]));
  const plot = c && c.querySelector('.js-plotly-plot');
  if (!plot) return {plots: 0, marks: 0, title: ''};
  return {plots: 1, title: (plot.querySelector('.gtitle') || {}).textContent || '',
          marks: plot.querySelectorAll('.barlayer .point, .scatterlayer .point, .heatmaplayer image').length};
}"""


def wait_chart(page, select_index: int, op: str, timeout: float = 30.0) -> dict:
    """The plotly chart in the explorer's output once it shows ``op`` (or what it shows at
    the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        chart = page.evaluate(EXPLORER_CHART, [select_index])
        if (chart["marks"] and op in chart["title"]) or time.monotonic() > deadline:
            return chart
        time.sleep(0.5)


def _index_of(page, locator) -> int:
    """Index of ``locator`` among all dropdown selects (for use inside page JavaScript)."""
    handle = locator.element_handle()
    return page.evaluate("(el) => [...document.querySelectorAll('.widget-dropdown select')].indexOf(el)",
                         handle)


def test_overview_notebook_in_real_jupyterlab(tmp_path):
    chromium_or_skip()
    if not (ROOT / NOTEBOOK).exists():
        pytest.fail(f"{NOTEBOOK} does not exist")
    timings = run_overview_in_lab(ROOT, NOTEBOOK, tmp_path)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "timings.json").write_text(json.dumps(timings, indent=1))
    print("browser test timings (s):", timings)
