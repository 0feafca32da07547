"""``funcbwd.vmap`` and ``funcbwd.allow_inplace()``: in-place code under torch.func, no code change.

::

    per_sample = funcbwd.vmap(torch.func.jacrev(f))(xs)     # drop-in for torch.func.vmap

    with funcbwd.allow_inplace():                            # every vmap inside: jacfwd, hessian,
        torch.func.hessian(f)(x)                             # libraries calling torch.func.vmap

Each vmap call first runs as torch's own ``vmap`` (code that works today runs exactly as today, at
today's cost). Only when that raises one of the errors in-place code causes (:func:`fixable`) is
the call re-run with :class:`funcbwd.tool.inplace.InplaceMode` (fresh tensors promoted when a
batched value is written into them, batched-mask writes as ``where``, old-style
``autograd.Function`` classes converted; see that module), after putting torch's CPU random
state back. A function that changed one of its tensor inputs in place before failing is not
re-run (the retry would see the changed input): that raises one line saying so. A (function,
argument signature) that needed the mode goes straight to it on later calls.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Any, Callable, Iterator

import torch

from funcbwd import internals
from funcbwd.errors import FuncbwdError, first_line
from funcbwd.tool.inplace import InplaceMode
from funcbwd.tool.oldstyle import functions_converted, mode_active

__all__ = ["vmap", "allow_inplace", "fixable", "run_inplace"]

#: messages of the errors in-place code raises under torch.func (and nothing else)
_FIXABLE = (
    "inplace arithmetic",                       # vmap: unbatched.inplace_(batched)
    "operators that can support dynamic shape", # t[mask] = v with a batched mask
    "operators that can output dynamic shape",  # x[mask] (nonzero) with a batched mask
    "must override the setup_context",          # an old-style autograd.Function
    "is a view and is being modified inplace",  # unbind/split views written
    "do not allow the output views to be modified inplace",
    "doesn't match the broadcast shape",        # an unbatched out= / in-place target
)


def fixable(error: BaseException) -> bool:
    """True if ``error`` is one the in-place mode exists for."""
    text = str(error)
    return isinstance(error, RuntimeError) and any(m in text for m in _FIXABLE)


def _signature(args: tuple, kwargs: dict) -> tuple:
    flat = internals.leaves((args, kwargs))
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else type(a)
                 for a in flat)


def _versions(args: tuple, kwargs: dict) -> list[tuple[torch.Tensor, int]]:
    return [(a, a._version) for a in internals.leaves((args, kwargs)) if isinstance(a, torch.Tensor)]


@contextlib.contextmanager
def _inplace_mode() -> Iterator[InplaceMode]:
    mode = InplaceMode()
    with functions_converted(), mode:
        yield mode


def run_inplace(call: Callable[[], Any]) -> Any:
    """``call()`` with the in-place mode on (no plain attempt first)."""
    with _inplace_mode():
        return call()


class _Retry:
    """The plain attempt, the retry and the memory of what needed it, for one vmap'd function."""

    _lock = threading.Lock()
    _needed: "weakref.WeakKeyDictionary[Any, set]" = weakref.WeakKeyDictionary()

    @classmethod
    def call(cls, func: Callable[..., Any], run: Callable[[], Any], args: tuple,
             kwargs: dict) -> Any:
        if mode_active():
            return run()  # already inside the mode: inner vmaps run under it
        sig = _signature(args, kwargs)
        try:
            needed = sig in cls._needed.get(func, ())
        except TypeError:  # not weak-referenceable: no memory
            needed = False
        if needed:
            return run_inplace(run)
        rng = torch.get_rng_state()
        versions = _versions(args, kwargs)
        try:
            return run()
        except Exception as plain:  # noqa: BLE001 - only fixable errors are retried
            if not fixable(plain):
                raise
            changed = [v for t, v in versions if t._version != v]
            if changed:
                raise FuncbwdError(
                    f"{getattr(func, '__name__', func)} wrote into one of its inputs before vmap "
                    f"refused an in-place write ({first_line(str(plain), 80)}); funcbwd does not "
                    "re-run it on changed inputs: clone the input first") from plain
            torch.set_rng_state(rng)
            try:
                out = run_inplace(run)
            except Exception as mechanism:  # noqa: BLE001
                raise mechanism from plain
            with cls._lock:
                try:
                    cls._needed.setdefault(func, set()).add(sig)
                except TypeError:
                    pass
            return out


def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
         randomness: str = "error", *, chunk_size: int | None = None) -> Callable[..., Any]:
    """``torch.func.vmap`` that also runs in-place code (see the module docstring)."""
    impl = internals.original_vmap_impl()

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return _Retry.call(func, lambda: impl(func, in_dims, out_dims, randomness, chunk_size,
                                              *args, **kwargs), args, kwargs)

    return wrapped


def _retrying(original: Callable[..., Any]) -> Callable[..., Any]:
    def vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
        return _Retry.call(func, lambda: original(func, in_dims, out_dims, randomness, chunk_size,
                                                  *args, **kwargs), args, kwargs)

    return vmap_impl


@contextlib.contextmanager
def allow_inplace() -> Iterator[None]:
    """Every ``torch.func.vmap`` call in the block (also those inside ``jacfwd``, ``hessian`` and
    libraries) behaves as :func:`funcbwd.vmap`."""
    with internals.vmap_impl_replaced(_retrying):
        yield
