"""The README's first command, `make lab`, really starts JupyterLab on the workbench: started
headless here (no browser), its REST API queried for the overview notebook, then shut down."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.browser
def test_make_lab_serves_the_overview_notebook(tmp_path):
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg")}
    args = f"--no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} --IdentityProvider.token="
    proc = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, status = time.time() + 90, None
        while time.time() < deadline and proc.poll() is None:
            try:
                status = json.load(urllib.request.urlopen(f"{base}/api/status", timeout=2))
                break
            except OSError:
                time.sleep(0.5)
        assert status is not None, proc.stdout.read().decode()[-2000:] if proc.poll() is not None else "no answer"
        model = json.load(urllib.request.urlopen(f"{base}/api/contents/notebooks/00_overview.ipynb?content=0"))
        assert model["type"] == "notebook"
        lab = urllib.request.urlopen(f"{base}/lab/tree/notebooks/00_overview.ipynb").read().decode()
        assert "JupyterLab" in lab or "jupyter" in lab.lower()
    finally:
        try:
            urllib.request.urlopen(urllib.request.Request(f"{base}/api/shutdown", method="POST"), timeout=5)
            proc.wait(timeout=20)
        except Exception:  # noqa: BLE001
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
