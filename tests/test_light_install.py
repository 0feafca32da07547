"""The light install: `pip install funcbwd` brings torch and numpy only, and using the tool
imports nothing of the workbench (no notebooks, widgets, plots, Dask) and none of its upper layers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("plotly", "ipywidgets", "anywidget", "distributed", "dask", "nbformat")
UPPER = ("funcbwd_lab.views", "funcbwd_lab.studies", "funcbwd_lab.cli", "funcbwd.doctor")

PROBE = """
import json, sys
import torch, funcbwd
f = funcbwd.functionalized
def g(x):
    y = torch.zeros(x.shape)
    y[0] = x[0] * 2
    return y
torch.func.vmap(torch.func.jacrev(f(g)))(torch.randn(2, 3))
print(json.dumps(sorted(sys.modules)))
"""


def loaded(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT / "lib"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def offenders(modules: list[str]) -> list[str]:
    return [m for m in modules
            if m.split(".")[0] in HEAVY or m.startswith("jupyter")
            or any(m == u or m.startswith(u + ".") for u in UPPER)]


def test_using_the_tool_imports_nothing_heavy():
    assert offenders(loaded(PROBE)) == []


def test_the_check_can_fail():
    # Mutation: a probe that also imports a view module is caught.
    assert "funcbwd_lab.views" in offenders(loaded(PROBE.replace(
        "print(json", "import funcbwd_lab.views.readme\nprint(json")))


def test_core_dependencies_are_torch_and_numpy_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = sorted(d.split("=")[0].split(">")[0].split("<")[0] for d in project["dependencies"])
    assert names == ["numpy", "torch"]
    extras = project["optional-dependencies"]
    assert set(extras) == {"lab", "sweep", "test"}
    assert {"plotly", "ipywidgets", "anywidget", "jupyterlab"} <= {
        d.split(">")[0].split("=")[0] for d in extras["lab"]}
    assert {"distributed", "expecttest"} == {d.split(">")[0] for d in extras["sweep"]}


def test_dir_shows_public_names_only():
    import funcbwd

    names = dir(funcbwd)
    assert "functionalized" in names and "FunctionalizeFallbackWarning" in names
    assert not {"Any", "importlib", "annotations", "_importlib"} & set(names)
    assert all(not n.startswith("_") or n == "__version__" for n in names)
    assert issubclass(funcbwd.FunctionalizeFallbackWarning, UserWarning)
