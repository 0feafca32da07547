# JupyterLab defaults for the workbench, owned by the project. `make lab` puts this folder on
# JUPYTER_CONFIG_PATH; binder/postBuild copies lab/settings/overrides.json into Binder's JupyterLab.
# Only defaults change: a person's own settings (~/.jupyter/lab/user-settings) still win.
import os

# lab/settings/overrides.json: no "get notified about official Jupyter news?" prompt, no update check.
c.LabApp.app_settings_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab", "settings")

# Kernels inherit the server's environment. String hashing fixed as in the stored notebooks
# (tools/build_notebooks.py executes them with PYTHONHASHSEED=0): set iteration orders, and so the
# outputs, are the same, and running a notebook and saving it rewrites nothing.
os.environ.setdefault("PYTHONHASHSEED", "0")
