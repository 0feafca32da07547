"""Boolean-mask reads and writes: the mask rules of :class:`funcbwd.inplace.InplaceMode`.

``t[mask] = v`` with a mask batched under vmap (vmap cannot batch the dynamic shape of
``t[mask]``) becomes ``t.copy_(where(mask, v, t))`` when ``v`` is a scalar, a 0-dim tensor or a
selection ``x[mask]`` of the same mask carried through elementwise ops. ``x[mask]`` with a batched
mask is carried densely (``where(mask, x, a selected element)``: the unselected places hold a value
the code is valid on, so their zero gradient stays finite); any op other than an elementwise one on
it raises :class:`InplaceModeError` (no silent wrong shape). ``mask, *rest`` indices with basic
``rest`` (ints, slices) address the region ``t[:, ..., rest]`` with the mask's dims kept whole. Two
masks are the same selection when they are the same tensor or were computed the same way from the
same tensors (``~m`` written twice).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from funcbwd import internals
from funcbwd.errors import InplaceModeError


def tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in ``tree``: a fast path for the flat tuples, lists and dicts ops take."""
    out: list[torch.Tensor] = []
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (tuple, list)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())
    return out


#: elementwise ops a batched-mask selection ``x[mask]`` may flow through (dense, same mask)
_ELEMENTWISE = {
    "add", "sub", "mul", "div", "true_divide", "pow", "sqrt", "rsqrt", "exp", "log", "log1p",
    "expm1", "sin", "cos", "tan", "tanh", "sigmoid", "neg", "abs", "clamp", "clamp_min",
    "clamp_max", "square", "reciprocal", "erf", "atan", "asin", "acos", "sinh", "cosh", "log2",
    "log10", "exp2", "sign", "floor", "ceil", "round", "minimum", "maximum", "relu", "softplus",
    "float", "double", "to", "type_as", "detach", "clone", "contiguous", "where", "lerp",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__pow__", "__rpow__", "__neg__", "__abs__", "rsub", "sinc", "atan2",
    "hypot", "xlogy", "logaddexp", "frac", "trunc", "fmod", "remainder", "digamma", "lgamma",
    "erfc", "erfinv", "logit", "nan_to_num", "addcmul", "addcdiv", "__mod__", "__floordiv__",
    "floor_divide", "copysign", "cosh", "asinh", "acosh", "atanh", "silu", "gelu", "elu",
}

#: attribute reads that do not depend on a selection's shape
_HARMLESS = {"dtype", "device", "requires_grad", "is_floating_point", "is_complex", "__get__",
             "grad_fn", "is_leaf", "layout", "__format__", "__repr__", "numel"}


def _error(message: str) -> Exception:
    return InplaceModeError(message)


def remember_provenance(mode, name: str, args: tuple, kwargs: dict, out: torch.Tensor) -> None:
    """Remember how a boolean tensor was computed, so that ``~m`` computed twice selects the
    same places (:func:`_same`)."""
    parts = tuple((mask_key(mode, a) if isinstance(a, torch.Tensor) else a)
                  for a in (*args, *sorted(kwargs.items())))
    key = id(out)
    mode.provenance[key] = (weakref.ref(out), (name, parts), args)  # args kept alive
    weakref.finalize(out, mode.provenance.pop, key, None)


def mask_key(mode, m: torch.Tensor) -> Any:
    hit = mode.provenance.get(id(m))
    return hit[1] if hit is not None and hit[0]() is m else id(m)


def _bool_mask(index: Any) -> tuple[torch.Tensor, tuple] | None:
    """``(mask, rest)`` for an index ``mask`` or ``(mask, *rest)`` with a bool tensor first and
    only basic indices (ints, slices) after it; None for any other index."""
    parts = index if isinstance(index, tuple) else (index,)
    if not parts or not (isinstance(parts[0], torch.Tensor) and parts[0].dtype == torch.bool):
        return None
    rest = parts[1:]
    if not all(isinstance(r, (int, slice)) for r in rest):
        return None
    return parts[0], rest


def _region(t: torch.Tensor, mask: torch.Tensor, rest: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """The view of ``t`` the masked index addresses (mask dims kept whole) and the mask shaped
    to broadcast over it."""
    view = t[(slice(None),) * mask.dim() + rest] if rest else t
    return view, mask.reshape(mask.shape + (1,) * (view.dim() - mask.dim()))


def masked_getitem(mode, x: torch.Tensor, index: Any) -> torch.Tensor | None:
    """``x[mask]`` with a batched mask (or any mask under ``dense_masks``), carried densely; None
    for any other index."""
    found = _bool_mask(index)
    if found is None or not (mode.dense_masks or internals.vmap_levels(found[0])):
        return None
    view, m = _region(x, *found)
    m = m.expand(view.shape)
    first = m.reshape(-1).to(torch.int8).argmax()  # a selected element (0 if none)
    # the unselected places never reach an output (a write t[mask] = ... drops them): detached,
    # so no backward saves x, which the code may write next
    fill = view.detach().reshape(-1).gather(0, first.reshape(1)).reshape(())
    return mode.select(torch.where(m, view, fill), found)


def _same(mode, a: tuple, b: tuple) -> bool:
    return (a[0] is b[0] or mask_key(mode, a[0]) == mask_key(mode, b[0])) and a[1] == b[1]


def selected_call(mode, func, name: str, args: tuple, kwargs: dict):
    """An op on a carried selection ``x[mask]``: elementwise ones carry it on; anything else is
    refused (no silent wrong shape). None when no argument is a selection."""
    flat = tensors((args, kwargs))
    keys = [k for k in (mode.selection(a) for a in flat) if k is not None]
    if not keys or name == "__setitem__":
        return None
    if name in _HARMLESS:
        return func(*args, **kwargs)
    base = name[3:-2] if name.startswith("__i") and name.endswith("__") else name.rstrip("_")
    if (base not in _ELEMENTWISE and f"__{base}__" not in _ELEMENTWISE) or not all(
            _same(mode, k, keys[0]) for k in keys):
        raise _error(
            f"x[mask] with a mask batched under vmap reached {name or func!r}: funcbwd carries "
            "such a selection only through elementwise ops into a write t[mask] = ...; compute "
            "on the whole tensor and use torch.where instead")
    out = func(*args, **kwargs)
    return mode.select(out, keys[0]) if isinstance(out, torch.Tensor) else out


def setitem(mode, t: torch.Tensor, index: Any, value: Any):
    """``t[mask] = v`` with a batched mask (or any mask under ``dense_masks``) as
    ``t.copy_(where(mask, v, t))``: True when done; None for any other index."""
    found = _bool_mask(index)
    selection = mode.selection(value)
    if found is None or not (selection is not None or mode.dense_masks
                             or internals.vmap_levels(found[0])):
        return None
    if selection is not None and not _same(mode, selection, found):
        raise _error("t[mask] = v with v selected by a different mask: funcbwd cannot align the "
                     "two selections; use torch.where")
    if selection is None and isinstance(value, torch.Tensor) and value.dim() > 0:
        raise _error("t[mask] = v with a mask batched under vmap and v neither a scalar nor "
                     "x[mask]: the shape of t[mask] varies per batch entry; use torch.where")
    mode.special = True  # no plan replays this (see InplaceMode.plan)
    mode.before_write(t, tensors((found[0], value)))
    view, m = _region(t, *found)
    view.copy_(torch.where(m, value, view))
    return True
