"""Issue 31, item 7: `jupyter nbconvert --execute --inplace` (what many CI pipelines run) leaves a
stored notebook byte for byte as it was when jupyter_config/ is on JUPYTER_CONFIG_PATH (`make
nbconvert-execute`): jupyter_config/jupyter_nbconvert_config.py merges streams, writes numbers as
JavaScript does and stores no timing metadata or widget state. Without it, nbconvert rewrites the
notebook (per-cell timing metadata at least), so the check can fail. One small notebook (op_diag,
about 20 s) stands for all of them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = "op_diag"


def _nbconvert(tmp_path: Path, config: bool) -> tuple[bytes, bytes]:
    (tmp_path / "notebooks").mkdir()
    for suffix in (".ipynb", ".py"):
        shutil.copy2(ROOT / "notebooks" / f"{NAME}{suffix}", tmp_path / "notebooks")
    for folder in ("data", "docs"):  # what the notebook reads, at the same relative place
        (tmp_path / folder).symlink_to(ROOT / folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(PYTHONPATH=str(ROOT / "lib"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    if config:
        env["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter_config")
    else:
        env.pop("PYTHONHASHSEED", None)
    p = subprocess.run([sys.executable, "-m", "nbconvert", "--execute", "--inplace",
                        f"notebooks/{NAME}.ipynb"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return ((ROOT / "notebooks" / f"{NAME}.ipynb").read_bytes(),
            (tmp_path / "notebooks" / f"{NAME}.ipynb").read_bytes())


def test_nbconvert_execute_inplace_with_the_project_config_changes_nothing(tmp_path):
    stored, after = _nbconvert(tmp_path, config=True)
    assert after == stored


def test_without_the_project_config_nbconvert_rewrites_the_notebook(tmp_path):
    stored, after = _nbconvert(tmp_path, config=False)
    assert after != stored and b'"iopub.execute_input"' in after


def test_make_nbconvert_execute_uses_the_project_config():
    p = subprocess.run(["make", "-n", "--no-print-directory", "nbconvert-execute", "NB=x.ipynb"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert f"JUPYTER_CONFIG_PATH={ROOT}/jupyter_config" in p.stdout
    assert "jupyter nbconvert --execute --inplace x.ipynb" in p.stdout
