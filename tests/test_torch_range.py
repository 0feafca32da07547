"""Issue 31, item 8: the light install (`pip install funcbwd`) accepts a range of torch releases,
so it does not replace a user's torch; the workbench keeps its exact pin (its extras, what the
Makefile installs) because its saved data were computed with it; `make test-newest` runs the
suite on the newest versions the ranges allow (torch included), in a venv of its own."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _torch(lines: list[str]) -> Requirement:
    return next(Requirement(d) for d in lines if Requirement(d).name == "torch")


def test_the_light_install_accepts_a_range_of_torch_releases():
    spec = _torch(PROJECT["dependencies"]).specifier
    for ok in ("2.13.0", "2.13.0+cpu", "2.14.1", "2.15.0"):
        assert spec.contains(Version(ok), prereleases=False), ok
    for no in ("2.12.1", "2.16.0"):
        assert not spec.contains(Version(no)), no


def test_the_workbench_extras_pin_torch_exactly_inside_the_range():
    core = _torch(PROJECT["dependencies"]).specifier
    for extra in ("lab", "test"):
        req = _torch(PROJECT["optional-dependencies"][extra])
        assert str(req.specifier) == "==2.13.0", (extra, req)
        assert Version("2.13.0") in core


def _make(*args: str) -> str:
    done = subprocess.run(["make", "-s", "--no-print-directory", *args, "DRY=echo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_installs_the_exact_pin():
    out = _make("install-torch", "TORCH_INDEX=default")
    assert out.split() == [".venv/bin/python", "-m", "pip", "install", "--quiet", "torch==2.13.0"]


def test_make_test_newest_uses_a_venv_of_its_own_and_the_ranges():
    lines = _make("test-newest").splitlines()
    assert lines[2].endswith("-m venv .venv-newest")
    newest = next(line for line in lines if "tools/lock.py newest" in line)
    install = next(line for line in lines if "-r .venv-newest/newest.txt" in line)
    assert "--upgrade" in install and "PIP_CONSTRAINT=/dev/null" in install
    assert any(line.endswith("pip install --quiet --no-deps --no-build-isolation -e .")
               for line in lines)
    tests = lines[-1].split()
    assert tests[:6] == ["env", "FUNCBWD_NEWEST=1", ".venv-newest/bin/python", "-m", "pytest", "-q"]
    assert tests[6:8] == ["tests", "notebooks"]
    assert ".venv-newest/" in (ROOT / ".gitignore").read_text()


def test_the_newest_requirements_take_torch_by_its_range():
    out = subprocess.run(["python3", "tools/lock.py", "newest"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert "torch>=2.13,<2.16" in out and "torch==2.13.0" not in out
    assert any(line.startswith("jupytext>=") for line in out)
