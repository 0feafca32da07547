"""The tool's one piece of context: where a call stands in funcbwd's retries.

One ``ContextVar`` holds a frozen :class:`Scope`; :func:`entered` sets fields for a block and puts
the previous scope back in a ``finally`` (``torch/_functorch/eager_transforms.py``'s shape: every
level pushed is popped), so no state survives an exception and threads never share one.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from typing import Any, Callable, Iterator

#: what a call does with writes into tensors its caller owns, under vmap (:mod:`funcbwd.journal`)
STATE_WRITES = ("refuse", "loop", "discard")


@dataclasses.dataclass(frozen=True)
class Scope:
    """``retrying``: a retry stage runs; a transform called inside runs as the stage runs it (no
    retries of its own). ``mode``: the innermost in-place mode tracking this context (None: none,
    also inside a replayed call). ``functions``: custom ``autograd.Function`` calls run under the
    mode (:mod:`funcbwd.functions`). ``state_writes``: the caller's policy (:data:`STATE_WRITES`).
    ``journal``: where the current call saves the caller's tensors before writing them.
    ``tracing``: the decorated functions whose graphs are being traced in this context (a nested
    one runs as written, inside the outer trace).
    ``samples``: the vmap levels that batch samples (not the basis vectors ``jacrev``,
    ``jacfwd`` and ``hessian`` vmap over): a tensor lacking one is shared by the samples.
    ``basis``: the vmap levels known to batch basis vectors."""

    retrying: bool = False
    mode: Any = None
    functions: bool = False
    state_writes: str = "refuse"
    journal: Any = None
    tracing: frozenset = frozenset()
    samples: frozenset = frozenset()
    basis: frozenset = frozenset()


_SCOPE: contextvars.ContextVar[Scope] = contextvars.ContextVar("funcbwd_scope", default=Scope())


def current() -> Scope:
    return _SCOPE.get()


@contextlib.contextmanager
def entered(**changes: Any) -> Iterator[Scope]:
    """The block runs with ``changes`` applied to the current scope; the previous scope is back
    when it ends, also when it raises."""
    scope = dataclasses.replace(_SCOPE.get(), **changes)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def over_samples(f: Callable[..., Any], basis: bool = False) -> Callable[..., Any]:
    """``f`` with the vmap level it runs under counted among the scope's sample levels (or,
    ``basis``, among the levels of basis vectors)."""
    from funcbwd import internals

    @functools.wraps(f)
    def sampled(*args: Any, **kwargs: Any) -> Any:
        level = internals.innermost_vmap_level()
        s = _SCOPE.get()
        changes = {"basis": s.basis | {level}} if basis else {"samples": s.samples | {level}}
        with entered(**changes):
            return f(*args, **kwargs)

    return sampled


def samples_now(tensors: Any = ()) -> frozenset:
    """The vmap levels on the stack that batch samples: those funcbwd saw made for samples, or,
    where it saw none made, every level not known to batch basis vectors (and, where it saw no
    vmap made at all, the levels that batch ``tensors``' values)."""
    from funcbwd import internals

    s = _SCOPE.get()
    if s.samples:
        return s.samples
    levels = internals.all_vmap_levels()
    if s.basis:
        return levels - s.basis
    return internals.primal_vmap_levels(tensors) if tensors else levels


def sampling(original: Callable[..., Any]) -> Callable[..., Any]:
    """A ``vmap_impl`` that runs as ``original`` does, counting its levels among the samples
    (but the basis vectors torch's own jacrev/jacfwd/hessian vmap over)."""
    from funcbwd import internals

    def vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
        func = over_samples(func, basis=internals.torch_transform_internal(func))
        return original(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs)

    return vmap_impl
