"""Forward-mode scenarios: the transforms that run a jvp-kind op's formula (``OpSpec.kind ==
"jvp"``: the formula under study is the op's forward-mode rule, run by the legacy op's ``jvp``
through the active strategy).

Same contract as :mod:`funcbwd.run.scenarios`: a scenario returns ``(actual, expected)`` as flat
tuples of tensors; the strategy's own part runs inside :meth:`Case.strategy_part`, the per-sample
reference outside it. The reference is the strategy's ``reference()`` (the plain legacy op: the
formula as written) run unbatched under *plain* forward-mode AD (``torch.autograd.forward_ad``
dual tensors, no ``torch.func`` transform), one batch entry or one basis direction at a time.

* ``vmap_jvp``: ``vmap`` over a batch of tangents (distinct seeded random entries), primals
  unbatched: the hazard of a fast path whose in-place target is primal-only.
* ``vmap_jvp_all_args``: primals, the other tensor args and the tangents batched, with distinct
  per-entry values (:func:`funcbwd.run.entries.distinct_entries`), for each in_dims choice of
  PyTorch's test_vmapvjp (as ``vmap_all_args``): the hazard of a target that is tangent-only.
* ``jacfwd``: ``jacfwd`` (vmap over one-hot tangents) of every differentiable output w.r.t. the
  first differentiable arg.
* ``jacrev_jacfwd``: reverse over forward (the Hessian of the first differentiable output
  contracted with fixed random weights), so the formula's own ops are differentiated and batched
  by ``jacrev``'s vmap; its loop reference is the out-of-place path (:func:`hessian_reference`:
  reverse mode through a fast path as written can fail with plain tensors). This replaces
  ``jacfwd_jacrev`` for jvp-kind ops: forward over reverse differentiates the *backward* (torch's
  own for these ops) and discards the output tangents the formula computes, so it would pass a
  wrong formula (checked in tests/test_forward_scenarios.py); it is not applicable to them.

:data:`ALL_SCENARIOS` is every scenario, backward (``scenarios.SCENARIOS``) and forward
(:data:`FORWARD_SCENARIOS`); the runner looks scenarios up there. A scenario runs the formula of
one kind (``Scenario.formula_kind``); for an op of the other kind it is not applicable.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.autograd.forward_ad as fwAD
from torch.func import jacfwd, jacrev, jvp, vmap

from funcbwd.ops.registry import OpSpec, Sample
from funcbwd.run.scenarios import (SCENARIOS, Case, Scenario, bind, stack_loop,
                                   vmap_over_in_dims)
from funcbwd.strategies import Strategy, get_strategy


def _randn(shape: Sequence[int], seed: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _tangents(s: Sample, batch: int | None, seed: int) -> tuple[torch.Tensor, ...]:
    """Seeded random tangents of the sample's differentiable args (with a leading batch dim)."""
    lead = () if batch is None else (batch,)
    return tuple(_randn((*lead, *s.args[p].shape), seed + j, s.args[p].dtype)
                 for j, p in enumerate(s.diff))


def loop_jvp(op: OpSpec, ref: Strategy, args: Sequence[Any], diff: Sequence[int],
             tangents: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """One unbatched jvp with plain forward-mode AD (the loop body): the tangents of the op's
    differentiable outputs (zeros where the output does not depend on the args)."""
    with ref.active(), fwAD.dual_level():
        duals = [fwAD.make_dual(args[p].detach().clone(), t.clone()) for p, t in zip(diff, tangents)]
        outs = bind(op, ref, args, diff)(*duals)
        tans = [fwAD.unpack_dual(o).tangent for o in outs]
        return tuple(torch.zeros_like(fwAD.unpack_dual(o).primal) if t is None else t.clone()
                     for o, t in zip(outs, tans))


# ------------------------------------------------------------------------------ the scenarios
def vmap_jvp(case: Case) -> tuple[tuple, tuple]:
    """vmap over a batch of tangents of ``jvp(f, primals, tangents)``; primals unbatched."""
    op, s, st = case.op, case.sample, case.strategy
    primals = tuple(s.args[p] for p in s.diff)
    tangents = _tangents(s, case.batch, case.seed + 700)
    with case.strategy_part():
        f = bind(op, st, s.args, s.diff)
        actual = st.transform(vmap(lambda *t: jvp(f, primals, t)[1]))(*tangents)
    expected = stack_loop([loop_jvp(op, st.reference(), s.args, s.diff, [t[b] for t in tangents])
                           for b in range(case.batch)])
    return tuple(actual), expected


def vmap_jvp_all_args(case: Case) -> tuple[tuple, tuple]:
    """Every tensor arg (primals and the others) and the tangents batched with distinct entries,
    for each in_dims choice; the first choice that fails or mismatches is reported."""
    op, s, st = case.op, case.sample, case.strategy
    base_tangents = list(_tangents(s, None, case.seed + 800))

    def transform(full: list, tangents: Sequence[torch.Tensor]) -> tuple:
        f = bind(op, st, full, s.diff)
        return jvp(f, tuple(full[p] for p in s.diff), tuple(tangents))[1]

    return vmap_over_in_dims(case, base_tangents, transform,
                             lambda full, tangents: loop_jvp(op, st.reference(), full, s.diff, tangents))


def _outputs_of_first_arg(op: OpSpec, st: Strategy, s: Sample) -> Callable:
    """h(x) -> the differentiable outputs, as a function of the first differentiable arg only."""
    f = bind(op, st, s.args, [s.diff[0]])
    return lambda x: f(x)


def _basis(x: torch.Tensor, i: int) -> torch.Tensor:
    e = torch.zeros(x.numel(), dtype=x.dtype)
    e[i] = 1
    return e.reshape(x.shape)


def _loop_jacfwd(case: Case, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The forward-mode Jacobian of every differentiable output, one basis tangent at a time."""
    s, ref = case.sample, case.strategy.reference()
    others = list(s.diff[1:])
    cols = [loop_jvp(case.op, ref, s.args, [s.diff[0]] + others,
                     [_basis(x, i)] + [torch.zeros_like(s.args[p]) for p in others])
            for i in range(x.numel())]
    return tuple(torch.stack([c[k] for c in cols], dim=cols[0][k].dim()).reshape(*cols[0][k].shape, *x.shape)
                 for k in range(len(cols[0])))


def jacfwd_scenario(case: Case) -> tuple[tuple, tuple]:
    s, st = case.sample, case.strategy
    x = s.args[s.diff[0]]
    with case.strategy_part():
        actual = st.transform(jacfwd(_outputs_of_first_arg(case.op, st, s)))(x)
    return tuple(actual), _loop_jacfwd(case, x)


def hessian_reference(op: OpSpec, st: Strategy) -> Strategy:
    """The loop reference of ``jacrev_jacfwd``: the out-of-place path (``handfixed``) when the op
    has one, else the strategy's own reference. Not the plain formula: reverse-mode AD through a
    fast path as written fails with autograd's "modified by an inplace operation" error wherever
    the in-place target is a tensor autograd saved (norm_jvp#1, logsumexp_jvp#1,
    logcumsumexp_jvp#1; torch's own ops do the same with plain tensors today)."""
    handfixed = get_strategy("handfixed")
    return handfixed if handfixed.not_applicable(op, "jacrev_jacfwd") is None else st.reference()


def _weights(case: Case) -> torch.Tensor:
    """The fixed random weights contracting the first differentiable output to a scalar."""
    s = case.sample
    shape = bind(case.op, case.strategy.reference(), s.args, s.diff)(*[s.args[p] for p in s.diff])[0].shape
    return _randn(shape, case.seed + 900, s.args[s.diff[0]].dtype)


def _loop_hessian(case: Case, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Reverse over forward, unbatched, of ``<first output, w>``: for each basis tangent e_i its
    tangent by plain forward AD, then differentiated by plain reverse mode. Shape ``(*x, *x)``,
    as ``jacrev(jacfwd(h))(x)``."""
    s, ref = case.sample, hessian_reference(case.op, case.strategy)
    rows = []
    with ref.active(), torch.enable_grad():
        for i in range(x.numel()):
            xr = x.detach().clone().requires_grad_()
            with fwAD.dual_level():
                out = bind(case.op, ref, s.args, [s.diff[0]])(fwAD.make_dual(xr, _basis(x, i)))[0]
                t = fwAD.unpack_dual(out).tangent
            g = None
            if t is not None and t.requires_grad:
                g = torch.autograd.grad((t * w).sum(), xr, allow_unused=True)[0]
            rows.append(torch.zeros_like(x) if g is None else g)
    return torch.stack(rows).reshape(*x.shape, *x.shape)


def jacrev_jacfwd(case: Case) -> tuple[tuple, tuple]:
    """The hessian of ``<first differentiable output, w>`` (w fixed, random) by reverse over
    forward; the contraction keeps the loop at one reverse pass per input element."""
    s, st = case.sample, case.strategy
    x = s.args[s.diff[0]]
    w = _weights(case)
    with case.strategy_part():
        h = _outputs_of_first_arg(case.op, st, s)
        actual = st.transform(jacrev(jacfwd(lambda y: (h(y)[0] * w).sum())))(x)
    return (actual,), (_loop_hessian(case, x, w),)


FORWARD_SCENARIOS: dict[str, Scenario] = {
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
FORWARD_SCENARIO_NAMES = tuple(FORWARD_SCENARIOS)
#: every scenario, backward then forward-mode: what the runner accepts
ALL_SCENARIOS: dict[str, Scenario] = {**SCENARIOS, **FORWARD_SCENARIOS}
ALL_SCENARIO_NAMES = tuple(ALL_SCENARIOS)


def scenarios_for(kinds: Sequence[str]) -> list[str]:
    """The scenario names that run formulas of the given op kinds, in :data:`ALL_SCENARIOS` order."""
    return [n for n, sc in ALL_SCENARIOS.items() if sc.formula_kind in set(kinds)]
