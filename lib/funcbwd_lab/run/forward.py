"""Forward-mode scenarios: the transforms that run a jvp-kind op's formula (``OpSpec.kind ==
"jvp"``: the formula under study is the op's forward-mode rule, run by the legacy op's ``jvp``
through the strategy it is bound to).

Same contract as :mod:`funcbwd_lab.run.backward`. The loop reference is the strategy's
``reference()`` (the plain legacy op: the formula as written) run unbatched under *plain*
forward-mode AD (``torch.autograd.forward_ad`` dual tensors, no ``torch.func`` transform), one
batch entry or one basis direction at a time; the truth is torch's own op under ``torch.func``.

* ``vmap_jvp``: ``vmap`` over a batch of tangents (distinct seeded random entries), primals
  unbatched: the hazard of a fast path whose in-place target is primal-only.
* ``vmap_jvp_all_args``: primals, the other tensor args and the tangents batched, with distinct
  per-entry values, for each in_dims choice of PyTorch's test_vmapvjp (as ``vmap_all_args``).
* ``jacfwd``: ``jacfwd`` (vmap over one-hot tangents) of every differentiable output w.r.t. the
  first differentiable arg.
* ``jacrev_jacfwd``: reverse over forward (the Hessian of the first differentiable output
  contracted with fixed random weights), so the formula's own ops are differentiated and batched
  by ``jacrev``'s vmap; its loop reference is the out-of-place path (:func:`hessian_reference`:
  reverse mode through a fast path as written can fail with plain tensors). This replaces
  ``jacfwd_jacrev`` for jvp-kind ops: forward over reverse differentiates the *backward* (torch's
  own for these ops) and discards the output tangents the formula computes, so it would pass a
  wrong formula (checked in tests/test_forward_scenarios.py); it is not applicable to them.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD
from torch.func import jacfwd, jacrev, jvp, vmap

from funcbwd_lab.ops.registry import OpSpec
from funcbwd_lab.run.scenario import (Case, Scenario, Trial, bind, bind_callable, per_in_dims,
                                  stack_loop, torch_bind, with_args)
from funcbwd_lab.strategies import Strategy, get_strategy


def loop_jvp(op: OpSpec, ref: Strategy, args: Sequence[Any], diff: Sequence[int],
             tangents: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """One unbatched jvp with plain forward-mode AD (the loop body): the tangents of the op's
    differentiable outputs (zeros where the output does not depend on the args)."""
    with fwAD.dual_level():
        duals = [fwAD.make_dual(args[p].detach().clone(), t.clone()) for p, t in zip(diff, tangents)]
        outs = bind(op, ref, args, diff)(*duals)
        tans = [fwAD.unpack_dual(o).tangent for o in outs]
        return tuple(torch.zeros_like(fwAD.unpack_dual(o).primal) if t is None else t.clone()
                     for o, t in zip(outs, tans))


def torch_jvp(op: OpSpec, args: Sequence[Any], diff: Sequence[int],
              tangents: Sequence[torch.Tensor]) -> tuple:
    """One unbatched jvp of torch's own op through ``torch.func`` (the truth body)."""
    return tuple(jvp(torch_bind(op, args, diff), tuple(args[p] for p in diff),
                     tuple(t.clone() for t in tangents))[1])


def _tangents(case: Case, batch: int | None, offset: int) -> list[torch.Tensor]:
    """Seeded random tangents of the sample's differentiable args (with a leading batch dim)."""
    lead = () if batch is None else (batch,)
    s = case.sample
    return [case.randn((*lead, *s.args[p].shape), offset + j, s.args[p].dtype) for j, p in enumerate(s.diff)]


def _split(case: Case, xs: list) -> tuple[list, list]:
    tpos = case.sample.tensor_positions()
    return with_args(case.sample, tpos, xs[:len(tpos)]), xs[len(tpos):]


# ------------------------------------------------------------------------------ the scenarios
def vmap_jvp(case: Case) -> list[Trial]:
    """vmap over a batch of tangents of ``jvp(f, primals, tangents)``; primals unbatched."""
    op, s, st = case.op, case.sample, case.strategy
    tangents = _tangents(case, case.batch, 700)
    inputs = case.arg_inputs() + [(f"tangent {i}", t) for i, t in enumerate(tangents)]
    primals = tuple(s.args[p] for p in s.diff)

    def call() -> tuple:
        f = bind(op, st, s.args, s.diff)
        return tuple(st.transform(vmap(lambda *t: jvp(f, primals, t)[1]))(*tangents))

    def per_sample(body: Callable) -> Callable:
        def run(xs: list) -> tuple:
            args, t = _split(case, xs)
            return stack_loop([body(args, [ti[b] for ti in t]) for b in range(case.batch)])
        return run

    return [Trial("", inputs, call,
                  per_sample(lambda a, t: loop_jvp(op, case.reference, a, s.diff, t)),
                  per_sample(lambda a, t: torch_jvp(op, a, s.diff, t)))]


def vmap_jvp_all_args(case: Case) -> list[Trial]:
    """Every tensor arg (primals and the others) and the tangents batched with distinct entries,
    one trial per in_dims choice."""
    op, s, st = case.op, case.sample, case.strategy
    tangents = [(f"tangent {i}", t) for i, t in enumerate(_tangents(case, None, 800))]

    def transform(full: list, t: Sequence[torch.Tensor]) -> tuple:
        return jvp(bind(op, st, full, s.diff), tuple(full[p] for p in s.diff), tuple(t))[1]

    return per_in_dims(case, tangents, transform,
                       lambda full, t: loop_jvp(op, case.reference, full, s.diff, t),
                       lambda full, t: torch_jvp(op, full, s.diff, t))


def _basis(x: torch.Tensor, i: int) -> torch.Tensor:
    e = torch.zeros(x.numel(), dtype=x.dtype)
    e[i] = 1
    return e.reshape(x.shape)


def _loop_jacfwd(case: Case, args: list, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The forward-mode Jacobian of every differentiable output, one basis tangent at a time."""
    s, ref = case.sample, case.reference
    others = list(s.diff[1:])
    cols = [loop_jvp(case.op, ref, args, [s.diff[0]] + others,
                     [_basis(x, i)] + [torch.zeros_like(args[p]) for p in others])
            for i in range(x.numel())]
    return tuple(torch.stack([c[k] for c in cols], dim=cols[0][k].dim()).reshape(*cols[0][k].shape, *x.shape)
                 for k in range(len(cols[0])))


def jacfwd_scenario(case: Case) -> list[Trial]:
    op, s, st = case.op, case.sample, case.strategy
    p = s.diff[0]

    def call() -> tuple:
        f = bind_callable(op, st.function(op), s.args, [p])
        return tuple(st.transform(jacfwd(lambda x: f(x)))(s.args[p]))

    def loop(xs: list) -> tuple:
        args, _ = _split(case, xs)
        return _loop_jacfwd(case, args, args[p])

    def truth(xs: list) -> tuple:
        args, _ = _split(case, xs)
        f = bind_callable(op, op.torch_op, args, [p])
        return tuple(torch.func.jacfwd(lambda x: f(x))(args[p]))

    return [Trial("", case.arg_inputs(), call, loop, truth)]


def hessian_reference(op: OpSpec, st: Strategy) -> Strategy:
    """The loop reference of ``jacrev_jacfwd``: the out-of-place path (``handfixed``) when the op
    has one, else the strategy's own reference. Not the plain formula: reverse-mode AD through a
    fast path as written fails with autograd's "modified by an inplace operation" error wherever
    the in-place target is a tensor autograd saved (norm_jvp#1, logsumexp_jvp#1,
    logcumsumexp_jvp#1; torch's own ops do the same with plain tensors today)."""
    handfixed = get_strategy("handfixed")
    return (handfixed if handfixed.not_applicable(op, "jacrev_jacfwd") is None
            else get_strategy(st.reference()))


def _loop_hessian(case: Case, args: list, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Reverse over forward, unbatched, of ``<first output, w>``: for each basis tangent e_i its
    tangent by plain forward AD, then differentiated by plain reverse mode. Shape ``(*x, *x)``,
    as ``jacrev(jacfwd(h))(x)``."""
    s, ref = case.sample, hessian_reference(case.op, case.strategy)
    rows = []
    with torch.enable_grad():
        for i in range(x.numel()):
            xr = x.detach().clone().requires_grad_()
            with fwAD.dual_level():
                out = bind(case.op, ref, args, [s.diff[0]])(fwAD.make_dual(xr, _basis(x, i)))[0]
                t = fwAD.unpack_dual(out).tangent
            g = None
            if t is not None and t.requires_grad:
                g = torch.autograd.grad((t * w).sum(), xr, allow_unused=True)[0]
            rows.append(torch.zeros_like(x) if g is None else g)
    return torch.stack(rows).reshape(*x.shape, *x.shape)


def jacrev_jacfwd(case: Case) -> list[Trial]:
    """The hessian of ``<first differentiable output, w>`` (w fixed, random) by reverse over
    forward; the contraction keeps the loop at one reverse pass per input element."""
    op, s, st = case.op, case.sample, case.strategy
    p = s.diff[0]
    with torch.no_grad():
        shape = op.diff_out(op.torch_op(*s.args))[0].shape
    w = case.randn(shape, 900)
    inputs = case.arg_inputs() + [("weights", w)]

    def call() -> tuple:
        f = bind_callable(op, st.function(op), s.args, [p])
        return (st.transform(jacrev(jacfwd(lambda y: (f(y)[0] * w).sum())))(s.args[p]),)

    def loop(xs: list) -> tuple:
        args, (wv,) = _split(case, xs)
        return (_loop_hessian(case, args, args[p], wv),)

    def truth(xs: list) -> tuple:
        args, (wv,) = _split(case, xs)
        f = bind_callable(op, op.torch_op, args, [p])
        return (torch.func.jacrev(torch.func.jacfwd(lambda y: (f(y)[0] * wv).sum()))(args[p]),)

    return [Trial("", inputs, call, loop, truth)]


FORWARD: dict[str, Scenario] = {
    sc.name: sc
    for sc in [
        Scenario("vmap_jvp", "vmap(jvp) over a batch of tangents, primals unbatched (jvp-kind ops)",
                 vmap_jvp, formula_kind="jvp"),
        Scenario("vmap_jvp_all_args", "vmap(jvp) over primals, the other tensor args and tangents, "
                 "each in_dims choice, distinct entries (jvp-kind ops)", vmap_jvp_all_args,
                 formula_kind="jvp"),
        Scenario("jacfwd", "jacfwd(f) (vmap over one-hot tangents; jvp-kind ops)", jacfwd_scenario,
                 formula_kind="jvp"),
        Scenario("jacrev_jacfwd", "jacrev(jacfwd(<f, w>)) (a hessian by reverse over forward; "
                 "jvp-kind ops)", jacrev_jacfwd, formula_kind="jvp"),
    ]
}
