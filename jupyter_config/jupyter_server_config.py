# JupyterLab defaults for the workbench, owned by the project. `make lab` puts this folder on
# JUPYTER_CONFIG_PATH, and so does binder/start for every Binder session.
# Only defaults change: a person's own settings (~/.jupyter/lab/user-settings) still win.
import os

# lab/settings/overrides.json: no "get notified about official Jupyter news?" prompt, no update check.
c.LabApp.app_settings_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lab", "settings")

# Kernels inherit the server's environment. String hashing fixed as in the stored notebooks
# (tools/build_notebooks.py executes them with PYTHONHASHSEED=0): set iteration orders, and so the
# outputs, are the same, and running a notebook and saving it rewrites nothing.
os.environ.setdefault("PYTHONHASHSEED", "0")


def _drop_plotly_snapshots(model, path=None, contents_manager=None, **kwargs):
    """jupyterlab-plotly adds a PNG snapshot of each figure it draws to that figure's output (taken
    at the size it was drawn: it differs by screen, browser and which figures were scrolled to).
    The notebooks store each figure's JSON only, so the snapshot is dropped on save and running a
    notebook and saving it rewrites nothing (tests/test_browser_save.py). The kernel's Python patch
    version is kept as stored (:func:`_keep_stored_python_version`), for the same reason."""
    if model.get("type") != "notebook":
        return
    _keep_stored_python_version(model, path, contents_manager)
    for cell in model["content"].get("cells", []):
        for out in cell.get("outputs") or []:
            data = out.get("data") or {}
            if "application/vnd.plotly.v1+json" in data:
                data.pop("image/png", None)


def _keep_stored_python_version(model, path, contents_manager):
    """The Python patch version the kernel reports (``metadata.language_info.version``) set to
    what the file on disk stores: a machine with another 3.11 rewrites nothing when it runs and
    saves a notebook (tools/build_notebooks.py's keep_stored_python_version, for its builds)."""
    import json

    info = model["content"].get("metadata", {}).get("language_info")
    try:
        with open(contents_manager._get_os_path(path)) as f:
            stored = json.load(f).get("metadata", {}).get("language_info", {})
    except Exception:  # noqa: BLE001 - a new notebook, or no file manager: keep the kernel's
        return
    if info is not None and "version" in stored:
        info["version"] = stored["version"]


c.ContentsManager.pre_save_hook = _drop_plotly_snapshots
# The server applies this config to a contents manager again when an extension changes the config,
# and jupytext derives a second contents manager from it: each time the trait is set to the same
# hook, jupyter_server warns that the hook overrides itself ("Overriding existing pre_save_hook
# (_drop_plotly_snapshots) with a new one (_drop_plotly_snapshots)"), twice per `make lab`. That
# self-override only is silenced; replacing it by a different hook still warns.
import warnings  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning, message=(
    r"Overriding existing pre_save_hook \(_drop_plotly_snapshots\) with a new one "
    r"\(_drop_plotly_snapshots\)"))
