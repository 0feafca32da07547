"""Opening the workbench's notebooks in JupyterLab modifies nothing, no news prompt appears, and
every notebook as stored reads at 1280 px.

A person runs ``make lab``, opens notebooks, reads them and closes the browser: no notebook may be
marked modified, autosave may write no file, and JupyterLab must not ask "Would you like to get
notified about official Jupyter news?". This test serves a *copy* of ``notebooks/`` (so a save
could never touch the repository) from a real JupyterLab driven by headless Chromium, with the
project's own JupyterLab configuration (``jupyter_config/``, put on ``JUPYTER_CONFIG_PATH`` exactly
as ``make lab`` does) and autosave turned on with a 2 s interval. It opens every notebook (each
starts its kernel, which is when JupyterLab rewrites a kernelspec that differs from the running
kernel's), four at a time, waits until their kernels are idle and then past several autosave
ticks, and asserts: nothing happened to any notebook after it loaded (no metadata rewritten, never
dirty, no save; model and tab), the server saved nothing, every file hash is unchanged, and no news
prompt is on the page. A run without the project's configuration shows the prompt
(``test_the_prompt_check_can_fail``), so the prompt check can fail.

The same session, at 1280x900 with the file browser open (as ``make lab`` opens), reads each
notebook while its batch waits for the autosave ticks: tests/test_browser_layout.py's detectors
(hidden or clipped columns, unrendered Markdown, mid-word breaks, walls, CSS JupyterLab's
sanitizer takes from a stored output) over every cell, laid out at once (windowing off). A copy of
a notebook broken each way is opened with the others, and each detector must report its cell
(``test_a_broken_notebook_is_caught``).

Two fast tests (no browser) check the causes directly: the stored kernelspec of every notebook pair
is the one JupyterLab starts, and binder/start applies jupyter_config/ as `make lab` does.

Helpers (server, browser, REST) come from tests/test_browser.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import test_browser as tb
import test_browser_layout as layout

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "jupyter_config"
AUTOSAVE_S = 2
SETTLE_S = 3 * AUTOSAVE_S + 1  # past several autosave ticks after the last kernel went idle
NEWS_PROMPT = "official Jupyter news"

# The open notebook panels: path, dirty flag, dirty tab, and what happened after the document was
# ready (metadata JupyterLab rewrote, dirty transitions), recorded by the hook RECORD installs.
PANELS = """() => [...window.jupyterapp.shell.widgets('main')]
  .filter(w => w.context && w.content && w.content.model && w.context.path.endsWith('.ipynb'))
  .map(w => ({path: w.context.path, ready: w.context.isReady, dirty: w.context.model.dirty,
              tab: w.title.className.includes('jp-mod-dirty'),
              events: (window.__events || {})[w.context.path] || []}))"""
RECORD = """(path) => {
  const w = [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === path);
  window.__events = window.__events || {};
  const log = window.__events[path] = [];
  return w.context.ready.then(() => {
    w.context.model.metadataChanged.connect((m, a) =>
      log.push('metadata ' + a.key + ': ' + JSON.stringify(a.oldValue) + ' -> ' + JSON.stringify(a.newValue)));
    w.context.model.stateChanged.connect((m, a) => { if (a.name === 'dirty' && a.newValue) log.push('became dirty'); });
    w.context.fileChanged.connect(() => log.push('saved'));
  });
}"""
CLOSE = """(paths) => { for (const w of [...window.jupyterapp.shell.widgets('main')])
  if (w.context && paths.includes(w.context.path)) w.dispose(); }"""
AUTOSAVE = """async (on) => { const id = 'docmanager:toggle-autosave', c = window.jupyterapp.commands;
  if (c.isToggled(id) !== on) await c.execute(id); }"""
BATCH = 4  # notebooks open at once (each starts a kernel)
BROKEN = "zz_broken_on_purpose.ipynb"  # the mutation, opened with the others (last)


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _copy_notebooks(tmp: Path) -> Path:
    root = tmp / "repo"
    (root / "notebooks").mkdir(parents=True)
    for p in sorted((ROOT / "notebooks").iterdir()):
        if p.suffix in (".ipynb", ".py"):
            shutil.copy2(p, root / "notebooks" / p.name)
    return root


def _autosave_settings(settings: Path) -> None:
    """Replaces tests/test_browser.py's user settings: autosave ON, every 2 s, and nothing else
    (the news prompt must be kept away by the project's jupyter_config/, not by this test)."""
    rel = "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings"
    (settings / rel).parent.mkdir(parents=True, exist_ok=True)
    (settings / rel).write_text(json.dumps({"autosave": True, "autosaveInterval": AUTOSAVE_S}))


def _sessions(base: str, paths: list[str]) -> list[dict]:
    return [x for x in tb.http(f"{base}/api/sessions") if x["path"] in paths]


def _wait_kernels_idle(base: str, paths: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = [x["kernel"]["execution_state"] for x in _sessions(base, paths)]
        if len(states) == len(paths) and all(s == "idle" for s in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"kernels of {paths} not all idle after {timeout:.0f} s: {states}")
        time.sleep(0.25)


def _start(page, base: str) -> None:
    page.goto(f"{base}/lab?reset", wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
    page.evaluate("() => window.jupyterapp.restored.then(() => null)")


def open_all_and_settle(root: Path, tmp: Path, monkeypatch) -> dict:
    """Serve ``root`` with the project's configuration and open every notebook under it, BATCH at
    a time: open, wait until each one's kernel is idle and then past two autosave ticks, record
    what the page shows, read each as stored at 1280x900 (tests/test_browser_layout.py's
    detectors; autosave off meanwhile), close them and shut their kernels down. Returns what was
    seen."""
    monkeypatch.setattr(tb, "write_lab_settings", _autosave_settings)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(CONFIG))
    paths = sorted(f"notebooks/{p.name}" for p in (root / "notebooks").glob("*.ipynb"))
    t0 = time.monotonic()
    panels, read = [], {}
    with tb.jupyterlab(root, tmp / "jupyter") as base, \
            tb.chromium_page(tmp / "chromium", width=layout.WIDTH, height=layout.HEIGHT) as page:
        try:
            _start(page, base)
            page.evaluate("() => window.jupyterapp.shell.expandLeft()")  # as `make lab` opens
            for i in range(0, len(paths), BATCH):
                batch = paths[i:i + BATCH]
                for path in batch:
                    page.evaluate("(path) => { window.jupyterapp.commands.execute('docmanager:open', "
                                  "{path, factory: 'Notebook'}); }", path)
                    page.wait_for_function(
                        "(path) => [...window.jupyterapp.shell.widgets('main')].some(w => w.context && w.context.path === path)",
                        arg=path, timeout=30_000)
                    page.evaluate(RECORD, path)
                _wait_kernels_idle(base, batch)
                time.sleep(SETTLE_S)
                panels += [p for p in page.evaluate(PANELS) if p["path"] in batch]
                if i == 0:
                    tb.shot(page, "open_notebooks_first_batch.png")
                # Read each as stored, autosave off: laying out every cell at once draws every
                # plotly figure, which marks the notebook modified (jupyterlab-plotly adds a PNG
                # snapshot to the output; the save hook drops it again): no part of opening.
                page.evaluate(AUTOSAVE, False)
                for path in batch:
                    read[path] = layout.read_open(page, path)
                page.evaluate(CLOSE, batch)
                page.evaluate(AUTOSAVE, True)
                for session in _sessions(base, batch):
                    tb.http(f"{base}/api/sessions/{session['id']}", method="DELETE")
            news = page.evaluate(f"() => document.body.innerText.includes({NEWS_PROMPT!r})")
        except BaseException:
            with contextlib.suppress(Exception):
                print("screenshot of the failure:", tb.shot(page, "open_all_failure.png"))
            raise
    saves = [ln for ln in (tmp / "jupyter" / "jupyterlab.log").read_text().splitlines() if "Saving" in ln]
    return {"panels": panels, "news_prompt": news, "saves": saves, "paths": paths, "read": read,
            "seconds": round(time.monotonic() - t0, 1)}


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """One session for the module: a copy of every notebook and the broken one, opened."""
    tb.chromium_or_skip()
    tmp = tmp_path_factory.mktemp("open")
    root = _copy_notebooks(tmp)
    where = layout.broken_notebook(ROOT / "notebooks" / "your_code.ipynb", root / "notebooks" / BROKEN)
    before = _hashes(root / "notebooks")
    with pytest.MonkeyPatch.context() as mp:
        seen = open_all_and_settle(root, tmp, mp)
    print(f"opened and read {len(seen['paths'])} notebooks in {seen['seconds']} s")
    tb.OUTPUT.mkdir(parents=True, exist_ok=True)
    (tb.OUTPUT / "stored_layout.json").write_text(json.dumps(seen["read"], indent=1))
    return {**seen, "root": root, "before": before, "where": where}


@pytest.mark.browser
def test_opening_every_notebook_modifies_nothing(opened):
    seen, root, before = opened, opened["root"], opened["before"]
    assert len(seen["panels"]) == len(seen["paths"]) >= 10, seen["panels"]
    assert sorted(p["path"] for p in seen["panels"]) == seen["paths"]
    dirty = {p["path"]: p["events"] for p in seen["panels"] if p["dirty"] or p["tab"] or p["events"]}
    assert not dirty, ("opening modified these notebooks (what JupyterLab did after loading each: "
                       f"{json.dumps(dirty, indent=1)})")
    assert not seen["saves"], f"autosave wrote files: {seen['saves']}"
    changed = [name for name, h in _hashes(root / "notebooks").items() if before.get(name) != h]
    assert not changed, f"files changed on disk: {changed}"
    assert not seen["news_prompt"], "JupyterLab asked about Jupyter news despite jupyter_config/"


@pytest.mark.browser
def test_every_notebook_as_stored_reads_at_1280px(opened):
    """issue 36: opened without running, at 1280x900 with the file browser open, no notebook
    hides or clips a column, shows Markdown as text, cuts a word, runs for screens, or loses CSS
    to the sanitizer (its stored output rendering otherwise than the run one did)."""
    read = {p: r for p, r in opened["read"].items() if not p.endswith(BROKEN)}
    assert len(read) >= 10 and all(r["cells"] > 3 for r in read.values()), read
    bad = {path: layout.problems(r) for path, r in read.items() if layout.problems(r)}
    assert not bad, "as stored, at 1280x900 with the file browser open:\n" + "\n".join(
        f"{path}:\n  " + "\n  ".join(lines[:10]) for path, lines in bad.items())


@pytest.mark.browser
def test_a_broken_notebook_is_caught(opened):
    """Mutation: a copy of a real notebook with one output broken each way; each detector reports
    the cell broken its way (tests/test_browser_layout.py's ``broken_notebook``)."""
    layout.check_broken(opened["read"][f"notebooks/{BROKEN}"], opened["where"])


@pytest.mark.browser
def test_the_prompt_check_can_fail(tmp_path, monkeypatch):
    """Without the project's configuration JupyterLab does ask about the news."""
    tb.chromium_or_skip()
    monkeypatch.setattr(tb, "write_lab_settings", _autosave_settings)
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    (tmp_path / "empty").mkdir()
    with tb.jupyterlab(tmp_path / "empty", tmp_path / "jupyter") as base, \
            tb.chromium_page(tmp_path / "chromium") as page:
        _start(page, base)
        page.wait_for_function(f"() => document.body.innerText.includes({NEWS_PROMPT!r})", timeout=30_000)


# ------------------------------------------------------------------------------ the cause, fast
def test_stored_kernelspec_is_the_one_jupyterlab_starts():
    """The cause the browser test found: when a notebook's kernel starts, JupyterLab writes the
    running kernel's spec into the notebook metadata; a stored spec that differs (e.g. display
    name "Python 3" against ipykernel's "Python 3 (ipykernel)") marks the notebook modified and
    autosave rewrites both files of the jupytext pair. Jupytext takes the spec from the .py
    header, so both files of each pair must carry it."""
    import jupytext
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    want = {"name": "python3", "display_name": spec.display_name, "language": spec.language}
    wrong = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.py")):
        got = (json.loads(path.read_text())["metadata"] if path.suffix == ".ipynb"
               else jupytext.read(path).metadata).get("kernelspec")
        if got != want:
            wrong[path.name] = got
    assert not wrong, f"notebooks whose stored kernelspec is not {want}: {wrong}"


# ------------------------------------------------------------------------------ Binder's copy
BINDER_PROBE = """
import json, os
from jupyter_core.paths import jupyter_config_path
from traitlets.config import PyFileConfigLoader
first = jupyter_config_path()[0]
cfg = PyFileConfigLoader("jupyter_server_config.py", path=first).load_config()
print(json.dumps({"first": first, "settings": cfg.LabApp.app_settings_dir,
                  "hook": cfg.ContentsManager.pre_save_hook.__name__,
                  "seed": os.environ.get("PYTHONHASHSEED")}))
"""


def test_binder_applies_jupyter_config_as_make_lab_does(tmp_path):
    """binder/start (repo2docker runs every session's command through it), run from another
    directory, puts the project's jupyter_config/ first on JUPYTER_CONFIG_PATH as `make lab` does:
    the lab settings (no news prompt), the save hook and PYTHONHASHSEED=0 all come from it."""
    start = ROOT / "binder" / "start"
    assert start.stat().st_mode & 0o111, "binder/start must be executable (repo2docker runs it)"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([str(start), sys.executable, "-c", BINDER_PROBE], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert Path(seen["first"]) == CONFIG
    assert Path(seen["settings"]) == CONFIG / "lab" / "settings" and seen["seed"] == "0"
    assert seen["hook"] == "_drop_plotly_snapshots"
    notification = json.loads((CONFIG / "lab/settings/overrides.json").read_text())[
        "@jupyterlab/apputils-extension:notification"]
    assert notification["fetchNews"] == "false"
    make_lab = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True,
                              timeout=60).stdout
    assert "JUPYTER_CONFIG_PATH=" + str(ROOT / "jupyter_config") in make_lab  # the same folder
