"""`make setup` installs the CPU build of torch on a real machine and still works offline.

The Makefile picks where torch comes from (``TORCH_INDEX=auto|cpu|default``; auto probes PyTorch's
CPU wheel index with a 5 s timeout). These tests drive its ``install-torch`` target with
``DRY=echo`` (print the pip command, run nothing) and replace the probe by ``true``/``false``, so
no test touches the network; ``make -n`` shows the setup recipe's order without running it.
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_pin() -> str:
    """The workbench's exact pin (its extras; the light install's dependencies give a range)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return next(d for d in extras["test"] if d.startswith("torch=="))


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("variables, source", [
    (["TORCH_INDEX=cpu"], "cpu"),
    (["TORCH_INDEX=default"], "default"),
    (["TORCH_INDEX=auto", "TORCH_PROBE=true"], "cpu"),  # the CPU index answered
    (["TORCH_INDEX=auto", "TORCH_PROBE=false"], "default"),  # it did not (offline, mirror only)
    (["TORCH_PROBE=false"], "default"),  # auto is the default
])
def test_install_torch_command(variables, source):
    done = make("install-torch", "DRY=echo", *variables)
    assert done.returncode == 0, done.stderr
    command = done.stdout.strip().splitlines()
    assert len(command) == 1, done.stdout
    words = command[0].split()
    assert words[1:5] == ["-m", "pip", "install", "--quiet"] and _torch_pin() in words, words
    if source == "cpu":
        assert words[-2:] == ["--index-url", CPU_INDEX], words
        assert "CPU build" in done.stderr
    else:
        assert "--index-url" not in words and "--extra-index-url" not in words, words
    if "TORCH_PROBE=false" in variables:
        assert "did not answer" in done.stderr  # the person is told why torch comes from PyPI


def test_bad_torch_index_is_refused():
    done = make("install-torch", "DRY=echo", "TORCH_INDEX=gpu")
    assert done.returncode != 0 and done.stdout == ""
    assert "TORCH_INDEX must be auto, cpu or default, not 'gpu'" in done.stderr


def test_the_probe_asks_the_cpu_index_with_a_short_timeout():
    """Read from ``make -n`` (which prints the recipe and runs nothing)."""
    done = make("-n", "install-torch")
    assert done.returncode == 0, done.stderr
    assert f"urlopen('{CPU_INDEX}/torch/', timeout=5)" in done.stdout


def test_setup_installs_torch_before_the_package(tmp_path):
    """In a fresh venv the setup recipe installs torch (from the chosen index) first, then the
    package and its extras, which then find torch==X satisfied by X+cpu."""
    done = make("-n", "setup", f"VENV={tmp_path / 'venv'}", "TORCH_INDEX=cpu")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    torch_at = text.index(f'pip install --quiet "{_torch_pin()}" --index-url {CPU_INDEX}')
    lock_at = text.index("pip install --quiet -r locks/workbench.txt")
    package_at = text.index("pip install --quiet --no-deps --no-build-isolation -e .")
    assert text.index("-m venv") < torch_at < lock_at < package_at
