"""What the in-place mode (:mod:`funcbwd.tool.inplace`) reads from an op's name: does it write,
does it return its input unchanged, is it an op the mode only runs and tracks."""

from __future__ import annotations

_IOPS = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
         "__imod__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__setitem__"}
#: conversions that return their input when nothing changes (``self.cache = self.cache.to(x)``):
#: under a transform torch returns a wrapper of the caller's tensor, which stands for it
NO_OP_CONVERSIONS = {"to", "type", "type_as", "contiguous", "float", "double", "cpu"}

#: trailing-underscore methods that change no tensor data
_NOT_WRITES = {"requires_grad_", "retain_grad_", "share_memory_", "detach_", "set_", "resize_",
               "rename_", "refine_names_"}


def writes(name: str) -> bool:
    """True for an op that writes into its first argument (``add_``, ``+=``, ``t[i] = v``)."""
    return name in _IOPS or (name.endswith("_") and not name.startswith("_")
                             and name not in _NOT_WRITES)


#: the ops the handler does something special for, besides in-place ones
_SPECIAL = {"__get__", "__getitem__", "__setitem__", "unbind", "split", "chunk"}
_ORDINARY: dict[str, bool] = {}


def ordinary(name: str) -> bool:
    """True for an op the handler only runs and tracks (no write, no special rule)."""
    hit = _ORDINARY.get(name)
    if hit is None:
        hit = _ORDINARY[name] = not (writes(name) or name in _SPECIAL)
    return hit
