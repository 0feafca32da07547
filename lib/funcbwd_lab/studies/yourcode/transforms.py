"""The transforms a corpus case runs under, and the per-sample loop that is their truth.

For a case with one sample's arguments ``a``, batched positions ``P`` and the differentiated
position ``d`` (``g(x)`` is the function with ``a[d] = x``):

==============  ==========================================  ======================================
transform        computed                                    truth (torch.autograd, no torch.func)
==============  ==========================================  ======================================
``vmap``         ``vmap(f, in_dims)(*batch)``                 ``[f(*sample_i)]``
``vmap_vjp``     ``vmap(lambda *a, c: vjp(g, a[d])[1](c))``   ``autograd.grad(g_i(x_i), x_i, c_i)``
                 (batched primals and cotangents)
``vmap_jacrev``  ``vmap(jacrev(g))(*batch)``                  ``autograd.functional.jacobian``
``jacfwd``       ``jacfwd(g)(x_0)`` (vmap over the basis)     ``autograd.functional.jacobian``
``hessian``      ``jacfwd(jacrev(sum g**2))(x_0)``            ``autograd.functional.hessian``
``vmap_vmap``    ``vmap(vmap(f))`` over a 2 x B batch         ``[[f(*sample_ij)]]``
==============  ==========================================  ======================================

The truth runs the case's out-of-place ``rewrite`` (torch's own formulas: torch's gradient);
:func:`loop` can also run the code as written, where eager autograd accepts it.
``hessian`` is ``torch.func.hessian`` spelled out so that a case with random ops can pass
``randomness="same"`` to its ``jacfwd``; with ``randomness=None`` it is ``torch.func.hessian``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.autograd import functional as AF
from torch.func import jacfwd, jacrev, vjp

from funcbwd_lab.studies.yourcode.case import TRANSFORMS, Case

BATCH = 3
OUTER = 2
SEED = 1234  # the random stream of cases with random ops, reset before each run and each sample

Vmap = Callable[..., Callable[..., Any]]


def batch_args(case: Case, size: int = BATCH, first: int = 0) -> tuple:
    """The case's args with samples ``first .. first+size-1`` stacked at the batched positions
    (the other positions hold sample ``first``'s values)."""
    samples = [case.sample(first + i) for i in range(size)]
    return tuple(torch.stack([s[p] for s in samples]) if p in case.batched else samples[0][p]
                 for p in range(len(samples[0])))


def nested_batch_args(case: Case) -> tuple:
    """``OUTER x BATCH`` distinct samples stacked at the batched positions (for ``vmap_vmap``)."""
    rows = [batch_args(case, BATCH, i * BATCH) for i in range(OUTER)]
    return tuple(torch.stack([r[p] for r in rows]) if p in case.batched else rows[0][p]
                 for p in range(len(rows[0])))


def in_dims(case: Case, n: int) -> tuple:
    return tuple(0 if p in case.batched else None for p in range(n))


def at(args: tuple, i: int) -> tuple:
    """Sample ``i`` of batched ``args`` (a clone per entry: some backwards read storage offsets)."""
    return tuple(a[i].clone() if isinstance(a, torch.Tensor) and p_batched else a
                 for a, p_batched in args)


def _entries(case: Case, args: tuple) -> list[tuple]:
    marked = [(a, p in case.batched) for p, a in enumerate(args)]
    size = next(a.shape[0] for a, b in marked if b)
    return [at(marked, i) for i in range(size)]


def _g(f: Callable[..., Any], args: tuple, d: int) -> Callable[[torch.Tensor], Any]:
    def g(x: torch.Tensor) -> Any:
        return f(*args[:d], x, *args[d + 1:])
    return g


def cotangents(case: Case, out: torch.Tensor, size: int = BATCH) -> torch.Tensor:
    gen = torch.Generator().manual_seed(99)
    return torch.randn((size, *out.shape), generator=gen, dtype=out.dtype)


def _reseed(case: Case) -> None:
    if case.randomness:
        torch.manual_seed(SEED)


def transformed(name: str, f: Callable[..., Any], case: Case, args: tuple,
                cts: torch.Tensor | None = None, vmap: Vmap | None = None) -> Any:
    """``f`` under transform ``name`` on batched ``args`` (:func:`batch_args`; for
    ``vmap_vmap``, :func:`nested_batch_args`); ``vmap`` replaces ``torch.func.vmap`` (a drop-in)
    for the outer vmap of the vmap transforms."""
    vmap = vmap or torch.func.vmap
    d, n, r = case.diff, len(args), case.randomness or "error"
    dims = in_dims(case, n)
    _reseed(case)
    if name == "vmap":
        return vmap(f, in_dims=dims, randomness=r)(*args)
    if name == "vmap_vmap":
        return vmap(torch.func.vmap(f, in_dims=dims, randomness=r), in_dims=dims,
                    randomness=r)(*args)
    if name == "vmap_vjp":
        def per_sample(*a_c):
            a, c = a_c[:-1], a_c[-1]
            return vjp(_g(f, a, d), a[d])[1](c)[0]
        return vmap(per_sample, in_dims=dims + (0,), randomness=r)(*args, cts)
    if name == "vmap_jacrev":
        return vmap(lambda *a: jacrev(_g(f, a, d))(a[d]), in_dims=dims, randomness=r)(*args)
    one = _entries(case, args)[0]
    if name == "jacfwd":
        return jacfwd(_g(f, one, d), randomness=r)(one[d])
    if name == "hessian":
        g = _g(f, one, d)
        return jacfwd(jacrev(lambda x: g(x).pow(2).sum()), randomness=r)(one[d])
    raise ValueError(f"unknown transform {name!r}; known: {', '.join(TRANSFORMS)}")


def loop(name: str, f: Callable[..., Any], case: Case, args: tuple,
         cts: torch.Tensor | None = None) -> torch.Tensor:
    """The truth of :func:`transformed`: a per-sample loop of plain autograd over ``f``."""
    d = case.diff
    if name == "vmap_vmap":
        rows = [tuple(a[i] if p in case.batched else a for p, a in enumerate(args))
                for i in range(OUTER)]
        return torch.stack([loop("vmap", f, case, row) for row in rows])
    entries = _entries(case, args)
    if name in ("jacfwd", "hessian"):
        entries = entries[:1]
    out = []
    for i, a in enumerate(entries):
        _reseed(case)
        g = _g(f, a, d)
        if name == "vmap":
            with torch.no_grad():
                out.append(f(*a))
        elif name == "vmap_vjp":
            x = a[d].detach().requires_grad_(True)
            y = g(x)
            (grad,) = torch.autograd.grad(y, x, cts[i], allow_unused=True)
            out.append(torch.zeros_like(x) if grad is None else grad)
        elif name in ("vmap_jacrev", "jacfwd"):
            out.append(AF.jacobian(g, a[d]))
        elif name == "hessian":
            out.append(AF.hessian(lambda x: g(x).pow(2).sum(), a[d]))
        else:
            raise ValueError(f"unknown transform {name!r}; known: {', '.join(TRANSFORMS)}")
    return out[0] if name in ("jacfwd", "hessian") else torch.stack(out)


def args_for(name: str, case: Case) -> tuple:
    return nested_batch_args(case) if name == "vmap_vmap" else batch_args(case)


def output_of(case: Case, rewrite: Callable[..., Any]) -> torch.Tensor:
    """One sample's output of the rewrite (for the cotangents' shape and dtype)."""
    _reseed(case)
    with torch.no_grad():
        return rewrite(*case.sample(0))
