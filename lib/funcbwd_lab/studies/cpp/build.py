"""The C++ extension: built on first use against the installed torch, cached under ``build/``.

:func:`load` is the one function that loads it (``torch.utils.cpp_extension.load`` of
``csrc/ops.cpp``, ``csrc/module.cpp`` and the generated ``traced_graphs.cpp``, ``-O2``). The build
directory is ``build/cpp/`` in the checkout (ignored by git); the extension's name carries a hash
of every source, the flags and the torch version, so an edit builds a new one and an unchanged
checkout loads the cached one in a second. ``traced_graphs.cpp`` is generated
(:mod:`funcbwd_lab.studies.cpp.generate`) and cached under a hash of the Python it is generated
from, so a warm load traces nothing either.

:func:`unavailable` says in one line why the extension cannot be built here (no C++ compiler, no
ninja, torch's or Python's headers missing), or None; the C++ strategies are then not applicable
with that line, and the tests skip with it. A compile error in our sources is not "unavailable":
it raises (:class:`BuildError`) with the compiler's first error.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any

from funcbwd.errors import FuncbwdError

HERE = Path(__file__).resolve().parent
CSRC = HERE / "csrc"
ROOT = HERE.parents[3]  # the checkout: lib/funcbwd_lab/studies/cpp -> .
BUILD = ROOT / "build" / "cpp"
SOURCES = ("ops.cpp", "module.cpp")
HEADERS = ("approaches.h", "functionalize.h", "legacy.h", "traced.h", "stub/nlohmann/json.hpp")
GENERATED = "traced_graphs.cpp"
CFLAGS = ("-O2",)
#: what the generated graphs depend on (hashed: a change regenerates them)
GENERATOR_INPUTS = ("lib/funcbwd/fx", "lib/funcbwd_lab/ops/discussion",
                    "lib/funcbwd_lab/strategies/traced.py", "lib/funcbwd_lab/studies/cpp/generate.py",
                    "lib/funcbwd_lab/studies/bench/inputs.py")
#: how long a cold build took on the machine that wrote docs/cpp.md (said up front, not a limit)
COLD_BUILD_HINT = "about 2 minutes on 2 cores"

_LOCK = threading.Lock()
_MODULE: Any = None


class BuildError(FuncbwdError):
    """The extension failed to compile or load (our sources, not the machine)."""


def unavailable() -> str | None:
    """Why the C++ extension cannot be built here (one line), or None if it can."""
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as e:  # pragma: no cover - the workbench always has torch
        return f"torch.utils.cpp_extension cannot be imported ({e})"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler: {cxx!r} is not on PATH (install g++ or set CXX)"
    if not cpp_extension.is_ninja_available():
        return "ninja is not available (torch.utils.cpp_extension builds with it)"
    header = Path(torch.__file__).parent / "include" / "ATen" / "functorch" / "DynamicLayer.h"
    if not header.exists():
        return f"torch's C++ headers are not installed (no {header.name} under torch/include)"
    py_h = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not py_h.exists():
        return f"Python's C headers are missing (no {py_h}; install the python3-dev package)"
    if not (ROOT / "lib").is_dir():
        return "not a funcbwd checkout: the extension is built under the checkout's build/"
    return None


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little") + p)
    return h.hexdigest()


def _files(rel: str) -> list[Path]:
    p = ROOT / rel
    return sorted(p.rglob("*.py")) if p.is_dir() else [p]


def generated_source(progress=None) -> Path:
    """``traced_graphs.cpp`` for the current Python (generated once per input hash)."""
    import torch

    key = _digest([torch.__version__.encode()] +
                  [f.read_bytes() for rel in GENERATOR_INPUTS for f in _files(rel)])[:16]
    out = BUILD / "generated" / key / GENERATED
    if not out.exists():
        from funcbwd_lab.studies.cpp import generate

        if progress:
            progress("tracing the formulas' graphs for the traced approach (seconds)")
        gen = generate.generate()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(gen.source)
        (out.parent / "graphs.json").write_text(json.dumps(
            {"graphs": gen.graphs, "skipped": gen.skipped}, indent=1, sort_keys=True))
        os.replace(tmp, out)
    return out


def graphs_info() -> dict[str, Any]:
    """What the generated file holds: signatures per formula, and the skipped ones with why."""
    return json.loads((generated_source().parent / "graphs.json").read_text())


def extension_name(generated: Path) -> str:
    import torch

    parts = [torch.__version__.encode(), " ".join(CFLAGS).encode(), generated.read_bytes()]
    parts += [(CSRC / f).read_bytes() for f in SOURCES + HEADERS]
    return "funcbwd_cpp_" + _digest(parts)[:12]


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()[:300]
    return (text.strip().splitlines() or ["(no output)"])[-1][:300]


def load(progress=None) -> Any:
    """The extension module (built on first use, then cached in this process and on disk).
    ``progress``: a callable taking a message (e.g. :class:`funcbwd_lab.progress.Progress`)."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    with _LOCK:
        if _MODULE is not None:
            return _MODULE
        reason = unavailable()
        if reason:
            raise BuildError(f"the C++ extension cannot be built here: {reason}")
        gen = generated_source(progress)
        name = extension_name(gen)
        directory = BUILD / name
        cold = not any(directory.glob("*.so"))
        if cold and progress:
            progress(f"building the C++ extension {name} ({COLD_BUILD_HINT} the first time; "
                     f"cached in {directory.relative_to(ROOT)})")
        directory.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        from torch.utils import cpp_extension

        try:
            module = cpp_extension.load(
                name=name, sources=[str(CSRC / s) for s in SOURCES] + [str(gen)],
                extra_include_paths=[str(CSRC), str(CSRC / "stub")], extra_cflags=list(CFLAGS),
                build_directory=str(directory), is_python_module=True, verbose=False)
        except Exception as e:  # noqa: BLE001 - the compiler's first error, not a traceback
            raise BuildError(f"building the C++ extension failed: {_first_error(str(e))}") from e
        if cold:
            (directory / "build-info.json").write_text(json.dumps(
                {"seconds": round(time.perf_counter() - t0, 1), "when": time.strftime("%Y-%m-%d"),
                 "cpu_count": os.cpu_count()}))
        _MODULE = module
        return module


def build_info() -> dict[str, Any] | None:
    """How long the loaded extension's cold build took (None: not built in this checkout yet)."""
    gen = generated_source()
    info = BUILD / extension_name(gen) / "build-info.json"
    return json.loads(info.read_text()) if info.exists() else None
