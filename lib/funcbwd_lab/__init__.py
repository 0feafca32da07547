"""funcbwd_lab: how should backward formulas that use in-place ops be functionalized so
that ``vmap(vjp(f))`` works? The workbench that answers it with computed evidence, beside the tool
(:mod:`funcbwd`, whose public names are all it uses of it).

The public face for formula authors (docs/adding-a-formula.md):

* :class:`OpSpec`, :class:`Sample` and :func:`register`: one ``register(OpSpec(...))`` call adds
  an op to the matrix, traces, graphs, bench, report and CLI;
* :mod:`helpers` (:mod:`funcbwd_lab.ops.helpers`): ``zeros_like_grad``, ``randn``, ``shape``,
  ``zero_if_none``, ``gather_tangent``, ``mask``;
* :func:`get_op`, :func:`op_names`; ``legacy.<op>(...)`` calls a registered op with its legacy
  formula as the backward; :func:`get_strategy`.

A module of your own registrations loads with ``python -m funcbwd_lab --plugin MODULE`` or
through the entry-point group ``funcbwd.formulas`` (:mod:`funcbwd_lab.ops.plugins`).

Importing ``funcbwd_lab`` is cheap: the names above are resolved on first use (PEP 562), so
``python -m funcbwd_lab --help`` does not import torch. The packages, bottom to top:
``batching``/``fx`` -> ``ops`` -> ``strategies`` -> ``run`` -> ``studies`` -> ``views`` -> ``cli``.
"""

from __future__ import annotations

import importlib as _importlib

#: public name -> (module, attribute or None for the module itself), imported on first use
_LAZY = {
    "OpSpec": ("funcbwd_lab.ops.registry", "OpSpec"),
    "Sample": ("funcbwd_lab.ops.registry", "Sample"),
    "register": ("funcbwd_lab.ops.registry", "register"),
    "get_op": ("funcbwd_lab.ops.registry", "get_op"),
    "op_names": ("funcbwd_lab.ops.registry", "op_names"),
    "helpers": ("funcbwd_lab.ops.helpers", None),
    "legacy": ("funcbwd_lab.ops.legacy_ops", None),
    "get_strategy": ("funcbwd_lab.strategies", "get_strategy"),
}

__all__ = [*_LAZY]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'funcbwd_lab' has no attribute {name!r}")
    modname, attr = _LAZY[name]
    module = _importlib.import_module(modname)  # imports funcbwd_lab.ops first: every built-in op registered
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    """The public names only (no imports, no ``annotations``)."""
    return sorted(set(__all__) | {"__version__"})
