"""Formulas from outside the library: a user's own module of ``register(OpSpec(...))`` calls.

Two ways in, both ending in an ordinary import of the user's module (whose top level registers):

* ``python -m funcbwd_lab --plugin MODULE ...`` (repeatable): :func:`load_modules` imports each named
  module before the command runs;
* an installed distribution declares its modules in the entry-point group
  ``funcbwd.formulas`` (``[project.entry-points."funcbwd.formulas"] mine = "mypkg.formulas"``; a
  ``module:function`` value names a function to call with no arguments instead).
  :func:`load_entry_points` imports them once, lazily, when the registry is first read
  (:func:`funcbwd_lab.ops.registry.get_op` and friends), so an installed plugin costs nothing until
  ops are used.

A plugin that cannot be imported, raises while registering, or registers a name that already
exists raises :class:`PluginError`: one line naming the module and what went wrong. An entry
point that failed keeps failing on every registry read (a half-loaded catalog would silently
change results); fix or uninstall it.

This module imports no other funcbwd module but :mod:`funcbwd.errors` (the registry imports it).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from types import ModuleType
from typing import Any, Iterable

from funcbwd.errors import BadInputError, FuncbwdError, first_line

#: the entry-point group installed distributions declare their formula modules in
ENTRY_POINT_GROUP = "funcbwd.formulas"


class PluginError(FuncbwdError):
    """A plugin module could not be imported or could not register its ops."""


def _failure(what: str, e: BaseException) -> PluginError:
    return PluginError(f"{what} failed to load: {type(e).__name__}: {first_line(str(e), 200)}")


def load_module(name: str) -> ModuleType:
    """Import the plugin module ``name`` (a dotted module name importable from ``sys.path``)."""
    if not isinstance(name, str) or not name.strip() or name.strip().endswith(".py"):
        raise BadInputError(f"--plugin takes an importable module name like mypkg.formulas, got "
                            f"{name!r} (put its directory on PYTHONPATH)")
    name = name.strip()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            path = os.environ.get("PYTHONPATH", "")
            raise PluginError(f"plugin module {name!r} not found: no module {e.name!r} on sys.path "
                              f"(PYTHONPATH={path!r}); put its directory on PYTHONPATH") from None
        raise _failure(f"plugin module {name!r}", e) from e
    except Exception as e:  # noqa: BLE001 - any failure of user code becomes one line naming it
        raise _failure(f"plugin module {name!r}", e) from e


def load_modules(names: Iterable[str]) -> list[ModuleType]:
    """Import each named plugin module in order (``--plugin``); an already imported one is not
    imported again."""
    return [load_module(n) for n in names]


_state: dict[str, Any] = {"started": False, "error": None, "loaded": []}


def load_entry_points() -> list[str]:
    """Import the ``funcbwd.formulas`` entry points, once; returns their names.

    Re-entrant: a plugin reading the registry while it loads sees the ops registered so far."""
    if _state["error"] is not None:
        raise _state["error"]
    if _state["started"]:
        return list(_state["loaded"])
    _state["started"] = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, ModuleType):
                obj()
        except Exception as e:  # noqa: BLE001 - any failure of user code becomes one line naming it
            _state["error"] = _failure(
                f"plugin {ep.value!r} (entry point {ep.name!r} in group {ENTRY_POINT_GROUP!r})", e)
            raise _state["error"] from e
        _state["loaded"].append(ep.name)
    return list(_state["loaded"])


__all__ = ["ENTRY_POINT_GROUP", "PluginError", "load_module", "load_modules", "load_entry_points"]
