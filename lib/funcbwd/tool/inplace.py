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

What else the mode does, each only where the code as written cannot run:

* ``unbind`` / ``split`` / ``chunk`` of a fresh tensor return ``select`` / ``narrow`` views (the
  same values; autograd refuses in-place writes into multi-output views once the base is promoted);
* boolean-mask reads and writes with a per-sample mask as ``where`` (:mod:`funcbwd.tool.masks`);
* custom ``torch.autograd.Function`` classes: old-style ones converted, every ``forward`` and
  ``backward`` run under a mode of its own, fresh arguments promoted before the call
  (:mod:`funcbwd.tool.oldstyle`);
* ``op(..., out=t)`` runs out of place, then ``t.copy_``; ``.data`` under vmap is ``detach()``;
* with ``on_copy`` (a later retry stage of :func:`funcbwd.vmap`), every write into a fresh
  tensor goes into a copy that then takes the tensor's place: a value autograd saved is never
  overwritten (code autograd refuses as written then works);
* a tensor the caller owns (a closure, a module's buffer or cache) written with per-sample values
  is *borrowed*: promoted for the rest of the call and given back as it was when the call ends
  (:class:`BorrowedTensorWarning`, with the user's file:line); a write through ``.data`` or a view
  of such a tensor is refused (:class:`InplaceModeError`): the mode cannot batch what is behind it.

What it cannot do: aliases made outside Python (shared storage from C++) are not re-derived after
a promotion; reading a value (``.item()``, ``if t:``) of a batched tensor is impossible under vmap
in any case.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import traceback
import warnings
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals
from funcbwd.tool.masks import InplaceModeError, MaskRules, _name, _tensors
from funcbwd.tool.opnames import NO_OP_CONVERSIONS, ordinary, writes
from funcbwd.tool.replay import Plan

__all__ = ["InplaceMode", "InplaceModeError", "BorrowedTensorWarning", "current"]


_CURRENT: contextvars.ContextVar["InplaceMode | None"] = contextvars.ContextVar(
    "funcbwd_inplace_mode", default=None)


def current() -> "InplaceMode | None":
    """The innermost :class:`InplaceMode` active in this context, if any."""
    return _CURRENT.get()


@contextlib.contextmanager
def untracked() -> Any:
    """No :class:`InplaceMode` tracks what runs inside (a :class:`Replay` of a Function's call)."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class BorrowedTensorWarning(UserWarning):
    """In-place code wrote batched values into a tensor the caller owns (see InplaceMode)."""


def _user_line() -> str:
    for frame in reversed(traceback.extract_stack()[:-2]):
        if "/torch/" not in frame.filename and "/funcbwd/tool/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return "?"


class _Node:
    """A fresh tensor (``parent is None``) or a view of one, and how to re-derive the view.

    A view's node holds its parent tensor (``of``): a view made of a temporary view
    (``for o in t.permute(2, 0, 1)``) must be re-derived through it after the temporary's
    Python object is gone (holding it costs no memory: it shares the view's storage). A root
    holds its views weakly: they go when their tensors do."""

    __slots__ = ("ref", "parent", "of", "derive", "views", "stale", "born", "__weakref__")

    def __init__(self, t: torch.Tensor, parent: "_Node | None" = None, derive=None,
                 of: torch.Tensor | None = None, born: int = -1) -> None:
        self.ref = weakref.ref(t)
        self.born = born  # a root: the index of the op that made it (see InplaceMode.plan)
        self.parent = parent
        self.of = of
        self.derive = derive
        self.views: list[weakref.ref[_Node]] = []  # a root's views, all depths, creation order
        self.stale = False  # a view whose root was promoted since it was derived

    def root(self) -> "_Node":
        node = self
        while node.parent is not None:
            node = node.parent
        return node


def _forget(nodes: dict, key: int, ref: weakref.ref) -> None:
    """A tracked tensor is gone: drop its node (unless the id already names a newer tensor)."""
    node = nodes.get(key)
    if node is not None and node.ref is ref:
        del nodes[key]


class InplaceMode(MaskRules, TorchFunctionMode):
    """See the module docstring. One instance per call of the function it runs."""

    def __init__(self, isolated: bool = False, on_copy: bool = False,
                 dense_masks: bool = False) -> None:
        """``isolated``: refuse any in-place write into a tensor not made in the call (the
        per-sample loop's mode: one entry must not see another's writes). ``on_copy``: every
        write into a fresh tensor goes into a copy of it, which then takes the tensor's place
        (:meth:`_write_on_copy`). ``dense_masks``: every boolean mask index runs as ``where``,
        batched or not (the decorator's trace: ``x[mask]``'s shape cannot be traced)."""
        super().__init__()
        self.isolated = isolated
        self.on_copy = on_copy
        self.dense_masks = dense_masks
        self.nodes: dict[int, _Node] = {}
        self.selections: dict[int, tuple[weakref.ref, tuple]] = {}  # id(dense) -> (mask, rest)
        self.stale = 0  # views waiting to be re-derived after a promotion
        self.borrowed: list[tuple[torch.Tensor, torch.Tensor]] = []  # (caller's, its old contents)
        self.caller_aliases: dict[int, weakref.ref] = {}  # aliases of caller's tensors made here
        self.provenance: dict[int, tuple] = {}  # id(bool tensor) -> (ref, how it was computed)
        # what :meth:`plan` returns: every op's name, the ops whose outputs were promoted later,
        # the writes into tensors the caller owns; ``special``: anything else was done
        self.names: list[str] = []
        self.promoted_at: set[int] = set()
        self.borrowed_at: set[int] = set()
        self.special = isolated or on_copy

    def __enter__(self) -> "InplaceMode":
        self._token = _CURRENT.set(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            _CURRENT.reset(self._token)
            for t, old in reversed(self.borrowed):  # the caller's tensors as they were
                internals.swap_impl(t, old)
            self.borrowed.clear()

    def plan(self) -> "Plan | None":
        """What a later call of the same function on the same signature needs (:class:`Replay`),
        or None if this call needed more than promotions and borrowed tensors."""
        if self.special:
            return None
        return Plan(tuple(self.names), frozenset(self.promoted_at), frozenset(self.borrowed_at))

    # --- bookkeeping ---------------------------------------------------------------------------
    def _node(self, t: Any) -> _Node | None:
        if not isinstance(t, torch.Tensor):
            return None
        node = self.nodes.get(id(t))
        return node if node is not None and node.ref() is t else None

    def _remember(self, t: torch.Tensor, node: _Node) -> None:
        key = id(t)
        node.ref = weakref.ref(t, functools.partial(_forget, self.nodes, key))
        self.nodes[key] = node

    def _selection(self, t: Any) -> tuple | None:
        if not isinstance(t, torch.Tensor):
            return None
        hit = self.selections.get(id(t))
        return hit[1] if hit is not None and hit[0]() is t else None

    def _select(self, dense: torch.Tensor, found: tuple) -> torch.Tensor:
        self.special = True
        key = id(dense)
        self.selections[key] = (weakref.ref(dense), found)
        weakref.finalize(dense, self.selections.pop, key, None)
        return dense

    # --- promotion ---------------------------------------------------------------------------
    def _promote(self, node: _Node) -> None:
        root = node.root()
        self.promoted_at.add(root.born)
        base = root.ref()
        internals.swap_impl(base, internals.batched_copy(base))  # old contents, their history
        self._views_stale(root)

    def _view(self, out: torch.Tensor, of: torch.Tensor, derive) -> None:
        """Track ``out``, a view of the tracked ``of``, re-derived as ``derive(of)``."""
        parent = self._node(of)
        node = _Node(out, parent, derive, of)
        parent.root().views.append(weakref.ref(node))
        self._remember(out, node)

    def _views_stale(self, root: _Node) -> None:
        alive = []
        for ref in root.views:
            view = ref()
            if view is None:
                continue
            alive.append(ref)
            if not view.stale:
                view.stale = True  # re-derived when next used (:meth:`_refresh`)
                self.stale += 1
        root.views = alive

    def _refresh(self, node: _Node) -> None:
        """Re-derive a stale view from its (refreshed) parent, keeping its Python identity. Done
        when the view is next used, not at promotion: a view re-derived before another view's
        write would hold autograd's view of the base as it was then."""
        if node.parent.stale:
            self._refresh(node.parent)
        t = node.ref()
        node.stale = False
        self.stale -= 1
        if t is not None:
            internals.swap_impl(t, node.derive(node.of))

    def _refresh_args(self, args: tuple, kwargs: dict) -> None:
        for a in _tensors((args, kwargs)):
            node = self._node(a)
            if node is not None and node.stale:
                self._refresh(node)

    def _borrow(self, t: torch.Tensor) -> None:
        """Promote a tensor the caller owns (a closure, a module's buffer or cache) for the rest of
        the call, and give it back as it was when the call ends: each batch entry sees its own
        writes inside the call; after it, no one entry's value would be right."""
        self.borrowed_at.add(len(self.names) - 1)
        new = internals.batched_copy(t)
        internals.swap_impl(t, new)  # ``new`` now holds the caller's contents
        self.borrowed.append((t, new))
        warnings.warn(f"in-place write of per-sample values into a tensor the caller owns "
                      f"(shape {tuple(new.shape)}, at {_user_line()}): each batch entry sees its "
                      "own writes during the call; the tensor is restored when it ends",
                      BorrowedTensorWarning, stacklevel=2)

    def promote_arguments(self, args: tuple) -> None:
        """Before a custom Function runs: fresh arguments lacking a vmap level of another argument
        are promoted (its ``forward`` may write into them, where the mode cannot see): a
        replay promotes them when they are made (their ops are in :attr:`promoted_at`)."""
        tensors = _tensors(args)
        for t in tensors:
            if self._node(t) is not None:
                self._maybe_promote(t, [o for o in tensors if o is not t])

    def _maybe_promote(self, target: Any, others: list[torch.Tensor]) -> None:
        node = self._node(target)
        if node is None and isinstance(target, torch.Tensor) and others:
            have = internals.wrapper_levels(target)
            need = set()
            for o in others:
                need |= internals.wrapper_levels(o)
            if need - have and not any(t is target for t, _ in self.borrowed):
                alias = self.caller_aliases.get(id(target))
                if alias is not None and alias() is target:
                    raise InplaceModeError(
                        f"in-place write of per-sample values through a view or .data of a tensor "
                        f"the caller owns (at {_user_line()}): funcbwd cannot batch the tensor "
                        "behind it; write into the tensor itself, or return the new value")
                self._borrow(target)
            return
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
        self.names.append(name)
        if not (self.stale or self.selections) and ordinary(name) and "out" not in kwargs:
            out = func(*args, **kwargs)  # the common case: an op that writes nothing
            self._track(func, args, kwargs, out)
            if isinstance(out, torch.Tensor) and out.dtype == torch.bool:
                self._mask_provenance(name, args, kwargs, out)
            return out
        if name == "__get__":  # an attribute read (.shape, .dtype, .data, ...)
            if func.__self__ is torch.Tensor.data and internals.vmap_active():
                return self._data(args[0])  # torch refuses ``.data`` under vmap
            if not (self.selections or self.stale) or func.__self__ is not torch.Tensor.shape:
                return func(*args, **kwargs)
        if self.stale:
            self._refresh_args(args, kwargs)
        if self.selections:
            selected = self._selected_call(func, name, args, kwargs)
            if selected is not None:
                return selected
        if self.on_copy and (writes(name) and name != "__setitem__") and args:
            self._maybe_promote(args[0], _tensors((args[1:], kwargs)))
            if self._node(args[0]) is not None:
                return self._write_on_copy(func, args, kwargs)
        if name == "__setitem__":
            if self.on_copy and self._node(args[0]) is not None:
                func = functools.partial(self._setitem_on_copy, func)
            return self._setitem(func, *args)
        if name == "__getitem__":
            masked = self._masked_getitem(args[0], args[1])
            if masked is not None:
                return masked
        if self.isolated and (writes(name) or isinstance(kwargs.get("out"), torch.Tensor)):
            self._refuse_shared_write(args[0] if writes(name) else kwargs["out"])
        if writes(name) and args:
            self._maybe_promote(args[0], _tensors((args[1:], kwargs)))
        elif isinstance(kwargs.get("out"), torch.Tensor) and internals.vmap_active():
            return self._out(func, args, kwargs)
        if name in ("unbind", "split", "chunk") and self._node(args[0]) is not None:
            return self._as_single_views(func, name, args, kwargs)
        out = func(*args, **kwargs)
        self._track(func, args, kwargs, out)
        if isinstance(out, torch.Tensor) and out.dtype == torch.bool:
            self._mask_provenance(name, args, kwargs, out)
        return out

    # --- writes on copies (the ``on_copy`` stage) ---------------------------------------------
    def _write_on_copy(self, func, args: tuple, kwargs: dict) -> Any:
        """``func(t, ...)`` (an in-place op on a fresh ``t``) run on ``t``'s view of a copy of its
        base; the base then takes the copy's contents (:func:`funcbwd.internals.swap_impl`: its
        old contents stay with whatever autograd saved of them) and its views are re-derived when
        next used. What autograd refuses as written (a value it saved for the backward,
        overwritten later) then works: nothing it saved is ever written."""
        node = self._node(args[0])
        root = node.root()
        base = root.ref()
        copy = base.clone()
        chain = []
        while node.parent is not None:
            chain.append(node)
            node = node.parent
        target = copy
        for view in reversed(chain):
            target = view.derive(target)
        out = func(target, *args[1:], **kwargs)
        internals.swap_impl(base, copy)
        self._views_stale(root)
        return args[0] if out is target else out

    def _setitem_on_copy(self, setitem, t: torch.Tensor, index: Any, value: Any) -> None:
        self._write_on_copy(setitem, (t, index, value), {})

    def _out(self, func, args: tuple, kwargs: dict) -> torch.Tensor:
        """``op(..., out=t)`` under vmap (most ``.out`` overloads have no batching rule): the op
        out of place, then ``t.copy_`` of the result (``t`` promoted as any in-place target)."""
        self.special = True
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        result = func(*args, **rest)
        target = kwargs["out"]
        self._maybe_promote(target, [result])
        target.copy_(result)
        return target

    def _track(self, func, args, kwargs, out) -> None:
        if not isinstance(out, torch.Tensor) or self._node(out) is not None:
            return
        first = args[0] if args else None
        parent = self._node(first)
        dense = internals.dense(out)
        # only a view, ``detach`` or an op returning its input (a no-op ``.to``: under a transform
        # a new wrapper around the same tensor) aliases an input: one cheap test for the rest
        if dense._is_view() or _name(func) == "detach":
            def aliases(a: Any) -> bool:
                return internals.dense_alias_of(dense, a)
        else:
            def aliases(a: Any) -> bool:
                return isinstance(a, torch.Tensor) and internals.dense(a) is dense
        if parent is not None and out is not first and aliases(first):
            self._view(out, first, lambda p, f=func, r=args[1:], k=kwargs: f(p, *r, **k))
            return
        inputs = _tensors((args, kwargs))
        if any(out is a for a in inputs):
            return  # an in-place op's own result
        if any(aliases(a) for a in inputs):
            whole = _name(func) in NO_OP_CONVERSIONS and isinstance(
                first, torch.Tensor) and out.shape == first.shape
            if out is not first and not whole:  # a view of something the caller owns
                self.caller_aliases[id(out)] = weakref.ref(out)
            return
        self._remember(out, _Node(out, born=len(self.names) - 1))

    def _refuse_shared_write(self, target: Any) -> None:
        if isinstance(target, torch.Tensor) and self._node(target) is None:
            raise InplaceModeError(
                f"an in-place write into a tensor not made in the call (shape "
                f"{tuple(target.shape)}, at {_user_line()}): run once per batch entry, each entry "
                "would see the writes of the entries before it")

    def _data(self, t: torch.Tensor) -> torch.Tensor:
        """``t.data`` under vmap: ``t.detach()`` (the same storage, no autograd history), tracked
        as a view of ``t`` when ``t`` is fresh."""
        out = t.detach()  # a replay does the same (its base promoted when made: no view to redo)
        if self._node(t) is not None:
            self._view(out, t, torch.Tensor.detach)
        else:
            self.caller_aliases[id(out)] = weakref.ref(out)
        return out

    def _as_single_views(self, func, name, args, kwargs):
        self.special = True
        t = args[0]
        pieces = func(*args, **kwargs)  # for the sizes only: the pieces themselves are dropped
        at = 1 if name == "unbind" else 2  # unbind(t, dim), split(t, size, dim), chunk(t, n, dim)
        dim = kwargs.get("dim", args[at] if len(args) > at else 0)
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
            self._view(view, t, derive)
            out.append(view)
        return tuple(out)
