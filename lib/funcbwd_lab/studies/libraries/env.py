"""The study's own environment: real libraries at pinned versions, beside the workbench's venv.

``python -m funcbwd_lab.studies.libraries install`` (or ``make libraries``) runs
``pip install --target build/libraries --no-deps -r locks/libraries.txt`` (about 30 s from the
package index; ``build/`` is ignored by git), then removes torchaudio's compiled extensions:
PyPI's torchaudio wheel is a CUDA build whose ``.so`` files need ``libc10_cuda.so``, which the
CPU torch does not have; without them torchaudio uses its own pure-Python implementations (its
documented "no extension" path, e.g. ``lfilter``'s ``_lfilter_core_generic_loop``).

:func:`activate` makes the libraries importable in this process (``build/libraries`` first on
``sys.path``, as ``PYTHONPATH`` would) and defines the two operator schemas torchvision's
import registers fake kernels for (``torchvision::nms``, ``torchvision::qnms``): PyPI's
torchvision is a CUDA build too, its ``_C.so`` does not load, and everything else in it is
Python; with the schemas defined it imports (``nms`` itself then has no kernel: no case uses it).
The workbench's venv is never changed: the lock lists only what the venv does not already have.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
LOCK = ROOT / "locks" / "libraries.txt"
TARGET = ROOT / "build" / "libraries"
STAMP = TARGET / ".lock-sha256"
#: operator schemas torchvision's import needs defined (its C++ library would define them)
TORCHVISION_OPS = {
    "torchvision::nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "torchvision::qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


def pins(lock: Path = LOCK) -> dict[str, str]:
    """The lock's ``name==version`` lines, in order."""
    out = {}
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[name.strip()] = version.strip()
    return out


def lock_hash(lock: Path = LOCK) -> str:
    return hashlib.sha256(lock.read_bytes()).hexdigest()[:16]


def installed() -> bool:
    """True when ``build/libraries`` holds what the current lock pins."""
    return STAMP.exists() and STAMP.read_text().strip() == lock_hash()


def install(say=print) -> int:
    """Install the lock into ``build/libraries`` (replacing what was there); pip's exit code."""
    say(f"installing {len(pins())} packages from {LOCK.relative_to(ROOT)} into "
        f"{TARGET.relative_to(ROOT)} (about 30 s; the venv is not touched)")
    if TARGET.exists():
        shutil.rmtree(TARGET)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(TARGET),
           "--no-deps", "-r", str(LOCK)]
    rc = subprocess.call(cmd)
    if rc:
        return rc
    for so in (TARGET / "torchaudio" / "lib").glob("*.so"):
        so.unlink()  # CUDA builds: torchaudio falls back to its pure-Python implementations
    STAMP.write_text(lock_hash() + "\n")
    say(f"installed; use them with PYTHONPATH={TARGET.relative_to(ROOT)} "
        "(the study's commands do this themselves)")
    return 0


_ACTIVE = False


def activate() -> bool:
    """Make the installed libraries importable here (see the module docstring); False if they
    are not installed."""
    global _ACTIVE
    if _ACTIVE:
        return True
    if not TARGET.is_dir():
        return False
    import torch

    if str(TARGET) not in sys.path:
        sys.path.insert(0, str(TARGET))
    for name, schema in TORCHVISION_OPS.items():
        try:
            torch.library.define(name, schema)
        except RuntimeError:
            pass  # already defined (a real torchvision build, or an earlier call)
    _ACTIVE = True
    return True


def version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` under ``build/libraries``, or None."""
    if not TARGET.is_dir():
        return None
    for found in importlib.metadata.distributions(path=[str(TARGET)]):
        if found.metadata["Name"].lower().replace("_", "-") == dist.lower().replace("_", "-"):
            return found.version
    return None


def available(dist: str) -> bool:
    """The library is installed at the lock's version and importable here."""
    return activate() and version(dist) == pins().get(dist)


def skip_reason(dist: str) -> str:
    """One line for a test that needs ``dist``."""
    return (f"{dist} is not installed at the lock's version (make libraries, or "
            "python -m funcbwd_lab.studies.libraries install)")
