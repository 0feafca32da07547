"""funcbwd: in-place code under ``torch.func`` transforms, as written.

``vmap`` refuses an in-place write of a per-sample value into a tensor that has none ("vmap:
inplace arithmetic ... is not possible", pytorch#97248), and ``torch.func.functionalize`` alone
leaves an ``aten.copy`` that has no derivative. The tool:

* :func:`vmap`, :func:`grad`, :func:`vjp`, :func:`jvp`, :func:`jacrev`, :func:`jacfwd`,
  :func:`hessian`: drop-ins for torch.func's, and ``with allow_inplace():`` (every torch.func
  transform in the block, also those libraries call): torch's transform first; only a call that
  raised an error in-place code causes is run again by funcbwd (docs/contract.md);
* :func:`functionalized`, a decorator: a function (or ``torch.autograd.Function``) that writes in
  place runs under every transform as a traced, functionalized, checked graph;
* ``python -m funcbwd doctor MODULE:FUNC --args "..."``: which in-place call breaks which
  transform, and whether the tool fixes it;
* the errors (:class:`FuncbwdError` and its kinds).

Importing ``funcbwd`` is cheap: the names above (all but the errors) are resolved on first use
(PEP 562). The workbench that studies how PyTorch itself should do this is a package beside it,
``funcbwd_lab``, which uses only the tool's public names.
"""

from __future__ import annotations

import importlib as _importlib

from funcbwd.errors import (BadInputError, FuncbwdError, InplaceModeError, NotApplicableError,
                            StateWriteError, UnknownNameError)

#: public name -> (module, attribute), imported on first use
_LAZY = {
    "vmap": ("funcbwd.transforms", "vmap"),
    "allow_inplace": ("funcbwd.transforms", "allow_inplace"),
    "grad": ("funcbwd.transforms", "grad"),
    "grad_and_value": ("funcbwd.transforms", "grad_and_value"),
    "vjp": ("funcbwd.transforms", "vjp"),
    "jvp": ("funcbwd.transforms", "jvp"),
    "jacrev": ("funcbwd.transforms", "jacrev"),
    "jacfwd": ("funcbwd.transforms", "jacfwd"),
    "hessian": ("funcbwd.transforms", "hessian"),
    "functionalized": ("funcbwd.decorator", "functionalized"),
    "inplace_mode": ("funcbwd.functions", "inplace_mode"),
    "FunctionalizeFallbackWarning": ("funcbwd.decorator", "FunctionalizeFallbackWarning"),
    "PerSampleLoopWarning": ("funcbwd.ladder", "PerSampleLoopWarning"),
}

__all__ = [*_LAZY, "FuncbwdError", "UnknownNameError", "BadInputError", "NotApplicableError",
           "InplaceModeError", "StateWriteError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'funcbwd' has no attribute {name!r}")
    modname, attr = _LAZY[name]
    value = getattr(_importlib.import_module(modname), attr)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    """The public names only (no imports, no ``annotations``)."""
    return sorted(set(__all__) | {"__version__"})
