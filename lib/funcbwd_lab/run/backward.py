"""The backward scenarios: compositions that run a vjp formula (``OpSpec.kind == "backward"``).

Each returns the trials of :mod:`funcbwd_lab.run.scenario`: the strategy's call on named caller
inputs, the per-sample loop of the formula (plain autograd, the strategy's reference, one batch
entry or one Jacobian row at a time; each cotangent slice cloned, since some backwards read
absolute storage offsets of views) and torch's own gradient per sample through ``torch.func``.
Batched args take distinct entries (:func:`funcbwd_lab.run.entries.distinct_entries`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch.func import jacfwd, vmap

from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.run.entries import stacked
from funcbwd_lab.run.scenario import (Case, Scenario, Trial, bind, bind_callable, loop_vjp,
                                  per_in_dims, stack_loop, torch_bind, torch_vjp,
                                  with_args, zeros_for_none)
from funcbwd_lab.strategies import Strategy


def _split(xs: Sequence[torch.Tensor], case: Case) -> tuple[list, list]:
    """(the sample's args with its tensor args taken from ``xs``, the remaining ``xs``)."""
    tpos = case.sample.tensor_positions()
    return with_args(case.sample, tpos, xs[:len(tpos)]), list(xs[len(tpos):])


# ------------------------------------------------------------------------------ vjp scenarios
def vmap_cotangents(case: Case) -> list[Trial]:
    """vmap(vjp_fn) over a batch of cotangents; the primals unbatched."""
    op, s, st = case.op, case.sample, case.strategy
    cts = case.cotangents(100, batched=True)
    inputs = case.arg_inputs() + [(f"cotangent {i}", c) for i, c in enumerate(cts)]

    def composed(*c: torch.Tensor) -> tuple:
        _, vjp_fn = st.vjp(bind(op, st, s.args, s.diff), *[s.args[p] for p in s.diff])
        return vmap(lambda *ci: vjp_fn(ci))(*c)

    def per_sample(body: Callable) -> Callable:
        def run(xs: list) -> tuple:
            args, c = _split(xs, case)
            return stack_loop([body(args, [ci[b] for ci in c]) for b in range(case.batch)])
        return run

    return [Trial("", inputs, lambda: tuple(st.transform(composed)(*cts)),
                  per_sample(lambda a, c: loop_vjp(op, case.reference, a, s.diff, c)),
                  per_sample(lambda a, c: torch_vjp(op, a, s.diff, c)))]


def vmap_all_args(case: Case) -> list[Trial]:
    """All tensor args (primals, index/mask/min/max) and cotangents batched, one trial per in_dims
    choice as PyTorch's test_vmapvjp; an unbatched arg is the sample's value (entry 0)."""
    op, s, st = case.op, case.sample, case.strategy
    cts = [(f"cotangent {i}", c) for i, c in enumerate(case.cotangents(200, batched=False))]

    others = [p for p in s.tensor_positions() if p not in s.diff]

    def transform(full: list, c: Sequence[torch.Tensor]) -> tuple:
        # the non-differentiated tensor args (batched too) are the vjp's ``inputs``
        f = bind(op, st, full, list(s.diff) + others)
        _, vjp_fn = st.vjp(f, *[full[p] for p in s.diff], inputs=[full[p] for p in others])
        return vjp_fn(tuple(c))

    return per_in_dims(case, cts, transform,
                       lambda full, c: loop_vjp(op, case.reference, full, s.diff, c),
                       lambda full, c: torch_vjp(op, full, s.diff, c))


def vjp_of_vjp(case: Case) -> list[Trial]:
    """vmap over the outer cotangent of vjp(g), where g(primals, ct) = vjp(f, primals)(ct)."""
    op, s, st = case.op, case.sample, case.strategy
    k = len(s.diff)
    cts1 = case.cotangents(300, batched=False)
    cts2 = [case.randn((case.batch, *s.args[p].shape), 400 + j, s.args[p].dtype)
            for j, p in enumerate(s.diff)]
    inputs = (case.arg_inputs() + [(f"cotangent {i}", c) for i, c in enumerate(cts1)]
              + [(f"outer cotangent {j}", c) for j, c in enumerate(cts2)])

    def g1(*xs: torch.Tensor) -> tuple:
        _, vjp_fn = st.vjp(bind(op, st, s.args, s.diff), *xs[:k])
        return vjp_fn(tuple(xs[k:]))

    def composed(*c: torch.Tensor) -> tuple:
        _, vjp2 = st.vjp(g1, *[s.args[p] for p in s.diff], *cts1)
        return vmap(lambda *ci: vjp2(ci))(*c)

    def split(xs: list) -> tuple[list, list, list]:
        args, rest = _split(xs, case)
        return args, rest[:len(cts1)], rest[len(cts1):]

    def loop(xs: list) -> tuple:
        args, c1, c2 = split(xs)
        ref = case.reference
        with torch.enable_grad():
            prim = [args[p].detach().clone().requires_grad_() for p in s.diff]
            c1 = [c.detach().clone().requires_grad_() for c in c1]
            g = torch.autograd.grad(bind(op, ref, args, s.diff)(*prim), prim, c1,
                                    create_graph=True, allow_unused=True)
            rows = []
            for b in range(case.batch):
                pairs = [(gi, c[b].clone()) for gi, c in zip(g, c2) if gi is not None and gi.requires_grad]
                r = (torch.autograd.grad([p[0] for p in pairs], prim + c1, [p[1] for p in pairs],
                                         retain_graph=True, allow_unused=True)
                     if pairs else [None] * (len(prim) + len(c1)))
                rows.append(zeros_for_none(r, prim + c1))
        return stack_loop(rows)

    def truth(xs: list) -> tuple:
        args, c1, c2 = split(xs)

        def g(*ys: torch.Tensor) -> tuple:
            full = list(args)
            for p, y in zip(s.diff, ys[:k]):
                full[p] = y
            return torch_vjp(op, full, s.diff, ys[k:])

        rows = []
        for b in range(case.batch):
            _, vjp2 = torch.func.vjp(g, *[args[p] for p in s.diff], *c1)
            rows.append(tuple(vjp2(tuple(c[b].clone() for c in c2))))
        return stack_loop(rows)

    return [Trial("", inputs, lambda: tuple(st.transform(composed)(*cts2)), loop, truth)]


def grad_inside_vmap(case: Case) -> list[Trial]:
    """vmap over primals and cotangents of ``grad`` (a grad transform above the vmap level);
    non-differentiable args (index, mask) unbatched."""
    op, s, st = case.op, case.sample, case.strategy
    k = len(s.diff)
    primals = [stacked(e, 0) for e in case.entries([s.args[p] for p in s.diff], s.diff)]
    cts = case.cotangents(500, batched=True)
    others = [p for p in s.tensor_positions() if p not in s.diff]
    inputs = ([(f"arg {p}", x) for p, x in zip(s.diff, primals)] + [(f"arg {p}", s.args[p]) for p in others]
              + [(f"cotangent {i}", c) for i, c in enumerate(cts)])

    def h(*xs: torch.Tensor) -> tuple:
        f = bind(op, st, s.args, s.diff)

        def loss(*p: torch.Tensor) -> torch.Tensor:
            return sum((o * c).sum() for o, c in zip(f(*p), xs[k:]))

        return st.grad(loss, argnums=tuple(range(k)))(*xs[:k])

    def per_sample(body: Callable) -> Callable:
        def run(xs: list) -> tuple:
            prim, other, c = xs[:k], xs[k:k + len(others)], xs[k + len(others):]
            rows = []
            for b in range(case.batch):
                full = with_args(s, list(s.diff) + others, [x[b] for x in prim] + list(other))
                rows.append(body(full, [ci[b] for ci in c]))
            return stack_loop(rows)
        return run

    def torch_grad(full: list, c: list) -> tuple:
        f = torch_bind(op, full, s.diff)

        def loss(*p: torch.Tensor) -> torch.Tensor:
            return sum((o * ci).sum() for o, ci in zip(f(*p), c))

        # each entry cloned: a view x[b] keeps the batch's storage, and ops that take absolute
        # storage offsets (as_strided) would read entry 0's values through it
        return tuple(torch.func.grad(loss, argnums=tuple(range(k)))(*[full[p].clone() for p in s.diff]))

    return [Trial("", inputs, lambda: tuple(st.transform(vmap(h))(*primals, *cts)),
                  per_sample(lambda full, c: loop_vjp(op, case.reference, full, s.diff, c)),
                  per_sample(torch_grad))]


# ------------------------------------------------------------------------------ jacobians
def _single(op: OpSpec, fn: Callable, s: Sample, args: Sequence, x_pos: int) -> Callable:
    """h(x) -> the first differentiable output, every other arg fixed (the jacobian scenarios)."""
    f = bind_callable(op, fn, args, [x_pos])
    return lambda x: f(x)[0]


def loop_jacobian(h: Callable, x: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
    out = h(x)
    rows = []
    flat = out.reshape(-1)
    for i in range(flat.numel()):
        g = (torch.autograd.grad(flat[i], x, retain_graph=True, create_graph=create_graph,
                                 allow_unused=True)[0] if flat.requires_grad else None)
        rows.append(torch.zeros_like(x) if g is None else g)
    return torch.stack(rows).reshape(*out.shape, *x.shape) if rows else out.new_zeros(*out.shape, *x.shape)


def _loop_jac(case: Case, args: list, x: torch.Tensor, order: int) -> torch.Tensor:
    ref = case.reference
    with torch.enable_grad():
        xr = x.detach().clone().requires_grad_()
        h = _single(case.op, ref.function(case.op), case.sample, args, case.sample.diff[0])
        if order == 1:
            return loop_jacobian(h, xr)
        return loop_jacobian(lambda y: loop_jacobian(h, y, create_graph=True), xr)


def _jacobian_scenario(transform: Callable[[Strategy, Callable], Callable],
                       truth_transform: Callable[[Callable], Callable], order: int,
                       batched: bool = False) -> Callable[[Case], list[Trial]]:
    """A jacobian scenario of the first differentiable arg: ``transform(strategy, h)`` is the
    composition under test, ``truth_transform(h)`` the same composition for torch's op, ``order``
    the loop's derivative order; ``batched``: vmap over distinct entries of the primal."""

    def trials(case: Case) -> list[Trial]:
        op, s, st = case.op, case.sample, case.strategy
        p = s.diff[0]
        x = stacked(case.entries([s.args[p]], [p])[0], 0) if batched else s.args[p]
        inputs = [(n, t) for n, t in case.arg_inputs() if n != f"arg {p}"] + [(f"arg {p}", x)]

        def args_of(xs: list) -> tuple[list, torch.Tensor]:
            others = [q for q in s.tensor_positions() if q != p]
            return with_args(s, others, xs[:-1]), xs[-1]

        def call() -> tuple:
            h = _single(op, st.function(op), s, s.args, p)
            f = transform(st, h)
            return (st.transform(vmap(f) if batched else f)(x),)

        def loop(xs: list) -> tuple:
            args, xv = args_of(xs)
            if batched:
                return (torch.stack([_loop_jac(case, args, xv[b], order) for b in range(case.batch)]),)
            return (_loop_jac(case, args, xv, order),)

        def truth(xs: list) -> tuple:
            args, xv = args_of(xs)
            f = truth_transform(_single(op, op.torch_op, s, args, p))
            # per-entry clones, not views: see grad_inside_vmap's torch_grad
            return (torch.stack([f(xv[b].clone()) for b in range(case.batch)]) if batched else f(xv),)

        return [Trial("", inputs, call, loop, truth)]

    return trials


jacrev = _jacobian_scenario(lambda st, h: st.jacrev(h), torch.func.jacrev, 1)
jacrev_jacrev = _jacobian_scenario(lambda st, h: st.jacrev(st.jacrev(h)),
                                   lambda h: torch.func.jacrev(torch.func.jacrev(h)), 2)
jacfwd_jacrev = _jacobian_scenario(lambda st, h: jacfwd(st.jacrev(h)),
                                   lambda h: torch.func.jacfwd(torch.func.jacrev(h)), 2)
vmap_jacrev = _jacobian_scenario(lambda st, h: st.jacrev(h), torch.func.jacrev, 1, batched=True)


BACKWARD: dict[str, Scenario] = {
    sc.name: sc
    for sc in [
        Scenario("vmap_cotangents", "vmap(vjp_fn) over a batch of cotangents", vmap_cotangents),
        Scenario("vmap_all_args", "vmap over primals, index/mask/min/max and cotangents, each "
                 "in_dims choice of PyTorch's test_vmapvjp", vmap_all_args),
        Scenario("vjp_of_vjp", "vmap over the outer cotangent of a vjp of a vjp", vjp_of_vjp),
        Scenario("grad_inside_vmap", "vmap(grad(f)): a grad transform above the vmap level",
                 grad_inside_vmap),
        Scenario("jacrev", "jacrev(f) (vmap over one-hot cotangents)", jacrev),
        Scenario("jacrev_jacrev", "jacrev(jacrev(f)) (the hessian by reverse over reverse)",
                 jacrev_jacrev),
        Scenario("jacfwd_jacrev", "jacfwd(jacrev(f)) (forward over reverse; needs a jvp rule)",
                 jacfwd_jacrev, needs_jvp=True),
        Scenario("vmap_jacrev", "vmap(jacrev(f)) over a batch of primals", vmap_jacrev),
    ]
}
