"""The in-place mode: in-place code runs as written under torch.func, a tensor made inside the
function becoming batched the moment a batched value is written into it (functorch#1025's
option 2, "lazy" factories).

``vmap`` refuses ``unbatched.inplace_(batched)`` (pytorch#97248). Under :class:`InplaceMode` (a
``TorchFunctionMode``) every tensor an op makes inside the call is *fresh*: the mode remembers it,
and every view taken of it (op, arguments) in creation order. When an in-place op is about to
write a value batched at a vmap level its target lacks, the target's fresh base is *promoted*: its
contents are copied into zeros batched at every vmap level and wrapped at every grad/jvp level of
the current transforms (:func:`funcbwd.internals.zeros_at_every_level`), the base takes the new
contents in place (its Python identity kept, :func:`funcbwd.internals.swap_impl`) and each of its
views is re-derived from it when next used. Then the op runs as written. A factory only read stays
unbatched (no copy, no memory).

Each op goes to one rule, by its kind (:mod:`funcbwd.rules`, a table): ``ordinary`` ops run
and their outputs are tracked; ``write`` (``add_``, ``+=``, ``copy_``) first promotes or checks its
target; ``setitem``/``getitem`` add the boolean-mask rules of :mod:`funcbwd.masks`; ``split``
(``unbind``/``split``/``chunk`` of a fresh tensor) returns ``select``/``narrow`` views (autograd
refuses writes into multi-output views once the base is promoted); ``out`` (``op(..., out=t)``)
runs out of place, then ``t.copy_``; ``attribute`` reads run as they are, except ``.data`` under
vmap (torch refuses it), which is ``detach()``; ``batch_norm`` with running statistics follows the
state policy below.

**Tensors the caller owns** (not made in the call: a closure, a module's buffer, an unbatched
argument) are the caller's. Every write into one is saved first in the call's
:class:`~funcbwd.journal.Journal` (all or none, once). Under a vmap of samples, a write into one
that lacks the samples' level is *shared* by every batch entry, where a per-sample loop would run
it once per entry in turn, each entry seeing the ones before; no batched run gives that answer.
By the caller's ``state_writes`` (:data:`funcbwd.scope.STATE_WRITES`): ``"refuse"`` (the default)
raises :class:`StateWriteError` naming the line before the write happens; ``"loop"`` runs the call
as the per-sample loop instead; ``"discard"`` lets each entry see its own writes during the call
and gives the tensor back as it was when the call ends (``torch.func.replace_all_batch_norm_modules_``'s
semantics for running statistics). Without vmap (``grad``, ``vjp``, ``jacrev``), a write into a
caller's tensor of a value its transforms track (torch: "would mutate a captured Tensor") lifts the
tensor to those transforms for the call and writes its final value back when the call succeeds.

With ``watch`` (the plain attempt's mode: nothing is changed, no promotion, no rule but the
caller's state) the same checks run on code torch's own vmap might run as it is; with ``on_copy``
(a later retry stage), every write into a fresh tensor goes into a copy of it that then takes the
tensor's place: a value autograd saved is never overwritten.

What it cannot do: aliases made outside Python (shared storage from C++) are not re-derived after
a promotion; reading a value (``.item()``, ``if t:``) of a batched tensor is impossible under vmap.
"""

from __future__ import annotations

import contextlib
import functools
import types
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals, masks, rules, scope
from funcbwd.errors import (InplaceModeError, LoopInstead, NeedsMode, StateWriteError,
                            TransformRefusedError, user_line)
from funcbwd.journal import Journal
from funcbwd.replay import Plan

__all__ = ["InplaceMode", "user_line", "outputs_refreshed"]


_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction
_C_FUNCTIONS = (types.BuiltinFunctionType, types.MethodDescriptorType,
                types.WrapperDescriptorType, types.MethodWrapperType, types.BuiltinMethodType)


def _name(func: Any) -> str:
    return getattr(func, "__name__", "") or ""


class _Node:
    """A fresh tensor (``parent is None``) or a view of one, and how to re-derive the view. A
    view's node holds its parent tensor (``of``): a view of a temporary view must be re-derived
    through it after the temporary is gone. A root holds its views weakly."""

    __slots__ = ("ref", "parent", "of", "derive", "views", "stale", "born", "__weakref__")

    def __init__(self, t: torch.Tensor, parent: "_Node | None" = None, derive=None,
                 of: torch.Tensor | None = None, born: int = -1) -> None:
        self.ref = weakref.ref(t)
        self.born = born  # a root: the index of the op that made it (see InplaceMode.plan)
        self.parent = parent
        self.of = of
        self.derive = derive
        self.views: list[weakref.ref[_Node]] = []
        self.stale = False  # a view whose root was promoted since it was derived

    def root(self) -> "_Node":
        node = self
        while node.parent is not None:
            node = node.parent
        return node


def _forget(nodes: dict, key: int, ref: weakref.ref) -> None:
    node = nodes.get(key)
    if node is not None and node.ref is ref:
        del nodes[key]


class InplaceMode(TorchFunctionMode):
    """See the module docstring. One instance per attempt of one call."""

    def __init__(self, *, watch: bool = False, on_copy: bool = False,
                 dense_masks: bool = False, journal: Journal | None = None) -> None:
        super().__init__()
        self.watch, self.on_copy, self.dense_masks = watch, on_copy, dense_masks
        self.journal = journal if journal is not None else Journal()
        self.policy = scope.current().state_writes
        self.nodes: dict[int, _Node] = {}
        self.selections: dict[int, tuple[weakref.ref, tuple]] = {}  # id(dense) -> (mask, rest)
        self.stale = 0  # views waiting to be re-derived after a promotion
        self.caller_aliases: dict[int, weakref.ref] = {}  # views of the caller's tensors
        self.provenance: dict[int, tuple] = {}  # id(bool tensor) -> how it was computed
        # what :meth:`plan` returns; ``special``: the call needed more than the plan replays
        self.names: list[str] = []
        self.promoted_at: set[int] = set()
        self.saved_at: set[int] = set()
        self.special = on_copy or watch
        self._scope = None

    def __enter__(self) -> "InplaceMode":
        self._scope = scope.entered(mode=self)
        self._scope.__enter__()
        try:
            return super().__enter__()
        except BaseException:
            self._scope.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._scope.__exit__(*exc)
            if exc[0] is None:  # what may outlive the call (funcbwd.journal.outliving)
                self.journal.made += [(n.ref, n) for n in list(self.nodes.values())]

    @property
    def samples(self) -> frozenset:
        """The vmap levels of samples active now (:attr:`funcbwd.scope.Scope.samples`)."""
        return scope.current().samples

    def plan(self) -> Plan | None:
        """What a later call on the same signature needs (:class:`funcbwd.replay.Replay`), or
        None if this call needed more than promotions and saved writes."""
        if self.special or self.journal.has_stand_ins():
            return None
        return Plan(tuple(self.names), frozenset(self.promoted_at), frozenset(self.saved_at))

    # --- the handler: one rule per kind of op ------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        self.names.append(name)
        k = rules.kind(name, kwargs)
        # every C op this mode runs (the user's, its bookkeeping's) with torch function handling
        # off: an outer mode (an outer call's watch) never sees what this one does; an op written
        # in Python may run user code (autograd.grad runs a custom Function's backward,
        # ``custom_function_call`` its forward) and keeps it on
        try:
            return self._dispatch(func, name, k, args, kwargs)
        except RuntimeError as e:
            if torch.is_inference_mode_enabled() and internals.grad_levels():
                raise TransformRefusedError(
                    f"torch.inference_mode() inside a function under a grad transform (at "
                    f"{user_line()}): torch.func cannot run {name or 'this op'} there (an "
                    "inference tensor cannot join the transform's autograd); use torch.no_grad() "
                    "instead, or leave inference_mode outside the transform") from e
            raise

    def _dispatch(self, func, name: str, k: str, args: tuple, kwargs: dict) -> Any:
        with _NO_TORCH_FUNCTION() if isinstance(func, _C_FUNCTIONS) else contextlib.nullcontext():
            if k == "ordinary" and not (self.stale or self.selections):
                out = func(*args, **kwargs)  # the common case: an op that writes nothing
                self.track(func, name, args, kwargs, out)
                return out
            if self.stale and k != "attribute":
                self.refresh_args(args, kwargs)
            if self.selections and not self.watch:
                selected = masks.selected_call(self, func, name, args, kwargs)
                if selected is not None:
                    return selected
            return rules.RULES[k](self, func, name, args, kwargs)

    # --- writes ------------------------------------------------------------------------------
    def before_write(self, target: Any, others: list[torch.Tensor]) -> None:
        """Promote a fresh target that lacks a vmap level of the value written into it; check and
        save a target the caller owns (module docstring)."""
        if not isinstance(target, torch.Tensor):
            return
        node = self.node(target)
        if node is not None:
            if self.watch or not others:
                return
            need = set()
            for o in others:
                need |= internals.vmap_levels(o)
            if need - internals.vmap_levels(target):
                self._promote(node)
                self.refresh_args((target,), {})
            return
        if self.journal.borrowed(target):
            return
        if self.samples and self.samples - internals.vmap_levels(target):
            self.shared(target, "an in-place write", others)
            if self.journal.borrowed(target):
                return
        else:
            need = set(internals.grad_levels())  # torch refuses a write into a captured tensor
            for o in others:
                need |= internals.wrapper_levels(o)
            if not self.watch and need - internals.wrapper_levels(target):
                if self._alias_of_caller(target):
                    raise InplaceModeError(
                        f"an in-place write of a tracked value through a view or .data of a "
                        f"tensor the caller owns (at {user_line()}): write into the tensor "
                        "itself, or return the new value")
                # the value's transforms (a grad level; the basis vectors jacfwd vmaps over) lift
                # the tensor for the call; its value, the same for every basis vector, lands
                self.journal.lift(target, internals.batched_copy(target),
                                  leading=len(internals.all_vmap_levels()))
                self.saved_at.add(len(self.names) - 1)
                return
        self.journal.save(target)
        self.saved_at.add(len(self.names) - 1)

    def shared(self, target: torch.Tensor, what: str, others: list | None = None) -> None:
        """A write every batch entry shares, by the caller's policy (module docstring)."""
        if self.policy == "loop":
            raise LoopInstead(what)
        if self.policy != "discard":
            raise StateWriteError(
                f"{what} into a tensor the caller owns (shape {tuple(target.shape)}, at "
                f"{user_line()}), shared by every batch entry: a per-sample loop would run it once "
                "per entry, each entry seeing the ones before, which no batched run reproduces. "
                "Pass state_writes='loop' (the per-sample loop: slow, exact) or "
                "state_writes='discard' (each entry sees its own writes; the tensor is given back "
                "as it was) to funcbwd.vmap or funcbwd.allow_inplace, or clone it in the function")
        if self.watch:
            raise NeedsMode(what)  # the plain attempt cannot discard: the mode stage will
        if not self._alias_of_caller(target):
            self.journal.borrow(target, internals.batched_copy(target))
            return
        need = set()
        for o in others or ():
            need |= internals.vmap_levels(o)
        if need - internals.vmap_levels(target):
            raise InplaceModeError(
                f"{what} of per-sample values through a view or .data of a tensor the caller owns "
                f"(at {user_line()}): funcbwd cannot batch the tensor behind it; write into the "
                "tensor itself, or return the new value")
        self.journal.save(target)

    def mark_caller_alias(self, t: torch.Tensor) -> None:
        self.caller_aliases[id(t)] = weakref.ref(t)

    def _alias_of_caller(self, t: torch.Tensor) -> bool:
        ref = self.caller_aliases.get(id(t))
        return ref is not None and ref() is t

    # --- bookkeeping --------------------------------------------------------------------------
    def node(self, t: Any) -> _Node | None:
        if not isinstance(t, torch.Tensor):
            return None
        node = self.nodes.get(id(t))
        return node if node is not None and node.ref() is t else None

    def _remember(self, t: torch.Tensor, node: _Node) -> None:
        key = id(t)
        node.ref = weakref.ref(t, functools.partial(_forget, self.nodes, key))
        self.nodes[key] = node

    def selection(self, t: Any) -> tuple | None:
        if not isinstance(t, torch.Tensor):
            return None
        hit = self.selections.get(id(t))
        return hit[1] if hit is not None and hit[0]() is t else None

    def select(self, dense: torch.Tensor, found: tuple) -> torch.Tensor:
        self.special = True
        key = id(dense)
        self.selections[key] = (weakref.ref(dense), found)
        weakref.finalize(dense, self.selections.pop, key, None)
        return dense

    def track(self, func, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        if isinstance(out, torch.Tensor):
            self.track_one(func, name, args, kwargs, out)
            if out.dtype == torch.bool and not self.watch:
                masks.remember_provenance(self, name, args, kwargs, out)
        elif isinstance(out, tuple) and out and all(isinstance(o, torch.Tensor) for o in out):
            for i, o in enumerate(out):  # topk, sort, unbind: each output made by the call
                self.track_one(func, name, args, kwargs, o, part=i)

    def track_one(self, func, name, args, kwargs, out: torch.Tensor, part: int | None = None
                  ) -> None:
        if self.node(out) is not None:
            return
        first = args[0] if args else None
        parent = self.node(first)
        dense = internals.dense(out)
        # only a view, ``detach`` or an op returning its input (a no-op ``.to``: under a transform
        # a new wrapper around the same tensor) aliases an input: one cheap test for the rest
        if dense._is_view() or name == "detach":
            def aliases(a: Any) -> bool:
                return internals.dense_alias_of(dense, a)
        else:
            def aliases(a: Any) -> bool:
                return isinstance(a, torch.Tensor) and internals.dense(a) is dense
        if parent is not None and out is not first and aliases(first):
            if part is None:
                self.view(out, first, lambda p, f=func, r=args[1:], k=kwargs: f(p, *r, **k))
            else:  # one output of several (unbind, split): re-derived as that output
                self.view(out, first, lambda p, f=func, r=args[1:], k=kwargs, i=part:
                          f(p, *r, **k)[i])
            return
        inputs = masks.tensors((args, kwargs))
        if any(out is a for a in inputs):
            return  # an in-place op's own result
        if any(aliases(a) for a in inputs):
            whole = name in rules.NO_OP_CONVERSIONS and isinstance(
                first, torch.Tensor) and out.shape == first.shape
            if out is not first and not whole:  # a view of something the caller owns
                self.caller_aliases[id(out)] = weakref.ref(out)
            return
        self._remember(out, _Node(out, born=len(self.names) - 1))

    def view(self, out: torch.Tensor, of: torch.Tensor, derive) -> None:
        """Track ``out``, a view of the tracked ``of``, re-derived as ``derive(of)``."""
        parent = self.node(of)
        node = _Node(out, parent, derive, of)
        parent.root().views.append(weakref.ref(node))
        self._remember(out, node)

    # --- promotion -----------------------------------------------------------------------------
    def _promote(self, node: _Node) -> None:
        root = node.root()
        self.promoted_at.add(root.born)
        base = root.ref()
        internals.swap_impl(base, internals.batched_copy(base))  # old contents, their history
        self.views_stale(root)

    def promote_arguments(self, args: tuple) -> None:
        """Before a custom Function runs: fresh arguments lacking a vmap level of another argument
        are promoted (its ``forward`` may write into them, where the mode cannot see)."""
        tensors = masks.tensors(args)
        for t in tensors:
            if self.node(t) is not None:
                self.before_write(t, [o for o in tensors if o is not t])

    def views_stale(self, root: _Node) -> None:
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
        when the view is next used: a view re-derived before another view's write would hold
        autograd's view of the base as it was then."""
        if node.parent.stale:
            self._refresh(node.parent)
        t = node.ref()
        node.stale = False
        self.stale -= 1
        if t is not None:
            internals.swap_impl(t, node.derive(node.of))

    def refresh_args(self, args: tuple, kwargs: dict) -> None:
        for a in masks.tensors((args, kwargs)):
            node = self.node(a)
            if node is not None and node.stale:
                self._refresh(node)



def outputs_refreshed(f: Any) -> Any:
    """``f`` whose returned views of a promoted tensor are re-derived before they leave it: a view
    the function returns without using it again after its base was promoted would otherwise leave
    as it was before the write (the mode re-derives a view only when an op next uses it)."""
    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        out = f(*args, **kwargs)
        mode = scope.current().mode
        if isinstance(mode, InplaceMode) and mode.stale:
            with _NO_TORCH_FUNCTION():
                mode.refresh_args((out,), {})
        return out

    return run
