"""Run all and save in a real JupyterLab, then git sees nothing, and no chart shows a placeholder.

A person runs ``make lab``, opens an op notebook, runs every cell and saves (Ctrl+S). This test
does exactly that on a scratch git repository holding a copy of the notebook pair and ``data/``
(committed there first, so ``git status`` answers for the committed bytes; the real repository is
never written), served by a real JupyterLab with the project's ``jupyter_config/`` on
``JUPYTER_CONFIG_PATH`` (as ``make lab`` puts it) and driven by headless Chromium at 1280x800:
open, run all cells to the end, check that no plotly chart shows plotly's "new text" placeholder
(an annotation without text), press Ctrl+S, wait until JupyterLab saved both files of the pair,
and assert ``git status --porcelain notebooks/`` is empty (else the diff is printed).

Helpers (server, browser, idle waits) come from tests/test_browser.py.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import test_browser as tb

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
NAME = "op_topk"
PLACEHOLDERS = """() => [...document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot')].map(p => ({
  title: (p.querySelector('.gtitle') || {}).textContent || '',
  placeholders: [...p.querySelectorAll('.annotation-text')].filter(t => t.textContent.trim() === 'new text').length}))"""
SCROLL_TO_PLOT = """async (i) => { const p = document.querySelectorAll('.jp-NotebookPanel .js-plotly-plot')[i];
  p.scrollIntoView({block: 'center'}); await new Promise(r => setTimeout(r, 600)); }"""
DIRTY = "() => window.jupyterapp.shell.currentWidget.context.model.dirty"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@localhost", *args],
                          cwd=repo, capture_output=True, text=True, check=True, timeout=60).stdout


def _scratch_repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    (repo / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "data", repo / "data")
    for suffix in (".ipynb", ".py"):
        shutil.copy2(ROOT / "notebooks" / f"{NAME}{suffix}", repo / "notebooks" / f"{NAME}{suffix}")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "as committed")
    return repo


def test_run_all_and_save_changes_nothing_git_sees(tmp_path, monkeypatch):
    tb.chromium_or_skip()
    repo = _scratch_repo(tmp_path)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(ROOT / "jupyter_config"))
    timings = {}
    t0 = time.monotonic()
    with tb.jupyterlab(repo, tmp_path / "jupyter") as base, \
            tb.chromium_page(tmp_path / "chromium", width=1280, height=800) as page:
        try:
            page.goto(f"{base}/lab/tree/notebooks/{NAME}.ipynb?reset", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                   " && window.jupyterapp.shell.currentWidget.content", timeout=30_000)
            tb.wait_idle(page, base, since_busy=False, timeout=60)
            timings["open"] = time.monotonic() - t0
            t = time.monotonic()
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_function(f"() => ({tb.NOTEBOOK_CELLS})().every(c => c.count)",
                                   timeout=tb.RUN_TIMEOUT * 1000, polling=500)
            tb.wait_idle(page, base, since_busy=False, timeout=tb.RUN_TIMEOUT)
            timings["run_all"] = time.monotonic() - t
            errors = [e for c in page.evaluate(tb.NOTEBOOK_CELLS) for e in c["errors"]]
            assert not errors, f"cells raised: {errors}"

            plots = page.evaluate(PLACEHOLDERS)
            for i in range(len(plots)):  # every chart drawn on screen once
                page.evaluate(SCROLL_TO_PLOT, i)
            plots = page.evaluate(PLACEHOLDERS)
            tb.shot(page, f"{NAME}_after_run_all.png")
            assert len(plots) >= 4, f"expected the op notebook's charts, found {plots}"
            bad = [p for p in plots if p["placeholders"]]
            assert not bad, f"charts showing plotly's 'new text' placeholder: {bad}"

            t = time.monotonic()
            page.locator(".jp-NotebookPanel .jp-Cell").first.click()  # focus the notebook
            page.keyboard.press("Escape")  # command mode: Ctrl+S is the notebook's save
            page.keyboard.press("Control+s")
            page.wait_for_function(f"() => !({DIRTY})()", timeout=60_000, polling=250)
            deadline = time.monotonic() + 30
            log = tmp_path / "jupyter" / "jupyterlab.log"
            while sum("Saving" in ln for ln in log.read_text().splitlines()) < 2:
                assert time.monotonic() < deadline, "JupyterLab did not save both files of the pair:\n" \
                    + "\n".join(ln for ln in log.read_text().splitlines() if "Sav" in ln)
                time.sleep(0.25)
            timings["save"] = time.monotonic() - t
        except BaseException:
            with contextlib.suppress(Exception):
                print("screenshot of the failure:", tb.shot(page, f"{NAME}_save_failure.png"))
            raise
    status = _git(repo, "status", "--porcelain", "notebooks/")
    timings["total"] = time.monotonic() - t0
    print("browser save test timings (s):", {k: round(v, 1) for k, v in timings.items()})
    assert status == "", (f"after run all + save, git sees changes:\n{status}\n"
                          + _git(repo, "diff", "--stat") + _git(repo, "diff")[:4000])
