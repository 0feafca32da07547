"""Build and load the small PRs' kernels (``csrc/prs.cpp``) out of tree against the installed torch.

:func:`load` compiles the extension on first use with ``torch.utils.cpp_extension.load``
(``is_python_module=False``: the kernels are reached through the dispatcher as
``torch.ops.funcbwd_prs.*``), cached under ``build/torch_extensions/`` of the checkout (git
ignores ``build/``), so later calls and processes only load the shared library. About 10 s the
first time, well under one after. :func:`available` says in one line why it cannot (no C++
compiler, no ninja, a build error), and tests skip with that line.

:func:`kernels` installs the named kernels for a ``with`` block and removes them on exit (the
dispatcher then runs torch's own kernels again), so one process can measure with and without.

The torch wheel ships ``ATen/functorch``'s headers but not ``nlohmann/json.hpp``, which
``Interpreter.h`` includes for templates these kernels never instantiate; ``csrc/shim/`` holds an
empty stand-in for it, so functorch's plumbing headers (``DynamicLayer.h``, ``PlumbingHelper.h``)
compile here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator, Sequence

NAME = "funcbwd_prs"
CSRC = Path(__file__).with_name("csrc")
SOURCES = (CSRC / "prs.cpp",)


def build_dir() -> Path:
    """Where the build is cached: ``$TORCH_EXTENSIONS_DIR`` if set, else the checkout's
    ``build/torch_extensions`` (the package lives in ``lib/``, so its parent's parent)."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "build" / "torch_extensions"


def missing_tools() -> str:
    """'' when a C++ compiler and ninja are on PATH, else what is missing (one phrase)."""
    missing = [t for t in ("c++", "ninja") if shutil.which(t) is None
               and not (t == "c++" and shutil.which("g++"))]
    return ", ".join(missing)


@functools.lru_cache(maxsize=1)
def _load() -> str:
    """'' once the library is loaded, else the reason (one line)."""
    tools = missing_tools()
    if tools:
        return f"no C++ toolchain here ({tools} not found): the PR kernels cannot be built"
    import torch
    from torch.utils import cpp_extension

    out = build_dir()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(out))
    fresh = not any(out.glob(f"{NAME}/*.so"))
    if fresh:
        print(f"building {NAME} (C++, about 10-60 s, once; cached in {out})", file=sys.stderr,
              flush=True)
    try:
        cpp_extension.load(name=NAME, sources=[str(s) for s in SOURCES],
                           extra_include_paths=[str(CSRC / "shim")], extra_cflags=["-O2", "-fvisibility-inlines-hidden"],
                           build_directory=str(_own_dir(out)), is_python_module=False,
                           verbose=False)
    except Exception as e:  # noqa: BLE001 - a build error is the reason, in one line
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        first = next((ln for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
        return f"the PR kernels did not build: {first[:160]}"
    if not hasattr(torch.ops, NAME) or not hasattr(getattr(torch.ops, NAME), "install"):
        return f"the PR kernels built but torch.ops.{NAME} is missing"
    return ""


def _own_dir(root: Path) -> Path:
    d = root / NAME
    d.mkdir(parents=True, exist_ok=True)
    return d


def available() -> str:
    """'' when the kernels are loaded (building them on first use), else why not (one line)."""
    return _load()


def load() -> None:
    """Load the kernels (building them on first use); raise with the reason when impossible."""
    why = _load()
    if why:
        from funcbwd.errors import FuncbwdError

        raise FuncbwdError(why)


def ops():
    load()
    import torch

    return getattr(torch.ops, NAME)


def names() -> list[str]:
    """Every kernel the library can install."""
    return list(ops().kernels())


def installed() -> list[str]:
    return list(ops().installed())


@contextlib.contextmanager
def kernels(which: Sequence[str]) -> Iterator[list[str]]:
    """Install ``which`` (kernel names, :func:`names`) for the block; on exit the ones this
    block installed are removed (a kernel installed by an enclosing block stays)."""
    o = ops()
    added = list(o.install(list(which)))
    try:
        yield installed()
    finally:
        if added:
            o.uninstall(added)
