"""The in-place mode's table: each kind of op (:func:`kind`) and its rule (:data:`RULES`).

A rule is ``rule(mode, func, name, args, kwargs)``, called by
:meth:`funcbwd.inplace.InplaceMode.__torch_function__` for every op of its kind; what a rule
needs of the mode (tracking a tensor, checking a write's target) is the mode's bookkeeping.

==============  ==============================================================================
kind             rule
==============  ==============================================================================
``ordinary``     run it; track its outputs (fresh, or views of fresh tensors, or the caller's)
``attribute``    run it; ``.data`` under vmap (torch refuses it) is ``detach()``
``setter``       ``t.data = v`` of a value a transform tracks into a tensor the caller owns:
                 the state policy under vmap (``loop``: the per-sample loop), else refused (torch
                 would keep the transform's wrapper in the caller's tensor and crash)
``write``        check the target (promote a fresh one, save or refuse a caller's), then write;
                 under ``on_copy``, into a copy that takes the fresh tensor's place
``setitem``      a boolean-mask write with a batched mask as ``where``; else as ``write``
``getitem``      a boolean-mask read with a batched mask carried densely; else ``ordinary``
``split``        ``unbind``/``split``/``chunk`` of a fresh tensor as ``select``/``narrow`` views
``out``          ``op(..., out=t)`` under vmap: out of place, then ``t.copy_``
``detach_``      of a batched tensor (vmap has no rule: its fallback detaches views of it and
                 fails): a fresh tensor takes ``detach()``'s contents in place; else refused
``batch_norm``   in training, running statistics the caller owns on a per-sample input: the
                 state policy (``discard``: batch statistics only, no running update)
==============  ==============================================================================
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from funcbwd import internals, masks
from funcbwd.errors import InplaceModeError, user_line

_tensors = masks.tensors

_IOPS = {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__ipow__",
         "__imod__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}
#: trailing-underscore methods that change no tensor data
_NOT_WRITES = {"requires_grad_", "retain_grad_", "share_memory_", "detach_", "set_", "resize_",
               "rename_", "refine_names_"}
#: conversions that return their input when nothing changes (``self.cache = self.cache.to(x)``):
#: under a transform torch returns a wrapper of the caller's tensor, which stands for it
NO_OP_CONVERSIONS = {"to", "type", "type_as", "contiguous", "float", "double", "cpu"}
_KINDS: dict[str, str] = {"__setitem__": "setitem", "__getitem__": "getitem",
                          "__get__": "attribute", "__set__": "setter", "unbind": "split",
                          "split": "split", "chunk": "split", "batch_norm": "batch_norm",
                          "detach_": "detach_"}


def writes(name: str) -> bool:
    """True for an op that writes into its first argument (``add_``, ``+=``, ``t[i] = v``)."""
    return name in _IOPS or name == "__setitem__" or (
        name.endswith("_") and not name.startswith("_") and name not in _NOT_WRITES)


@functools.lru_cache(maxsize=None)
def _kind_of(name: str) -> str:
    return _KINDS.get(name) or ("write" if writes(name) else "ordinary")


def kind(name: str, kwargs: dict) -> str:
    """The rule an op goes to (a key of :data:`RULES`)."""
    return "out" if isinstance(kwargs.get("out"), torch.Tensor) else _kind_of(name)


# ------------------------------------------------------------------------------ the rules
def ordinary(mode, func, name, args, kwargs):
    out = func(*args, **kwargs)
    mode.track(func, name, args, kwargs, out)
    return out


def attribute(mode, func, name, args, kwargs):
    if func.__self__ is torch.Tensor.data and internals.vmap_active() and not mode.watch:
        return _data(mode, args[0])  # torch refuses ``.data`` under vmap
    if mode.stale and func.__self__ is torch.Tensor.shape:
        mode.refresh_args(args, kwargs)
    return func(*args, **kwargs)


def setter(mode, func, name, args, kwargs):
    """``t.data = v`` where ``t`` is the caller's and ``v`` carries a transform ``t`` lacks.

    torch stores the transform's wrapper in the caller's tensor, which outlives the transform's
    level: the next op on it crashes the process (torch 2.13: a segmentation fault, e.g. nflows'
    ``ActNorm`` initializing from its first batch under ``jacrev``). Under vmap over samples it is
    a write every entry shares (the caller's policy; ``discard`` cannot hold a per-sample value in
    a tensor the call replaces, so it refuses too); under grad transforms alone, refused."""
    t, value = args[0], args[1] if len(args) > 1 else None
    if (func.__self__ is not torch.Tensor.data or not isinstance(value, torch.Tensor)
            or mode.node(t) is not None
            or not internals.wrapper_levels(value) - internals.wrapper_levels(t)):
        return func(*args, **kwargs)
    what = "a .data assignment of a value a transform tracks"
    if mode.samples and internals.vmap_levels(value) & mode.samples - internals.vmap_levels(t):
        if mode.policy != "discard":
            mode.shared(t, what, [value])
    raise InplaceModeError(
        f"{what} into a tensor the caller owns (shape {tuple(t.shape)}, at {user_line()}): "
        "torch would keep the transform's wrapper in it (and crash); compute the value outside "
        "the transform (e.g. call a module that initializes from its first batch once before "
        "it), or write it with torch.no_grad(): t.copy_(value)")


def write(mode, func, name, args, kwargs):
    if not args:
        return func(*args, **kwargs)
    mode.before_write(args[0], _tensors((args[1:], kwargs)))
    if mode.on_copy and mode.node(args[0]) is not None:
        return _write_on_copy(mode, func, args, kwargs)
    return func(*args, **kwargs)


def setitem(mode, func, name, args, kwargs):
    if not mode.watch and masks.setitem(mode, *args) is not None:
        return None
    return write(mode, func, name, args, kwargs)


def getitem(mode, func, name, args, kwargs):
    if not mode.watch:
        masked = masks.masked_getitem(mode, args[0], args[1])
        if masked is not None:
            return masked
    return ordinary(mode, func, name, args, kwargs)


def split(mode, func, name, args, kwargs):
    if mode.watch or mode.node(args[0]) is None:
        return ordinary(mode, func, name, args, kwargs)
    mode.special = True
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
        mode.view(view, t, derive)
        out.append(view)
    return tuple(out)


def out(mode, func, name, args, kwargs):
    """``op(..., out=t)`` under vmap (most ``.out`` overloads have no batching rule): the op out
    of place, then ``t.copy_`` of the result (``t`` checked as any write's target)."""
    target = kwargs["out"]
    if mode.watch or not internals.vmap_active():
        mode.before_write(target, _tensors((args, kwargs)))
        return func(*args, **kwargs)
    mode.special = True
    result = func(*args, **{k: v for k, v in kwargs.items() if k != "out"})
    mode.before_write(target, [result])
    target.copy_(result)
    return target


def detach_(mode, func, name, args, kwargs):
    """``t.detach_()`` of a batched ``t`` (torch's vmap always fails there: its fallback runs it
    on views of ``t``): a fresh ``t`` (not a view, as eager requires) takes the contents of
    ``t.detach()`` in place (the same values and storage, no autograd history), its Python
    identity kept; any other batched ``t`` is refused naming the line."""
    t = args[0] if args else None
    if not isinstance(t, torch.Tensor) or not internals.batched_here(t):
        return ordinary(mode, func, name, args, kwargs)
    node = mode.node(t)
    if node is None or node.parent is not None or mode.watch:
        raise InplaceModeError(
            f"t.detach_() of a tensor batched by vmap (at {user_line()}): torch's vmap has no "
            "rule for it; " + ("funcbwd detaches only a tensor the function made, not a view of "
                               "one: use t = t.detach()" if mode.node(t) is None
                               or node.parent is not None else "funcbwd retries it"))
    mode.special = True
    internals.swap_impl(t, t.detach())
    return t


def batch_norm(mode, func, name, args, kwargs):
    """``batch_norm`` in training with running statistics the caller owns, on an input batched
    over samples they lack: its kernel would update them with every entry's values at once."""
    names = _BN_F if func is torch.nn.functional.batch_norm else _BN_TORCH
    bound = {**dict(zip(names, args)), **kwargs}
    stats, x = bound.get("running_mean"), bound.get("input")
    if (bound.get("training") and isinstance(stats, torch.Tensor) and mode.node(stats) is None
            and mode.samples and mode.samples - internals.vmap_levels(stats)
            and internals.vmap_levels(x) - internals.vmap_levels(stats)):
        mode.shared(stats, "a batch_norm in training updates its running statistics")
        # state_writes="discard": each entry is normalized by its own batch statistics and no
        # running statistic is updated (torch.func.replace_all_batch_norm_modules_)
        bound.update(running_mean=None, running_var=None)
        return func(*(bound[n] for n in names if n in bound))
    if bound.get("training"):  # the kernel writes the caller's statistics: saved like any write
        for s in (stats, bound.get("running_var")):
            if isinstance(s, torch.Tensor) and mode.node(s) is None and not mode.journal.borrowed(s):
                mode.journal.save(s)
    return ordinary(mode, func, name, args, kwargs)


_BN_F = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
_BN_TORCH = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum",
             "eps", "cudnn_enabled")

#: kind of op -> its rule (:func:`kind`)
RULES: dict[str, Callable[..., Any]] = {
    "ordinary": ordinary, "attribute": attribute, "setter": setter, "write": write,
    "setitem": setitem, "getitem": getitem, "split": split, "out": out, "batch_norm": batch_norm,
    "detach_": detach_,
}


# ------------------------------------------------------------------------------ helpers
def _write_on_copy(mode, func, args: tuple, kwargs: dict) -> Any:
    """``func(t, ...)`` (a write into a fresh ``t``) run on ``t``'s view of a copy of its base;
    the base then takes the copy's contents (its old contents stay with whatever autograd saved
    of them) and its views are re-derived when next used."""
    node = mode.node(args[0])
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
    result = func(target, *args[1:], **kwargs)
    internals.swap_impl(base, copy)
    mode.views_stale(root)
    return args[0] if result is target else result


def _data(mode, t: torch.Tensor) -> torch.Tensor:
    """``t.data`` under vmap: ``t.detach()`` (the same storage, no autograd history), tracked as
    a view of ``t`` when ``t`` is fresh."""
    mode.special = True
    result = t.detach()
    if mode.node(t) is not None:
        mode.view(result, t, torch.Tensor.detach)
    else:
        mode.mark_caller_alias(result)
    return result
