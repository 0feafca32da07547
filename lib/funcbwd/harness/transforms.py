"""The transforms the harness runs, each beside its reference: the per-sample loop, eagerly.

``args`` are batched (dim ``dims[i]`` of each batched argument is the batch); ``F`` is ``f``'s
outputs summed into one scalar; ``d`` is the differentiated argument::

    vmap         vmap(f)                       [f(a_i) for i]
    vmap_grad    vmap(grad(F))                 [autograd.grad(F(x_i), x_i)]
    vmap_vjp     vmap(vjp(f) and its vjp)      [(f(x_i), autograd.grad(f(x_i), x_i, ct_i))]
    vmap_jacrev  vmap(jacrev(f))               [reverse-mode Jacobian at x_i, f called once]
    jacrev       jacrev(f) at entry 0          reverse-mode Jacobian, f called once
    jacfwd       jacfwd(f) at entry 0          eager forward AD, one dual call per basis vector
    hessian      jacfwd(jacrev(F)) at entry 0  eager forward-over-reverse, per basis vector
    vmap_vmap    vmap(vmap(f)), 2 x B/2        the loop over all B entries, row-major

The loop runs the entries in order, the caller's state carried from one to the next; a
differentiated call runs with grad on (torch.func ignores an outer ``no_grad`` and
``inference_mode``). Forward-mode references call ``f`` once per basis vector, each from the
same state and random state (the answer of one call: forward AD, like torch.func's, ignores
``no_grad``). ``randomness="same"``: every entry starts from the same random state (vmap draws
once); ``"different"`` has no per-sample loop (vmap draws all entries at once). ``discard``
(the tool's ``state_writes="discard"``): each entry starts from the state as it was before the
call, and the state is put back after.

Entry points: ``torch`` (plain torch.func), ``vmap`` (``funcbwd.vmap`` for every vmap the
transform spells out; none in ``jacrev``, ``jacfwd``, ``hessian``: not applicable),
``allow_inplace`` (inside ``with funcbwd.allow_inplace():``), ``functionalized``
(``funcbwd.functionalized(f)``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable

import torch
import torch.autograd.forward_ad as fwAD
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from funcbwd.errors import BadInputError
from funcbwd.harness.state import Snapshot, random_state, set_random_state

TRANSFORMS = ("vmap", "vmap_grad", "vmap_vjp", "vmap_jacrev", "jacrev", "jacfwd", "hessian",
              "vmap_vmap")
ENTRIES = ("torch", "vmap", "allow_inplace", "functionalized")
#: transforms with no vmap of the user's own (``funcbwd.vmap`` has nothing to replace)
NO_USER_VMAP = ("jacrev", "jacfwd", "hessian")


def applies(transform: str, entry: str) -> bool:
    """False for ``funcbwd.vmap`` under a transform with no vmap of the user's own."""
    return not (entry == "vmap" and transform in NO_USER_VMAP)


# ------------------------------------------------------------------------------ helpers
def dims_of(in_dims: Any, args: tuple) -> tuple:
    """vmap's ``in_dims`` for a flat tuple of args, one per arg (None for a non-tensor)."""
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    return tuple(d if isinstance(a, torch.Tensor) else None for a, d in zip(args, dims))


def _total(out: Any) -> torch.Tensor:
    leaves = tree_flatten(out)[0]
    return functools.reduce(torch.add, [o.sum() for o in leaves])


def _with(args: tuple, d: int, x: Any) -> tuple:
    return args[:d] + (x,) + args[d + 1:]


def _entry_args(args: tuple, dims: tuple, i: int) -> tuple:
    return tuple(a.select(d, i) if d is not None else a for a, d in zip(args, dims))


def _leaf(x: torch.Tensor) -> torch.Tensor:
    return x.detach().requires_grad_(x.is_floating_point() or x.is_complex())


def _grad_on() -> contextlib.ExitStack:
    """What a differentiated call runs under: grad on, also inside an outer inference_mode."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.enable_grad())
    return stack


def _grads(outs: list, x: torch.Tensor, cts: list | None = None, create: bool = False):
    pairs = [(o, c) for o, c in zip(outs, cts or [None] * len(outs)) if o.requires_grad]
    g = None
    if pairs:
        g = torch.autograd.grad([o for o, _ in pairs], x, None if cts is None else
                                [c for _, c in pairs], retain_graph=True, create_graph=create,
                                allow_unused=True)[0]
    return torch.zeros_like(x) if g is None else g


def _detached(out: Any) -> Any:
    return tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, out)


def _stack(outs: list) -> Any:
    flat = [tree_flatten(o) for o in outs]
    return tree_unflatten([torch.stack(col) for col in zip(*(f for f, _ in flat))], flat[0][1])


# ------------------------------------------------------------------------------ the reference
def _reverse_jacobian(f: Callable, x: torch.Tensor) -> Any:
    with _grad_on():
        out = f(x)
        flat, spec = tree_flatten(out)
        jacs = [torch.stack([_grads([o.reshape(-1)[j]], x) for j in range(o.numel())])
                .reshape(*o.shape, *x.shape) if o.numel() else x.new_zeros(*o.shape, *x.shape)
                for o in flat]
    return tree_unflatten(jacs, spec)


def _forward_jacobian(f: Callable, x: torch.Tensor, reset: Callable[[], None],
                      over_reverse: bool = False) -> Any:
    """Eager forward AD, one dual call per basis vector of ``x`` (``reset()`` before each);
    ``over_reverse``: the tangent of ``f``'s gradient (forward-over-reverse: a Hessian)."""
    with torch.inference_mode(False):  # as torch.func's jvp: tangents flow under it too
        return _forward_columns(f, x, reset, over_reverse)


def _forward_columns(f: Callable, x: torch.Tensor, reset: Callable[[], None],
                     over_reverse: bool) -> Any:
    columns = []
    basis = torch.eye(x.numel(), dtype=x.dtype).reshape(x.numel(), *x.shape)
    for e in basis:
        reset()
        with fwAD.dual_level():
            if over_reverse:
                with _grad_on():
                    xd = fwAD.make_dual(_leaf(x), e)
                    out = [_grads([f(xd)], xd, create=True)]
                spec = None
            else:
                out, spec = tree_flatten(f(fwAD.make_dual(x, e)))
            columns.append([torch.zeros(o.shape, dtype=o.dtype) if t is None else t.clone()
                            for o in out for t in [fwAD.unpack_dual(o).tangent]])
    jacs = [torch.stack(col, -1).reshape(*col[0].shape, *x.shape) for col in zip(*columns)]
    return jacs[0] if spec is None else tree_unflatten(jacs, spec)


def _per_entry(transform: str, f: Callable, a: tuple, d: int, ct: Any, reset) -> Any:
    """One entry of the loop (or the one call of a transform without vmap), eagerly."""
    if transform in ("vmap", "vmap_vmap"):
        return _detached(f(*a))
    g = lambda x: f(*_with(a, d, x))  # noqa: E731
    if transform in ("vmap_grad", "vmap_vjp"):
        x = _leaf(a[d])
        with _grad_on():
            out = g(x)
            if transform == "vmap_grad":
                return _grads([_total(out)], x)
            return _detached(out), _grads(tree_flatten(out)[0], x, tree_flatten(ct)[0])
    if transform in ("vmap_jacrev", "jacrev"):
        return _reverse_jacobian(g, _leaf(a[d]))
    if transform == "jacfwd":
        return _forward_jacobian(g, a[d].detach(), reset)
    return _forward_jacobian(lambda x: _total(g(x)), a[d].detach(), reset, over_reverse=True)


def loop(transform: str, f: Callable, args: tuple, dims: tuple, d: int, cts: Any,
          randomness: str, state: dict, discard: bool) -> Any:
    """The reference of :func:`transformed` (see the module docstring); ``state``: the caller's
    objects by name."""
    if transform in NO_USER_VMAP:
        start = Snapshot(state), random_state()
        return _per_entry(transform, f, _entry_args(args, dims, 0), d, None,
                          lambda: (start[0].restore(), set_random_state(start[1])))
    size = next(a.shape[dd] for a, dd in zip(args, dims) if dd is not None)
    rng, before = random_state(), Snapshot(state)
    outs = []
    for i in range(size):
        if randomness == "same":
            set_random_state(rng)
        if discard:
            before.restore()
        ct = None if cts is None else tree_map(lambda c: c[i], cts)
        outs.append(_per_entry(transform, f, _entry_args(args, dims, i), d, ct, None))
    if discard:
        before.restore()
    out = _stack(outs)
    if transform == "vmap_vmap":
        out = tree_map(lambda t: t.unflatten(0, (2, size // 2)), out)
    return out


# ------------------------------------------------------------------------------ the transform
def transformed(transform: str, f: Callable, args: tuple, dims: tuple, d: int, cts: Any,
                 randomness: str, vmap: Callable) -> Any:
    fn = torch.func
    if transform in NO_USER_VMAP:
        a = _entry_args(args, dims, 0)
        g = lambda x: f(*_with(a, d, x))  # noqa: E731
        if transform == "jacrev":
            return fn.jacrev(g)(a[d])
        if transform == "jacfwd":
            return fn.jacfwd(g, randomness=randomness)(a[d])
        return fn.jacfwd(fn.jacrev(lambda x: _total(g(x))), randomness=randomness)(a[d])
    if transform == "vmap":
        return vmap(f, dims, randomness=randomness)(*args)
    if transform == "vmap_vmap":
        outer = tuple(a.unflatten(dd, (2, a.shape[dd] // 2)) if dd is not None else a
                      for a, dd in zip(args, dims))
        return vmap(vmap(f, dims, randomness=randomness), dims, randomness=randomness)(*outer)
    if transform == "vmap_grad":
        return vmap(fn.grad(lambda *a: _total(f(*a)), argnums=d), dims,
                    randomness=randomness)(*args)
    if transform == "vmap_jacrev":
        return vmap(fn.jacrev(f, argnums=d), dims, randomness=randomness)(*args)

    def vjp_of(*a_ct):
        a, ct = a_ct[:-1], a_ct[-1]
        out, back = fn.vjp(lambda x: f(*_with(a, d, x)), a[d])
        return out, back(ct)[0]

    return vmap(vjp_of, dims + (0,), randomness=randomness)(*args, cts)


def entry_point(entry: str, state_writes: str | None) -> tuple[Callable, Callable, Callable]:
    """(the vmap to use, the context the call runs in, the decorator) of an entry point: the
    public names ``funcbwd.vmap``, ``funcbwd.allow_inplace``, ``funcbwd.functionalized``, what
    a user calls, looked up on the package at call time (wherever the tool defines them; a test
    or a mutation may replace one)."""
    tool = sys.modules["funcbwd"]  # the package, always imported before its harness

    kw = {} if state_writes is None else {"state_writes": state_writes}
    if state_writes is not None and entry not in ("vmap", "allow_inplace"):
        raise BadInputError(f"state_writes is an option of funcbwd.vmap and allow_inplace, "
                            f"not of entry {entry!r}")
    if entry == "vmap":
        return functools.partial(tool.vmap, **kw), contextlib.nullcontext, _as_written
    if entry == "allow_inplace":
        return (torch.func.vmap, lambda: tool.allow_inplace(**kw), _as_written)
    if entry == "functionalized":
        return torch.func.vmap, contextlib.nullcontext, tool.functionalized
    return torch.func.vmap, contextlib.nullcontext, _as_written


def _as_written(f: Callable) -> Callable:
    return f
