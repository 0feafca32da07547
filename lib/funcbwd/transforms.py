"""The tool's public transforms: drop-ins for torch.func's (:func:`vmap`, :func:`grad`,
:func:`grad_and_value`, :func:`vjp`, :func:`jvp`, :func:`jacrev`, :func:`jacfwd`, :func:`hessian`)
and :func:`allow_inplace`, which makes every torch.func transform called in a block behave so.

::

    per_sample = funcbwd.vmap(torch.func.jacrev(f))(xs)     # drop-in for torch.func.vmap
    J = funcbwd.jacrev(f)(x)                                # drop-in for torch.func.jacrev

    with funcbwd.allow_inplace():                            # every transform inside, also
        torch.func.hessian(f)(x)                             # those libraries call

Each transform call first runs as torch's own (code that works today runs as today); only when
that raises an error in-place code causes is it run again, stage by stage (:mod:`funcbwd.ladder`).
The promise: the per-sample loop's answer (without vmap: eager autograd's), or one error naming
the cause and the line. ``state_writes`` says what a vmap'd call may do with tensors its caller
owns that every batch entry shares (a module's buffer, a closure): ``"refuse"`` (default),
``"loop"`` or ``"discard"`` (:mod:`funcbwd.inplace`).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch

from funcbwd import internals, ladder, scope

__all__ = ["vmap", "allow_inplace", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd",
           "hessian"]


def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
         randomness: str = "error", *, chunk_size: int | None = None,
         state_writes: str = "refuse") -> Callable[..., Any]:
    """``torch.func.vmap`` that also runs in-place code (see the module docstring)."""
    ladder.refuse_unknown_policy(state_writes)
    impl = internals.original_vmap_impl()

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        c = ladder.Call(impl, in_dims, out_dims, randomness, chunk_size, args, kwargs)
        with allow_inplace(state_writes):  # the transforms inside (vmap(grad(f))) too
            return ladder.call(func, c)

    return wrapped


def _routed_vmap(original: Callable[..., Any]) -> Callable[..., Any]:
    def vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
        c = ladder.Call(original, in_dims, out_dims, randomness, chunk_size, args, kwargs,
                        samples=not internals.torch_transform_internal(func))
        return ladder.call(func, c)

    return vmap_impl


def _routed_grad(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    def impl(func, *args, **kwargs):
        c = ladder.TransformCall(lambda f: original(f, *args, **kwargs), args, kwargs, name)
        out = ladder.call(func, c)
        return _tangents_as_primals(out) if name == "_jvp_with_argnums" else out

    return impl


def _tangents_as_primals(out: Any) -> Any:
    """``(primals_out, tangents_out[, aux])`` with each floating tangent in its primal's dtype, as
    eager forward AD keeps it (a dual's tangent has its primal's dtype). torch 2.13's jvp of
    ``F.mse_loss(c, x)`` in ``x`` (the target) returns a float64 tangent of a float32 output
    (the corpus's vector_quantize under jacfwd and hessian; docs/your-code.md)."""
    primals, tangents, *rest = out
    flat_p, spec = internals.flatten(primals)
    flat_t, spec_t = internals.flatten(tangents)
    if spec != spec_t:
        return out
    fixed = [t.to(p.dtype) if isinstance(t, torch.Tensor) and isinstance(p, torch.Tensor)
             and t.dtype != p.dtype and t.is_floating_point() and p.is_floating_point() else t
             for p, t in zip(flat_p, flat_t)]
    return (primals, internals.unflatten(fixed, spec_t), *rest)


@contextlib.contextmanager
def allow_inplace(state_writes: str = "refuse") -> Iterator[None]:
    """Every torch.func transform called in the block (vmap, grad, vjp, jvp, jacrev, jacfwd,
    hessian, also those inside libraries) behaves as funcbwd's with this ``state_writes``."""
    ladder.refuse_unknown_policy(state_writes)
    with internals.transforms_routed(_routed_vmap, _routed_grad), \
            scope.entered(state_writes=state_writes):
        yield


def _drop_in(transform: Callable[..., Callable[..., Any]]) -> Callable[..., Callable[..., Any]]:
    """``transform`` (torch.func's, returning a function) as a drop-in: the function it returns
    runs inside :func:`allow_inplace` (``state_writes=`` as a keyword of the drop-in)."""
    @functools.wraps(transform)
    def drop_in(func: Callable[..., Any], *targs: Any, state_writes: str = "refuse",
                **tkwargs: Any) -> Callable[..., Any]:
        ladder.refuse_unknown_policy(state_writes)
        transformed = transform(func, *targs, **tkwargs)

        @functools.wraps(transformed)
        def run(*args: Any, **kwargs: Any) -> Any:
            with allow_inplace(state_writes):
                return transformed(*args, **kwargs)

        return run

    drop_in.__doc__ = (f"``torch.func.{transform.__name__}`` that also runs in-place code "
                       "(see :mod:`funcbwd.transforms`).")
    return drop_in


grad = _drop_in(torch.func.grad)
grad_and_value = _drop_in(torch.func.grad_and_value)
jacrev = _drop_in(torch.func.jacrev)
jacfwd = _drop_in(torch.func.jacfwd)
hessian = _drop_in(torch.func.hessian)


def vjp(func: Callable[..., Any], *primals: Any, has_aux: bool = False,
        state_writes: str = "refuse") -> Any:
    """``torch.func.vjp`` that also runs in-place code: the forward runs inside
    :func:`allow_inplace`, and so does the returned ``vjp_fn``."""
    ladder.refuse_unknown_policy(state_writes)
    with allow_inplace(state_writes):
        out = torch.func.vjp(func, *primals, has_aux=has_aux)
    vjp_fn = out[1]

    @functools.wraps(vjp_fn)
    def run(*cotangents: Any, **kwargs: Any) -> Any:
        with allow_inplace(state_writes):
            return vjp_fn(*cotangents, **kwargs)

    return (out[0], run, *out[2:])


def jvp(func: Callable[..., Any], primals: Any, tangents: Any, *, strict: bool = False,
        has_aux: bool = False, state_writes: str = "refuse") -> Any:
    """``torch.func.jvp`` that also runs in-place code."""
    ladder.refuse_unknown_policy(state_writes)
    with allow_inplace(state_writes):
        return torch.func.jvp(func, primals, tangents, strict=strict, has_aux=has_aux)
