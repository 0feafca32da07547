"""The mechanism behind :func:`funcbwd.vmap` and :func:`funcbwd.allow_inplace`: in-place code runs
as written, and a tensor made inside the function becomes batched the moment a batched value is
written into it (functorch#1025's option 2, "lazy" factories).

``vmap`` refuses ``unbatched.inplace_(batched)`` (pytorch#97248). Under :class:`InplaceMode` (a
``TorchFunctionMode``) every tensor an op makes inside the call is *fresh*: the mode remembers it,
and every view taken of it (op, arguments) in creation order. When an in-place op is about to
write a value batched at a vmap level its target lacks, the target's fresh base is *promoted*: its
contents are copied into zeros batched at every vmap level and wrapped at every grad/jvp level of
the current transforms (:func:`funcbwd.internals.zeros_at_every_level`), the base takes the new
contents in place (its Python identity kept, :func:`funcbwd.internals.swap_impl`) and each of its
views is re-derived from it. Then the op runs as written. Nothing else changes: a factory only read
stays unbatched (no copy, no memory), ``.item()`` of one that was never written still works.

What else the mode rewrites, each only where the code as written cannot run:

* ``unbind`` / ``split`` / ``chunk`` of a fresh tensor return ``select`` / ``narrow`` views (the same
  values; autograd refuses in-place writes into multi-output views once the base is promoted);
* ``t[mask] = v`` with a mask batched under vmap (vmap cannot batch the dynamic shape of
  ``t[mask]``) becomes ``t.copy_(where(mask, v, t))`` when ``v`` is a scalar, a 0-dim tensor or a
  selection ``x[mask]`` of the same mask carried through elementwise ops. ``x[mask]`` with a batched
  mask is carried densely (``where(mask, x, a selected element)``: the unselected places hold a
  value the code is valid on, so their zero gradient stays finite); any op other than an
  elementwise one on it raises :class:`InplaceModeError` (no silent wrong shape);
* custom ``torch.autograd.Function`` classes: old-style ones converted, every ``backward`` run
  under a mode of its own (:mod:`funcbwd.tool.oldstyle`).

What it cannot do: writes into tensors the caller owns (arguments not batched, closures, module
buffers) are left to torch (and refused under vmap, as before); aliases made outside Python
(``.data``, shared storage from C++) are not re-derived after a promotion; reading a value
(``.item()``, ``if t:``) of a batched tensor is impossible under vmap in any case.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals
from funcbwd.errors import FuncbwdError

__all__ = ["InplaceMode", "InplaceModeError"]


class InplaceModeError(FuncbwdError):
    """The in-place mode met code it cannot run (e.g. a batched-mask selection used by a reduction)."""


_IOPS = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
         "__imod__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__setitem__"}
#: elementwise ops a batched-mask selection ``x[mask]`` may flow through (dense, same mask)
_ELEMENTWISE = {
    "add", "sub", "mul", "div", "true_divide", "pow", "sqrt", "rsqrt", "exp", "log", "log1p",
    "expm1", "sin", "cos", "tan", "tanh", "sigmoid", "neg", "abs", "clamp", "clamp_min",
    "clamp_max", "square", "reciprocal", "erf", "atan", "asin", "acos", "sinh", "cosh", "log2",
    "log10", "exp2", "sign", "floor", "ceil", "round", "minimum", "maximum", "relu", "softplus",
    "float", "double", "to", "type_as", "detach", "clone", "contiguous", "where", "lerp",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__pow__", "__rpow__", "__neg__", "__abs__", "rsub",
}
#: attribute reads that do not depend on a selection's shape
_HARMLESS = {"dtype", "device", "requires_grad", "is_floating_point", "is_complex", "__get__",
             "grad_fn", "is_leaf", "layout", "__format__", "__repr__", "numel"}


def _name(func: Any) -> str:
    return getattr(func, "__name__", "") or ""


def _inplace(name: str) -> bool:
    return name in _IOPS or (name.endswith("_") and not name.startswith("_"))


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [a for a in internals.leaves(tree) if isinstance(a, torch.Tensor)]


class _Node:
    """A fresh tensor (``parent is None``) or a view of one, and how to re-derive the view."""

    __slots__ = ("ref", "parent", "derive", "views", "stale", "__weakref__")

    def __init__(self, t: torch.Tensor, parent: "_Node | None", derive) -> None:
        self.ref = weakref.ref(t)
        self.parent = parent
        self.derive = derive
        self.views: list[_Node] = []  # a root's views, all depths, creation order
        self.stale = False  # a view whose root was promoted since it was derived

    def root(self) -> "_Node":
        node = self
        while node.parent is not None:
            node = node.parent
        return node


class InplaceMode(TorchFunctionMode):
    """See the module docstring. One instance per call of the function it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[int, _Node] = {}
        self.selections: dict[int, tuple[weakref.ref, torch.Tensor]] = {}  # id(dense) -> mask
        self.promoted = 0

    # --- bookkeeping ---------------------------------------------------------------------------
    def _node(self, t: Any) -> _Node | None:
        if not isinstance(t, torch.Tensor):
            return None
        node = self.nodes.get(id(t))
        return node if node is not None and node.ref() is t else None

    def _remember(self, t: torch.Tensor, node: _Node) -> None:
        key = id(t)
        self.nodes[key] = node
        weakref.finalize(t, self.nodes.pop, key, None)

    def _selection(self, t: Any) -> torch.Tensor | None:
        if not isinstance(t, torch.Tensor):
            return None
        hit = self.selections.get(id(t))
        return hit[1] if hit is not None and hit[0]() is t else None

    def _select(self, dense: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        key = id(dense)
        self.selections[key] = (weakref.ref(dense), mask)
        weakref.finalize(dense, self.selections.pop, key, None)
        return dense

    # --- promotion ---------------------------------------------------------------------------
    def _promote(self, node: _Node) -> None:
        root = node.root()
        base = root.ref()
        new = internals.zeros_at_every_level(base.shape, base.dtype, base.device)
        new.copy_(base)  # keeps the old contents and their autograd history
        internals.swap_impl(base, new)
        for view in root.views:
            view.stale = True  # re-derived when next used (:meth:`_refresh`)
        self.promoted += 1

    def _refresh(self, node: _Node) -> None:
        """Re-derive a stale view from its (refreshed) parent, keeping its Python identity. Done
        when the view is next used, not at promotion: a view re-derived before another view's
        write would hold autograd's view of the base as it was then."""
        if node.parent.stale:
            self._refresh(node.parent)
        t, parent = node.ref(), node.parent.ref()
        node.stale = False
        if t is not None and parent is not None:
            internals.swap_impl(t, node.derive(parent))

    def _refresh_args(self, args: tuple, kwargs: dict) -> None:
        for a in _tensors((args, kwargs)):
            node = self._node(a)
            if node is not None and node.stale:
                self._refresh(node)

    def _maybe_promote(self, target: Any, others: list[torch.Tensor]) -> None:
        node = self._node(target)
        if node is None or not others:
            return
        have = internals.vmap_levels(target)
        need = set()
        for o in others:
            need |= internals.vmap_levels(o)
        if need - have:
            self._promote(node)
            self._refresh_args((target,), {})

    # --- the handler -------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if self.promoted:
            self._refresh_args(args, kwargs)
        if self.selections:
            selected = self._selected_call(func, name, args, kwargs)
            if selected is not None:
                return selected
        if name == "__setitem__":
            return self._setitem(func, *args)
        if name == "__getitem__":
            masked = self._masked_getitem(args[0], args[1])
            if masked is not None:
                return masked
        if _inplace(name) and args:
            self._maybe_promote(args[0], _tensors((args[1:], kwargs)))
        if name in ("unbind", "split", "chunk") and self._node(args[0]) is not None:
            return self._as_single_views(func, name, args, kwargs)
        out = func(*args, **kwargs)
        self._track(func, args, kwargs, out)
        return out

    def _track(self, func, args, kwargs, out) -> None:
        if not isinstance(out, torch.Tensor) or self._node(out) is not None:
            return
        first = args[0] if args else None
        parent = self._node(first)
        if parent is not None and out is not first and internals.alias_of(out, first):
            rest = args[1:]
            node = _Node(out, parent, lambda p, f=func, r=rest, k=kwargs: f(p, *r, **k))
            parent.root().views.append(node)
            self._remember(out, node)
            return
        if any(internals.alias_of(out, a) for a in _tensors((args, kwargs))):
            return  # a view of something the caller owns (or an in-place op's own result)
        self._remember(out, _Node(out, None, None))

    def _as_single_views(self, func, name, args, kwargs):
        t = args[0]
        pieces = func(*args, **kwargs)  # for the sizes only: the pieces themselves are dropped
        dim = kwargs.get("dim", args[2] if len(args) > 2 else 0)
        dim = dim % t.dim() if t.dim() else 0
        out, start = [], 0
        for i, p in enumerate(pieces):
            if name == "unbind":
                view = t.select(dim, i)
                derive = functools.partial(torch.select, dim=dim, index=i)
            else:
                n = p.shape[dim]
                view = t.narrow(dim, start, n)
                derive = functools.partial(torch.narrow, dim=dim, start=start, length=n)
                start += n
            node = _Node(view, self._node(t), lambda parent, d=derive: d(parent))
            node.parent.root().views.append(node)
            self._remember(view, node)
            out.append(view)
        return tuple(out)

    # --- boolean masks -----------------------------------------------------------------------
    @staticmethod
    def _bool_mask(index: Any) -> torch.Tensor | None:
        if isinstance(index, tuple) and len(index) == 1:
            index = index[0]
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            return index
        return None

    @staticmethod
    def _broadcast_mask(mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return mask.reshape(mask.shape + (1,) * (t.dim() - mask.dim()))

    def _masked_getitem(self, x: torch.Tensor, index: Any) -> torch.Tensor | None:
        mask = self._bool_mask(index)
        if mask is None or not internals.vmap_levels(mask):
            return None
        m = self._broadcast_mask(mask, x).expand(x.shape)
        first = m.reshape(-1).to(torch.int8).argmax()  # a selected element (0 if none)
        fill = x.reshape(-1).gather(0, first.reshape(1)).reshape(())
        return self._select(torch.where(m, x, fill), mask)

    def _selected_call(self, func, name, args, kwargs):
        flat = _tensors((args, kwargs))
        masks = [m for m in (self._selection(a) for a in flat) if m is not None]
        if not masks:
            return None
        if name == "__setitem__":
            return None
        if name in _HARMLESS:
            return func(*args, **kwargs)
        if name not in _ELEMENTWISE or any(m is not masks[0] for m in masks):
            raise InplaceModeError(
                f"x[mask] with a mask batched under vmap reached {name or func!r}: funcbwd carries "
                "such a selection only through elementwise ops into a write t[mask] = ...; compute "
                "on the whole tensor and use torch.where instead")
        out = func(*args, **kwargs)
        return self._select(out, masks[0]) if isinstance(out, torch.Tensor) else out

    def _setitem(self, func, t: torch.Tensor, index: Any, value: Any):
        mask = self._bool_mask(index)
        selection = self._selection(value)
        if mask is not None and (selection is not None or internals.vmap_levels(mask)):
            if selection is not None and selection is not mask:
                raise InplaceModeError("t[mask] = v with v selected by a different mask: funcbwd "
                                       "cannot align the two selections; use torch.where")
            if selection is None and isinstance(value, torch.Tensor) and value.dim() > 0:
                raise InplaceModeError("t[mask] = v with a mask batched under vmap and v neither a "
                                       "scalar nor x[mask]: the shape of t[mask] varies per batch "
                                       "entry; use torch.where")
            m = self._broadcast_mask(mask, t)
            new = torch.where(m, value, t)
            self._maybe_promote(t, _tensors((new,)))
            t.copy_(new)
            return None
        self._maybe_promote(t, _tensors((index, value)))
        return func(t, index, value)
