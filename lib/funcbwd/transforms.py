"""The tool's public transforms: :func:`vmap`, a drop-in for ``torch.func.vmap``, and
:func:`allow_inplace`, which makes every vmap in a block behave as it.

::

    per_sample = funcbwd.vmap(torch.func.jacrev(f))(xs)     # drop-in for torch.func.vmap

    with funcbwd.allow_inplace():                            # every vmap inside: jacfwd, hessian,
        torch.func.hessian(f)(x)                             # libraries calling torch.func.vmap

Each call first runs as torch's own vmap (code that works today runs as today); only when that
raises an error in-place code causes is it run again, stage by stage (:mod:`funcbwd.ladder`).
The promise: the per-sample loop's answer, or one error naming the cause and the line.
``state_writes`` says what a call may do with tensors its caller owns that every batch entry
shares (a module's buffer, a closure): ``"refuse"`` (default), ``"loop"`` or ``"discard"``
(:mod:`funcbwd.inplace`).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

from funcbwd import internals, ladder, scope

__all__ = ["vmap", "allow_inplace"]


def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
         randomness: str = "error", *, chunk_size: int | None = None,
         state_writes: str = "refuse") -> Callable[..., Any]:
    """``torch.func.vmap`` that also runs in-place code (see the module docstring)."""
    ladder.refuse_unknown_policy(state_writes)
    impl = internals.original_vmap_impl()

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        c = ladder.Call(impl, in_dims, out_dims, randomness, chunk_size, args, kwargs)
        with scope.entered(state_writes=state_writes):
            return ladder.call(func, c)

    return wrapped


def _routed(original: Callable[..., Any]) -> Callable[..., Any]:
    def vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
        c = ladder.Call(original, in_dims, out_dims, randomness, chunk_size, args, kwargs,
                        samples=not internals.torch_transform_internal(func))
        return ladder.call(func, c)

    return vmap_impl


@contextlib.contextmanager
def allow_inplace(state_writes: str = "refuse") -> Iterator[None]:
    """Every ``torch.func.vmap`` call in the block (also those inside ``jacfwd``, ``hessian`` and
    libraries) behaves as :func:`funcbwd.vmap` with this ``state_writes``."""
    ladder.refuse_unknown_policy(state_writes)
    with internals.vmap_impl_replaced(_routed), scope.entered(state_writes=state_writes):
        yield
