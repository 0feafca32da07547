"""The study's cases, one module per library (each a list ``CASES``), collected in :data:`CASES`.

A module imports its library only inside ``build`` (the registry loads without the libraries
installed; a test skips cleanly where one is absent). ``fn`` and ``module_fn`` make the common
shapes of case: a public function called on the arguments as they are, or a public module
constructed as its docs construct it and called.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import torch

from funcbwd_lab.studies.libraries.case import Built, LibCase

MODULES = ("torchvision", "kornia", "pyro", "opacus", "torchaudio", "e3nn", "nflows", "zuko",
           "torchdiffeq", "gpytorch", "timm", "einops", "transformers", "roma", "entmax")


def lib(name: str) -> Any:
    """The installed library's module (the environment activated first)."""
    from funcbwd_lab.studies.libraries import env

    env.activate()
    return importlib.import_module(name)


def fn(name: str, library: str, call: str, cite: str, get: Callable[[], Callable[..., Any]],
       args: Callable[[torch.Generator], tuple], **kw: Any) -> LibCase:
    """A public function: ``get()`` returns it (or a lambda calling it as ``call`` shows)."""
    return LibCase(name, library, call, cite, lambda: Built(get()), args, **kw)


def module_fn(name: str, library: str, call: str, cite: str, make: Callable[[], Any],
              args: Callable[[torch.Generator], tuple],
              call_with: Callable[[Any], Callable[..., Any]] | None = None, double: bool = True,
              **kw: Any) -> LibCase:
    """A public module: ``make()`` constructs it (seeded: every build has the same parameters);
    ``call_with(module)`` is how it is called (default: the module itself). A function-kind
    module is made float64 like its arguments unless ``double`` is False (a module whose float32
    constants ``.double()`` does not reach: its arguments are float32 then). Whole models too:
    their parameters and float inputs float64, so that a batched computation and the per-sample
    loop agree to roundoff (in float32, resnet18's per-sample gradients differ from the loop's by
    1.6e-4 and agree to 2e-14 in float64: a float32 check could not tell roundoff from a bug)."""
    if kw.get("kind") in ("model", "opacus"):
        kw.setdefault("batched", (0, 1))  # (input, target): both per sample
        if double:  # float64 like every case: roundoff far below any real difference
            made = args
            args = lambda g: tuple(a.double() if a.is_floating_point() else a  # noqa: E731
                                   for a in made(g))

    def build() -> Built:
        torch.manual_seed(0)
        m = make()
        if isinstance(m, torch.nn.Module) and double:
            m = m.double()  # the arguments are float64 (case.DTYPE)
        return Built(call_with(m) if call_with else m, m if isinstance(m, torch.nn.Module)
                     else None)
    return LibCase(name, library, call, cite, build, args, **kw)


def _collect() -> dict[str, LibCase]:
    out: dict[str, LibCase] = {}
    for m in MODULES:
        for c in importlib.import_module(f"{__name__}.{m}").CASES:
            if c.name in out:
                raise ValueError(f"case {c.name} defined twice")
            out[c.name] = c
    return out


CASES: dict[str, LibCase] = _collect()
