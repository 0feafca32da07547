"""``@funcbwd.functionalized`` on a ``torch.autograd.Function`` subclass.

functorch#207: a custom Function whose backward writes into a fresh tensor in place
(``grad_input = grad.clone(); grad_input[input < 0] = 0``) fails under ``vmap(vjp)`` once the
cotangent is batched. The decorator returns a subclass whose ``backward`` (and ``jvp``, if the
class defines one) runs functionalized under transforms, as :func:`funcbwd.functionalized` runs a
function: traced once per signature, copies elided, checked, cached. ``apply`` and ``forward`` are
the class's own; ``generate_vmap_rule = True`` unless the class defines ``vmap`` (so ``vmap`` over
``apply`` works too).

What a signature of ``backward(ctx, *grads)`` is: ``ctx.saved_tensors`` and every tensor
attribute ``setup_context`` set on ``ctx`` are graph **inputs** (never baked in: the next call's
saved tensors are other tensors); every other attribute (``ctx.dim = 1``) and
``ctx.needs_input_grad`` are part of the cache key (baked into the graph); the grads are inputs.
The backward sees a stand-in ctx with those attributes and ``saved_tensors``; one that calls
other ctx methods (``ctx.mark_dirty`` is forward-only anyway) is not supported.

Only the ``setup_context`` style can work under torch.func (torch requires it): an old-style
``forward(ctx, ...)`` class is first converted (:func:`funcbwd.tool.oldstyle.setup_context_style`:
its forward runs once with a recording ctx, what it saved reaches ``setup_context``).

A non-tensor ctx value is baked into the graph by value where it has one (numbers, strings,
dtypes, slices, ``...``, tuples of those: an index tuple rebuilt on every call hits the cache);
other objects by identity.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from funcbwd import internals
from funcbwd.errors import FuncbwdError
from funcbwd.tool.cache import DEFAULT_MAXSIZE
from funcbwd.tool.core import Functionalizer, signature_key

_HASHABLE_KINDS = (int, float, bool, str, type(None), complex, torch.dtype, torch.device,
                   type(Ellipsis))


def _defines(cls: type, name: str) -> bool:
    base = getattr(torch.autograd.Function, name, None)
    return getattr(cls, name, None) is not base


def _split_state(ctx: Any) -> tuple[tuple[str, ...], tuple, tuple[str, ...], tuple]:
    """(tensor attribute names, their tensors, other attribute names, their values)."""
    state = internals.autograd_ctx_state(ctx)
    tnames = tuple(sorted(k for k, v in state.items() if isinstance(v, torch.Tensor)))
    onames = tuple(sorted(k for k in state if k not in tnames))
    return tnames, tuple(state[k] for k in tnames), onames, tuple(state[k] for k in onames)


def _baked(value: Any) -> Any:
    """A key part for a non-tensor ctx attribute (baked into the graph)."""
    if isinstance(value, _HASHABLE_KINDS):
        return (type(value), value.hex() if type(value) is float else value)
    if isinstance(value, slice):
        return (slice, _baked(value.start), _baked(value.stop), _baked(value.step))
    if isinstance(value, (tuple, list)):
        parts = tuple(_baked(v) for v in value)
        if all(p[0] is not object for p in parts):
            return (type(value), parts)
    return (object, type(value), id(value))  # an object: by identity (a new one retraces)


def _runner(core: Functionalizer, method):
    """``method(ctx, *grads)`` functionalized under transforms, as written outside them."""

    def run(ctx: Any, *grads: Any) -> Any:
        if not internals.stack_depth():
            return method(ctx, *grads)
        saved = tuple(ctx.saved_tensors) if hasattr(ctx, "saved_tensors") else ()
        needs = tuple(getattr(ctx, "needs_input_grad", ()) or ())
        tnames, tvals, onames, ovals = _split_state(ctx)
        n_saved, n_attr = len(saved), len(tnames)
        args = saved + tvals + tuple(grads)
        key = ("ctx", n_saved, tnames, onames, tuple(map(_baked, ovals)), needs,
               signature_key(args))

        def formula(*flat: Any) -> Any:
            stand_in = types.SimpleNamespace(
                saved_tensors=tuple(flat[:n_saved]), needs_input_grad=needs,
                **dict(zip(onames, ovals)), **dict(zip(tnames, flat[n_saved:n_saved + n_attr])))
            return method(stand_in, *flat[n_saved + n_attr:])

        return core.run(key, formula, args)

    return run


def functionalized_function(cls: type, *, maxsize: int | None = DEFAULT_MAXSIZE,
                            warn: bool = True) -> type:
    """The subclass of ``cls`` described in the module docstring."""
    from funcbwd.tool.oldstyle import setup_context_style

    cls = setup_context_style(cls)  # an old-style forward(ctx, ...) class, converted
    attrs: dict[str, Any] = {"__module__": cls.__module__, "__doc__": cls.__doc__,
                             "__qualname__": cls.__qualname__}
    methods = ["backward"] + (["jvp"] if _defines(cls, "jvp") else [])
    for m in methods:
        core = Functionalizer(getattr(cls, m), name=f"{cls.__qualname__}.{m}", maxsize=maxsize,
                              warn=warn)
        attrs[m] = staticmethod(_runner(core, getattr(cls, m)))
        attrs[f"_funcbwd_{m}"] = core
    if not _defines(cls, "vmap"):
        attrs["generate_vmap_rule"] = True
    new = type(cls.__name__, (cls,), attrs)
    new.cache_info = staticmethod(new._funcbwd_backward.cache.info)  # type: ignore[attr-defined]
    new.cache_clear = staticmethod(new._funcbwd_backward.cache.clear)  # type: ignore[attr-defined]
    return new
