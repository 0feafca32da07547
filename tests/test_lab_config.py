"""Issue 31, item 5: `make lab` printed "Overriding existing pre_save_hook (_drop_plotly_snapshots)
with a new one (_drop_plotly_snapshots)" twice: the server applies jupyter_config/ to a contents
manager again (and jupytext derives a second one), setting the project's save hook over itself.
jupyter_config/ silences exactly that self-override; another hook replacing ours still warns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import warnings
from traitlets.config import PyFileConfigLoader
from jupyter_server.services.contents.filemanager import FileContentsManager

cfg = PyFileConfigLoader("jupyter_server_config.py", path=%r).load_config()
with warnings.catch_warnings(record=True) as caught:
    cm = FileContentsManager(config=cfg)
    cm.update_config(cfg)  # what the server does when an extension changes the config
    cm.pre_save_hook = cm.pre_save_hook  # and jupytext's derived manager, set once more
    ours = [str(w.message) for w in caught if "pre_save_hook" in str(w.message)]
    def other(model, **kwargs):
        pass
    cm.pre_save_hook = other
    theirs = [str(w.message) for w in caught if "pre_save_hook" in str(w.message)][len(ours):]
print(cm.pre_save_hook.__name__, len(ours), len(theirs))
"""


def test_the_save_hook_setting_itself_again_is_silent_and_another_hook_still_warns():
    p = subprocess.run([sys.executable, "-c", PROBE % str(ROOT / "jupyter_config")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["other", "0", "1"], (p.stdout, p.stderr)
