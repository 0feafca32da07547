"""funcbwd: how should backward formulas that use in-place ops be functionalized so that
``vmap(vjp(f))`` works? A library and workbench that answers it with computed evidence.

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
``ops`` -> ``strategies`` -> ``run`` -> ``observe``/``measure`` -> ``views`` -> ``cli``.
"""

from __future__ import annotations

import importlib
from typing import Any

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
}

__all__ = [*_LAZY, "FuncbwdError", "UnknownNameError", "BadInputError", "NotApplicableError"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'funcbwd' has no attribute {name!r}")
    modname, attr = _LAZY[name]
    module = importlib.import_module(modname)  # imports funcbwd.ops first: every built-in op registered
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
