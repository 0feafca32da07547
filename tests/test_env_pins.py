"""The three ways to install the workbench (`make setup`, environment.yml for conda, binder/ for
repo2docker) install the same exact versions: the lock (locks/workbench.txt, `make lock`), which
must hold every requirement of pyproject.toml at a version its range allows; none may pull a CUDA
build of torch. A drift here is how a fresh machine or a Binder link silently starts running
versions the notebooks' stored outputs and the tests were never run with (issue 36: a jupytext
patch release turned `make test` red).

The slow test builds a fresh venv from binder/ the way repo2docker would and runs the overview
notebook in it (opt-in: ``pytest --run-slow -m slow tests/test_env_pins.py``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
TORCH = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Package names that mean a GPU build is being installed (pip wheels and conda packages).
CUDA_NAME = re.compile(r"^(nvidia-.*|pytorch-cuda|pytorch-gpu|cudatoolkit|cuda-.*|cudnn|nccl|triton)$")


# ------------------------------------------------------------------------------ parsing
def _by_name(lines: list[str], where: str) -> dict[str, Requirement]:
    out: dict[str, Requirement] = {}
    for line in lines:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name in out:
            raise AssertionError(f"{where}: {name} listed twice")
        out[name] = req
    return out


def requirements_file(text: str) -> tuple[dict[str, Requirement], list[str]]:
    """A pip requirements file: (requirements by name, option lines such as --extra-index-url)."""
    reqs, options = [], []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        (options if line.startswith("-") else reqs).append(line)
    return _by_name(reqs, "requirements"), options


def environment_yml(text: str) -> dict:
    """environment.yml as data (PyYAML when present; it comes with jupyter-events)."""
    try:
        import yaml
    except ImportError:  # the file uses a tiny YAML subset: read it by hand
        return _tiny_environment_yml(text)
    return yaml.safe_load(text)


def _tiny_environment_yml(text: str) -> dict:
    data: dict = {"dependencies": []}
    section, in_pip = None, False
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        item = line.strip()
        if indent == 0:
            key, _, value = item.partition(":")
            section, in_pip = key, False
            data[key] = value.strip() or []
        elif item == "- pip:":
            in_pip = True
            data[section].append({"pip": []})
        elif item.startswith("- "):
            value = item[2:].strip()
            if in_pip and indent > 4:
                data[section][-1]["pip"].append(value)
            else:
                in_pip = False
                data[section].append(value)
    return data


def split_environment(env: dict) -> tuple[list[str], dict[str, Requirement], list[str]]:
    """(conda packages, pip requirements by name, pip option lines)."""
    conda, pip_lines = [], []
    for dep in env.get("dependencies", []):
        if isinstance(dep, dict):
            pip_lines += dep.get("pip", [])
        else:
            conda.append(str(dep))
    reqs, options = requirements_file("\n".join(pip_lines))
    return conda, reqs, options


# ------------------------------------------------------------------------------ checks
def _exact_torch(req: Requirement) -> str | None:
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==":
        return specs[0].version
    return None


def cuda_problems(where: str, names: list[str]) -> list[str]:
    return [f"{where}: {n} is a CUDA package (this project runs CPU-only torch)"
            for n in names if CUDA_NAME.match(canonicalize_name(re.split(r"[=<>!~ ]", n)[0]))]


def torch_problems(where: str, reqs: dict[str, Requirement], options: list[str], *,
                   want_local: str | None) -> list[str]:
    """torch pinned exactly to TORCH, CPU-only: the CPU index is an extra index and the local
    label (when given) is +cpu, never +cuXXX."""
    problems = []
    req = reqs.get("torch")
    if req is None:
        return [f"{where}: torch is not listed"]
    pinned = _exact_torch(req)
    if pinned is None or Version(pinned).public != TORCH:
        problems.append(f"{where}: torch must be pinned exactly to =={TORCH}, found torch{req.specifier}")
    elif (Version(pinned).local or None) != want_local:
        problems.append(f"{where}: torch=={pinned}: expected local label {want_local!r} "
                        f"(a +cuXXX label or none on Linux means a CUDA build)")
    flat = [tok for opt in options for tok in shlex.split(opt)]
    if "--index-url" in flat or "-i" in flat:
        problems.append(f"{where}: replaces the main index (use --extra-index-url {CPU_INDEX})")
    if CPU_INDEX not in flat or flat[flat.index(CPU_INDEX) - 1] != "--extra-index-url":
        problems.append(f"{where}: needs '--extra-index-url {CPU_INDEX}' for the CPU torch build")
    return problems


def python_problems(where: str, version: str, requires_python: str) -> list[str]:
    if Version(version) not in SpecifierSet(requires_python):
        return [f"{where}: Python {version} does not satisfy requires-python {requires_python}"]
    return []


def _lock_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("lock", ROOT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _exactly(where: str, reqs: dict[str, Requirement], includes: list[str], want: list[str],
             wanted_reqs: set[str]) -> list[str]:
    problems = [f"{where}: {reqs[n]} is listed: every package but torch comes from the lock"
                for n in sorted(set(reqs) - wanted_reqs)]
    if includes != want:
        problems.append(f"{where}: expected {' then '.join(want)}, found {includes or 'nothing'}")
    return problems


def all_problems(root: Path = ROOT) -> list[str]:
    """Every way the install files disagree with pyproject.toml and the lock (empty when they
    agree): the lock has every requirement of pyproject.toml at a version its range allows;
    environment.yml and binder/ install torch (CPU) and then exactly the lock."""
    pyproject_text = (root / "pyproject.toml").read_text()
    requires_python = tomllib.loads(pyproject_text)["project"]["requires-python"]
    lock = _lock_module()
    problems = [f"locks/workbench.txt: {p}" for p in lock.problems(
        lock.read_lock(root / "locks" / "workbench.txt"), lock.requirements(root / "pyproject.toml"))]

    env = environment_yml((root / "environment.yml").read_text())
    conda, env_reqs, env_opts = split_environment(env)
    includes = [o for o in env_opts if o.startswith(("-e", "-r", "-c"))]
    env_opts = [o for o in env_opts if o not in includes]
    problems += torch_problems("environment.yml", env_reqs, env_opts, want_local=None)
    problems += cuda_problems("environment.yml", conda + list(env_reqs))
    problems += _exactly("environment.yml", env_reqs, includes,
                         ["-r locks/workbench.txt", "-e .[lab,sweep,test]"], {"torch"})
    for pkg in conda:
        name = re.split(r"[=<>!~ ]", pkg)[0]
        if name not in ("python", "pip"):
            problems.append(f"environment.yml: conda package {pkg!r}: only python and pip come "
                            "from conda, the rest from pip (the lock's versions)")
    pythons = [p.split("=", 1)[1] for p in conda if p.startswith("python=")]
    if not pythons:
        problems.append("environment.yml: no python=X.Y pin")
    else:
        problems += python_problems("environment.yml", pythons[0], requires_python)

    binder = root / "binder"
    bin_reqs, bin_opts = requirements_file((binder / "requirements.txt").read_text())
    includes = [o for o in bin_opts if o.startswith(("-e", "-r", "-c"))]
    bin_opts = [o for o in bin_opts if o not in includes]
    problems += torch_problems("binder/requirements.txt", bin_reqs, bin_opts, want_local="cpu")
    problems += cuda_problems("binder/requirements.txt", list(bin_reqs))
    problems += _exactly("binder/requirements.txt", bin_reqs, includes,
                         ["-r ../locks/workbench.txt"], {"torch"})
    if (binder / "environment.yml").exists():
        problems.append("binder/environment.yml exists: repo2docker would ignore requirements.txt")
    runtime = (binder / "runtime.txt").read_text().strip()
    if not runtime.startswith("python-"):
        problems.append(f"binder/runtime.txt: expected python-X.Y, found {runtime!r}")
    else:
        problems += python_problems("binder/runtime.txt", runtime[len("python-"):], requires_python)
    post = binder / "postBuild"
    post_lines = [ln.strip() for ln in post.read_text().splitlines() if not ln.lstrip().startswith("#")]
    if not any(re.fullmatch(r"(python -m )?pip install( --no-cache-dir)? --no-deps -e \.", ln)
               for ln in post_lines):
        problems.append("binder/postBuild: does not install the package ('pip install --no-deps -e .')")
    if not os.access(post, os.X_OK):
        problems.append("binder/postBuild: not executable (repo2docker requires chmod +x)")
    return problems


# ------------------------------------------------------------------------------ tests
def test_install_files_agree_with_pyproject():
    problems = all_problems()
    assert not problems, "install files drifted apart:\n  " + "\n  ".join(problems)


def _copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "binder").mkdir(parents=True)
    (root / "locks").mkdir()
    for rel in ("pyproject.toml", "environment.yml", "binder/requirements.txt",
                "binder/runtime.txt", "binder/postBuild", "locks/workbench.txt"):
        (root / rel).write_bytes((ROOT / rel).read_bytes())
    (root / "binder/postBuild").chmod(0o755)
    return root


@pytest.mark.parametrize("path, old, new, expect", [
    ("locks/workbench.txt", "\nplotly==", "\nplotly==6.0.0\n# was ", "plotly<8,>=7: the lock has plotly==6.0.0"),
    ("locks/workbench.txt", "\nnbval==", "\n# nbval==", "nbval<1,>=0.11 is not in the lock"),
    ("locks/workbench.txt", "\ntorch==2.13.0", "\ntorch==2.14.1", "the lock has torch==2.14.1"),
    ("locks/workbench.txt", "\nzipp==", "\nnvidia-cublas==13.4.1.3\nzipp==", "CUDA package"),
    ("pyproject.toml", '"hypothesis>=6,<7",', '"hypothesis>=6,<7",\n    "rich>=13",',
     "rich>=13 is not in the lock"),
    ("environment.yml", "      - -r locks/workbench.txt\n", "", "expected -r locks/workbench.txt"),
    ("environment.yml", "      - torch==2.13.0\n", "      - torch==2.13.0\n      - numpy>=2,<3\n",
     "numpy<3,>=2 is listed"),
    ("binder/requirements.txt", "-r ../locks/workbench.txt\n", "", "expected -r ../locks"),
    ("binder/requirements.txt", "torch==2.13.0+cpu", "torch==2.13.0", "expected local label 'cpu'"),
    ("binder/requirements.txt", "torch==2.13.0+cpu", "torch==2.12.0+cpu", "pinned exactly to ==2.13.0"),
    ("binder/requirements.txt", "torch==2.13.0+cpu", "torch==2.13.0+cu126", "expected local label 'cpu'"),
    ("binder/requirements.txt", "torch==2.13.0+cpu", "torch==2.13.0+cpu\nnvidia-cublas-cu12", "CUDA package"),
    ("binder/requirements.txt", "--extra-index-url", "--index-url", "replaces the main index"),
    ("environment.yml", "  - pip\n", "  - pip\n  - pytorch-cuda=12.4\n", "pytorch-cuda=12.4 is a CUDA"),
    ("environment.yml", "      - --extra-index-url https://download.pytorch.org/whl/cpu\n", "",
     "environment.yml: needs '--extra-index-url"),
    ("environment.yml", "python=3.11", "python=3.10", "does not satisfy requires-python"),
    ("binder/postBuild", "python -m pip install --no-cache-dir --no-deps -e .", "true",
     "does not install the package"),
])
def test_drift_is_detected(tmp_path, path, old, new, expect):
    """The checker itself: each kind of drift, applied to a copy, is reported."""
    root = _copy_tree(tmp_path)
    text = (root / path).read_text()
    assert old in text, f"test fixture out of date: {old!r} not in {path}"
    (root / path).write_text(text.replace(old, new, 1))
    problems = all_problems(root)
    assert any(expect in p for p in problems), problems


def test_tiny_yaml_reader_agrees_with_pyyaml():
    """The fallback reader (used when PyYAML is absent) reads environment.yml the same way."""
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "environment.yml").read_text()
    assert split_environment(_tiny_environment_yml(text)) == split_environment(yaml.safe_load(text))


def test_the_venv_is_the_lock():
    """What `make setup` installed is exactly the lock (skipped in `make test-newest`'s venv,
    which installs the newest versions the ranges allow on purpose)."""
    if os.environ.get("FUNCBWD_NEWEST"):
        pytest.skip("make test-newest: the newest versions, not the lock's")
    import sysconfig
    from importlib import metadata

    lock = _lock_module()
    want = lock.read_lock()
    # the venv's own packages (not copies vendored inside setuptools that may be on sys.path)
    site = sysconfig.get_paths()["purelib"]
    have = {lock.canonical(d.metadata["Name"]): d.version for d in metadata.distributions(path=[site])}
    wrong = [f"{n}: {have.get(n, 'missing')} installed, {v} locked" for n, v in sorted(want.items())
             if have.get(n, "missing").split("+")[0] != v]
    assert not wrong, "run `make setup` (the venv drifted from locks/workbench.txt):\n" + "\n".join(wrong)


# ------------------------------------------------------------------------------ slow
@pytest.mark.slow  # skipped unless pytest --run-slow (tests/conftest.py): a full pip install
def test_binder_requirements_run_overview_notebook(tmp_path):
    """Build a venv the way repo2docker does (requirements.txt, then postBuild from the repo
    root) and execute notebooks/00_overview.ipynb in it."""
    notebook = ROOT / "notebooks" / "00_overview.ipynb"
    if not notebook.exists():
        pytest.fail(f"{notebook} does not exist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_RETRIES": "1",
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("JUPYTER_PATH", None)
    env["JUPYTER_DATA_DIR"] = str(tmp_path / "jupyter-data")  # no user-level kernel specs
    run = dict(cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    try:
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"], **run)
        subprocess.run(["bash", "binder/postBuild"], **run)
        subprocess.run([str(py), "-m", "ipykernel", "install", "--prefix", str(venv),
                        "--name", "python3"], **run)
        specs = json.loads(subprocess.run([str(py), "-m", "jupyter", "kernelspec", "list", "--json"],
                                          **run).stdout)["kernelspecs"]
        assert Path(specs["python3"]["resource_dir"]).is_relative_to(venv), \
            f"the python3 kernel is not the fresh venv's: {specs['python3']['resource_dir']}"
        out = tmp_path / "executed.ipynb"
        subprocess.run([str(py), "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
                        "--ExecutePreprocessor.timeout=300",
                        "--ExecutePreprocessor.store_widget_state=False",
                        "--output", str(out), str(notebook)], **run)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"{' '.join(map(str, e.cmd))} failed ({e.returncode}):\n{e.stdout[-3000:]}\n"
                    f"{e.stderr[-3000:]}")
    torch_version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"],
                                   **run).stdout.strip()
    assert torch_version == f"{TORCH}+cpu"
    cells = json.loads(out.read_text())["cells"]
    errors = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
