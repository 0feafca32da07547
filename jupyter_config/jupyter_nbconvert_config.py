# `jupyter nbconvert --execute --inplace` (what many CI pipelines run) with this folder on
# JUPYTER_CONFIG_PATH (`make nbconvert-execute` puts it there) writes a notebook exactly as
# JupyterLab's run-all + save and tools/build_notebooks.py do, so git stays clean: consecutive
# stream outputs merged (a kernel splits its writes into messages by timing), numbers as
# JavaScript writes them back (`0`, not `0.0`), no widget state, no per-cell timing metadata,
# and kernels run with PYTHONHASHSEED=0 as the stored outputs were computed.
import os
import sys

from nbconvert.preprocessors import Preprocessor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import build_notebooks  # noqa: E402  (the repository's one definition of "as JupyterLab holds it")

os.environ.setdefault("PYTHONHASHSEED", "0")  # the kernel inherits it


class AsJupyterLabSaves(Preprocessor):
    """After execution: the notebook as JupyterLab holds it before saving
    (build_notebooks.as_jupyterlab_holds), without widget state."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)
        build_notebooks.as_jupyterlab_holds(nb)
        meta = resources.get("metadata", {})
        if meta.get("path") and meta.get("name"):  # --inplace: the file it overwrites
            path = os.path.join(meta["path"], meta["name"] + ".ipynb")
            build_notebooks.keep_stored_python_version(nb, build_notebooks.Path(path))
        return nb, resources


c.ExecutePreprocessor.store_widget_state = False
c.ExecutePreprocessor.record_timing = False
c.ExecutePreprocessor.timeout = build_notebooks.CELL_TIMEOUT
c.Exporter.preprocessors = [AsJupyterLabSaves]  # run after the execute preprocessor
