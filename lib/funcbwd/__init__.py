"""funcbwd: how should backward formulas that use in-place ops be functionalized so that
``vmap(vjp(f))`` works? A library and workbench that answers it with computed evidence.

Fix your own code (docs/your-code.md): :func:`vmap` (a drop-in for ``torch.func.vmap``) and
``with allow_inplace():`` (every vmap inside, also jacfwd/hessian's) run in-place code as written,
promoting a tensor made inside the function when a batched value is written into it;
:func:`functionalized` makes a function (or a
``torch.autograd.Function`` subclass) that writes in place work under ``vmap``/``vjp``/``jacrev``/
``jacfwd``/``hessian``; ``python -m funcbwd doctor MODULE:FUNC --args "..."`` says which in-place
call breaks which transform and whether the wrapper fixes it.

The public face for formula authors (docs/adding-a-formula.md):

* :class:`OpSpec`, :class:`Sample` and :func:`register`: one ``register(OpSpec(...))`` call adds
  an op to the matrix, traces, graphs, bench, report and CLI;
* :mod:`helpers` (:mod:`funcbwd.ops.helpers`): ``zeros_like_grad``, ``randn``, ``shape``,
  ``zero_if_none``, ``gather_tangent``, ``mask``;
* :func:`get_op`, :func:`op_names`; ``legacy.<op>(...)`` calls a registered op with its legacy
  formula as the backward; :func:`get_strategy`;
* the errors (:class:`FuncbwdError` and its kinds).

A module of your own registrations loads with ``python -m funcbwd --plugin MODULE`` or through the
entry-point group ``funcbwd.formulas`` (:mod:`funcbwd.ops.plugins`).

Importing ``funcbwd`` is cheap: the names above (all but the errors) are resolved on first use
(PEP 562), so ``python -m funcbwd --help`` does not import torch. The packages, bottom to top:
``fx``/``batching`` -> ``tool`` -> ``ops`` -> ``strategies`` -> ``run`` -> ``doctor`` -> ``observe``/
``measure`` -> ``studies`` -> ``views`` -> ``cli``.
"""

from __future__ import annotations

import importlib as _importlib

from funcbwd.errors import BadInputError, FuncbwdError, NotApplicableError, UnknownNameError

#: public name -> (module, attribute or None for the module itself), imported on first use
_LAZY = {
    "OpSpec": ("funcbwd.ops.registry", "OpSpec"),
    "Sample": ("funcbwd.ops.registry", "Sample"),
    "register": ("funcbwd.ops.registry", "register"),
    "get_op": ("funcbwd.ops.registry", "get_op"),
    "op_names": ("funcbwd.ops.registry", "op_names"),
    "helpers": ("funcbwd.ops.helpers", None),
    "legacy": ("funcbwd.ops.legacy_ops", None),
    "get_strategy": ("funcbwd.strategies", "get_strategy"),
    "functionalized": ("funcbwd.tool.functionalized", "functionalized"),
    "FunctionalizeFallbackWarning": ("funcbwd.tool.functionalized", "FunctionalizeFallbackWarning"),
    "vmap": ("funcbwd.tool.vmap", "vmap"),
    "allow_inplace": ("funcbwd.tool.vmap", "allow_inplace"),
}

__all__ = [*_LAZY, "FuncbwdError", "UnknownNameError", "BadInputError", "NotApplicableError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'funcbwd' has no attribute {name!r}")
    modname, attr = _LAZY[name]
    module = _importlib.import_module(modname)  # imports funcbwd.ops first: every built-in op registered
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    """The public names only (no imports, no ``annotations``)."""
    return sorted(set(__all__) | {"__version__"})
