"""Transform scenarios: each builds one torch.func composition for an op sample under a strategy
and the matching per-sample Python loop (plain autograd, no transforms) to compare it with.

A scenario function returns ``(actual, expected)`` as flat tuples of tensors. It runs the
strategy's own part inside :meth:`Case.strategy_part` (which activates the strategy and collects
its provenance events) and the per-sample loop outside it. The loop always clones each cotangent
slice (some backwards read absolute storage offsets of views). Batched args are built by
:func:`funcbwd.run.entries.distinct_entries`: every batch entry is its own valid value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.func import jacfwd, vmap

from funcbwd.ops.registry import OpSpec, Sample
from funcbwd.run.compare import check_close
from funcbwd.run.entries import distinct_entries, stacked
from funcbwd.strategies import Strategy, provenance

BATCH = 3
MAX_IN_DIMS_CHOICES = 16


@dataclasses.dataclass(frozen=True)
class Scenario:
    """``needs_jvp``: the scenario runs forward mode over the op, so a strategy that differentiates
    the legacy op (``Strategy.runs_legacy_op``) needs the op's ``OpSpec.jvp``. ``formula_kind``:
    the kind of op (``OpSpec.kind``) whose formula the scenario runs: "backward" here, "jvp" for
    the forward-mode scenarios of :mod:`funcbwd.run.forward_scenarios`."""

    name: str
    description: str
    run: Callable[["Case"], tuple[tuple, tuple]]
    needs_jvp: bool = False
    formula_kind: str = "backward"  # [forward scenarios] which op kind's formula this scenario runs

    def not_applicable(self, op: OpSpec, strategy: Strategy) -> str | None:
        """Why this scenario cannot run ``op`` under ``strategy``, or None."""
        # [forward scenarios] a scenario runs the formulas of one op kind only
        if op.kind != self.formula_kind:
            return (f"{self.name} runs {self.formula_kind} formulas; {op.name}'s formula is a "
                    f"{op.kind} formula (see funcbwd.run.forward_scenarios)")
        if self.needs_jvp and strategy.runs_legacy_op and op.jvp is None:
            return f"legacy {op.name} has no jvp rule ({self.name} needs one)"
        return None


@dataclasses.dataclass
class Case:
    op: OpSpec
    sample: Sample
    strategy: Strategy
    batch: int = BATCH
    seed: int = 0
    #: set by vmap_all_args: the in_dims choice that failed or mismatched first
    detail: str = ""
    #: provenance events the strategy recorded inside :meth:`strategy_part`
    events: list = dataclasses.field(default_factory=list)

    @contextlib.contextmanager
    def strategy_part(self) -> Iterator[Strategy]:
        """The strategy's own part of the cell (never the per-sample loop): the strategy active,
        and what its mechanism records collected into :attr:`events`."""
        with provenance.collecting() as events:
            try:
                with self.strategy.active():
                    yield self.strategy
            finally:
                self.events.extend(events)

    def entries(self, values: Sequence[torch.Tensor], positions: Sequence[int | None]) -> list:
        """Distinct batch entries of ``values`` (sample-arg ``positions``, None for cotangents)."""
        return distinct_entries(values, self.batch, self.seed, op=self.op, positions=positions)


# ------------------------------------------------------------------------------ building blocks
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(shape: Sequence[int], seed: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=_gen(seed), dtype=dtype)


def bind(op: OpSpec, strategy: Strategy, args: Sequence[Any], diff: Sequence[int]) -> Callable:
    """f(*diff_tensors) -> tuple of the op's differentiable outputs, other args fixed."""
    fn = strategy.function(op)

    def f(*d: torch.Tensor) -> tuple[torch.Tensor, ...]:
        full = list(args)
        for p, v in zip(diff, d):
            full[p] = v
        return op.diff_out(fn(*full))

    return f


def _zeros_for_none(grads: Sequence[torch.Tensor | None], like: Sequence[torch.Tensor]) -> tuple:
    return tuple(torch.zeros_like(l) if g is None else g for g, l in zip(grads, like))


def loop_vjp(op: OpSpec, ref: Strategy, args: Sequence[Any], diff: Sequence[int],
             cts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """One unbatched vjp with plain autograd (the loop body)."""
    with ref.active(), torch.enable_grad():
        prim = [args[p].detach().clone().requires_grad_() for p in diff]
        outs = bind(op, ref, args, diff)(*prim)
        grads = torch.autograd.grad(outs, prim, [c.clone() for c in cts], allow_unused=True)
    return _zeros_for_none(grads, prim)


def stack_loop(results: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.stack(parts) for parts in zip(*results))


def output_shapes(op: OpSpec, sample: Sample) -> list[torch.Size]:
    with torch.no_grad():
        return [o.shape for o in op.diff_out(op.torch_op(*sample.args))]


def slice_arg(a: torch.Tensor, b: int, in_dim: int | None) -> torch.Tensor:
    return a if in_dim is None else a.select(in_dim, b).clone()


def in_dims_choices(n: int, cap: int | None = MAX_IN_DIMS_CHOICES) -> list[tuple[int | None, ...]]:
    """PyTorch's test_vmapvjp choices: all 0, then every (-1, None) combination except all-None."""
    choices: list[tuple[int | None, ...]] = [(0,) * n]
    for combo in itertools.product((-1, None), repeat=n):
        if any(c is not None for c in combo):
            choices.append(combo)
    return choices if cap is None else choices[:cap]


# ------------------------------------------------------------------------------ the scenarios
def vmap_cotangents(case: Case) -> tuple[tuple, tuple]:
    op, s, st = case.op, case.sample, case.strategy
    primals = [s.args[p] for p in s.diff]
    shapes = output_shapes(op, s)
    cts = tuple(_randn((case.batch, *sh), case.seed + 100 + i, s.args[s.diff[0]].dtype)
                for i, sh in enumerate(shapes))
    def composed(*c: torch.Tensor) -> tuple:
        _, vjp_fn = st.vjp(bind(op, st, s.args, s.diff), *primals)
        return vmap(lambda *ci: vjp_fn(ci))(*c)

    with case.strategy_part():
        actual = st.transform(composed)(*cts)
    expected = stack_loop([loop_vjp(op, st.reference(), s.args, s.diff, [c[b] for c in cts])
                           for b in range(case.batch)])
    return tuple(actual), expected


def vmap_all_args(case: Case) -> tuple[tuple, tuple]:
    """All tensor args (primals, index/mask/min/max) and cotangents batched, for each in_dims choice
    as PyTorch's test_vmapvjp does; the first choice that fails or mismatches is reported. Batched
    args take distinct entries (:func:`funcbwd.run.entries.distinct_entries`); an unbatched arg is
    the sample's value (entry 0)."""
    op, s, st = case.op, case.sample, case.strategy
    shapes = output_shapes(op, s)
    dtype = s.args[s.diff[0]].dtype
    base_cts = [_randn(sh, case.seed + 200 + i, dtype) for i, sh in enumerate(shapes)]

    def transform(full: list, cts: Sequence[torch.Tensor]) -> tuple:
        _, vjp_fn = st.vjp(bind(op, st, full, s.diff), *[full[p] for p in s.diff])
        return vjp_fn(tuple(cts))

    return vmap_over_in_dims(case, base_cts, transform,
                             lambda full, cts: loop_vjp(op, st.reference(), full, s.diff, cts))


def vmap_over_in_dims(case: Case, extras: Sequence[torch.Tensor],
                      transform: Callable[[list, Sequence[torch.Tensor]], tuple],
                      reference: Callable[[list, Sequence[torch.Tensor]], tuple]) -> tuple[tuple, tuple]:
    """The all-args driver shared by :func:`vmap_all_args` and the forward-mode
    ``vmap_jvp_all_args``: the sample's tensor args followed by ``extras`` (cotangents or
    tangents), batched with distinct entries (:meth:`Case.entries`) for each choice of
    :func:`in_dims_choices`. ``transform(full_args, extras)`` runs under ``vmap`` (inside the
    strategy part) and ``reference(full_args, extras)`` once per batch entry (the per-sample loop),
    where ``full_args`` is the sample's args with the tensor args replaced. Each choice is
    compared with :func:`funcbwd.run.compare.check_close` (so the first choice that fails or
    mismatches is reported, named in ``case.detail``); returns every choice's results, concatenated."""
    s = case.sample
    tpos = s.tensor_positions()
    unbatched = [s.args[p] for p in tpos] + list(extras)
    entries = case.entries(unbatched, list(tpos) + [None] * len(extras))
    n = len(unbatched)
    actual_all: list[torch.Tensor] = []
    expected_all: list[torch.Tensor] = []

    def full_args(xs: Sequence[torch.Tensor]) -> list:
        full = list(s.args)
        for p, v in zip(tpos, xs[:len(tpos)]):
            full[p] = v
        return full

    for in_dims in in_dims_choices(n):
        case.detail = f"in_dims={in_dims}"
        batched = [a if d is None else stacked(e, d) for a, e, d in zip(unbatched, entries, in_dims)]

        def h(*xs: torch.Tensor) -> tuple:
            return transform(full_args(xs), xs[len(tpos):])

        with case.strategy_part():
            actual = case.strategy.transform(vmap(h, in_dims=in_dims))(*batched)
        loop = []
        for b in range(case.batch):
            xs = [slice_arg(a, b, d) for a, d in zip(batched, in_dims)]
            loop.append(reference(full_args(xs), xs[len(tpos):]))
        expected = stack_loop(loop)
        check_close(actual, expected, case.detail)  # report the first bad in_dims choice
        actual_all.extend(actual)
        expected_all.extend(expected)
    case.detail = f"{len(in_dims_choices(n))} in_dims choices"
    return tuple(actual_all), tuple(expected_all)


def vjp_of_vjp(case: Case) -> tuple[tuple, tuple]:
    """vmap over the outer cotangent of vjp(g), where g(primals, ct) = vjp(f, primals)(ct)."""
    op, s, st = case.op, case.sample, case.strategy
    primals = [s.args[p] for p in s.diff]
    k = len(primals)
    shapes = output_shapes(op, s)
    dtype = primals[0].dtype
    cts1 = [_randn(sh, case.seed + 300 + i, dtype) for i, sh in enumerate(shapes)]

    def g1(*xs: torch.Tensor) -> tuple:
        _, vjp_fn = st.vjp(bind(op, st, s.args, s.diff), *xs[:k])
        return vjp_fn(tuple(xs[k:]))

    inner_shapes = [p.shape for p in primals]  # g1 returns one grad per primal
    cts2 = tuple(_randn((case.batch, *sh), case.seed + 400 + j, dtype)
                 for j, sh in enumerate(inner_shapes))

    def composed(*c: torch.Tensor) -> tuple:
        _, vjp2 = st.vjp(g1, *primals, *cts1)
        return vmap(lambda *ci: vjp2(ci))(*c)

    with case.strategy_part():
        actual = st.transform(composed)(*cts2)

    ref = st.reference()
    with ref.active(), torch.enable_grad():
        prim = [p.detach().clone().requires_grad_() for p in primals]
        c1 = [c.detach().clone().requires_grad_() for c in cts1]
        outs = bind(op, ref, s.args, s.diff)(*prim)
        g = torch.autograd.grad(outs, prim, c1, create_graph=True, allow_unused=True)
        g = [x for x in g]
        loop = []
        for b in range(case.batch):
            pairs = [(gi, c[b].clone()) for gi, c in zip(g, cts2) if gi is not None and gi.requires_grad]
            if pairs:
                r = torch.autograd.grad([p[0] for p in pairs], prim + c1, [p[1] for p in pairs],
                                        retain_graph=True, allow_unused=True)
            else:
                r = [None] * (len(prim) + len(c1))
            loop.append(_zeros_for_none(r, prim + c1))
    return tuple(actual), stack_loop(loop)


def grad_inside_vmap(case: Case) -> tuple[tuple, tuple]:
    """vmap over primals and cotangents of ``grad`` (a grad transform above the vmap level);
    non-differentiable args (index, mask) unbatched."""
    op, s, st = case.op, case.sample, case.strategy
    k = len(s.diff)
    primals = [stacked(e, 0) for e in case.entries([s.args[p] for p in s.diff], s.diff)]
    shapes = output_shapes(op, s)
    dtype = primals[0].dtype
    cts = [_randn((case.batch, *sh), case.seed + 500 + i, dtype) for i, sh in enumerate(shapes)]

    def h(*xs: torch.Tensor) -> tuple:
        f = bind(op, st, s.args, s.diff)

        def loss(*p: torch.Tensor) -> torch.Tensor:
            return sum((o * c).sum() for o, c in zip(f(*p), xs[k:]))

        return st.grad(loss, argnums=tuple(range(k)))(*xs[:k])

    with case.strategy_part():
        actual = st.transform(vmap(h))(*primals, *cts)
    loop = []
    for b in range(case.batch):
        full = list(s.args)
        for p, v in zip(s.diff, primals):
            full[p] = v[b]
        loop.append(loop_vjp(op, st.reference(), full, s.diff, [c[b] for c in cts]))
    return tuple(actual), stack_loop(loop)


def _single(op: OpSpec, st: Strategy, s: Sample, x_pos: int) -> Callable:
    """h(x) -> first differentiable output, every other arg fixed (for the jacobian scenarios)."""
    fn = bind(op, st, s.args, [x_pos])
    return lambda x: fn(x)[0]


def loop_jacobian(h: Callable, x: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
    out = h(x)
    rows = []
    flat = out.reshape(-1)
    for i in range(flat.numel()):
        if flat.requires_grad:
            (g,) = torch.autograd.grad(flat[i], x, retain_graph=True, create_graph=create_graph,
                                       allow_unused=True)
        else:
            g = None
        rows.append(torch.zeros_like(x) if g is None else g)
    return torch.stack(rows).reshape(*out.shape, *x.shape) if rows else out.new_zeros(*out.shape, *x.shape)


def _loop_jac_ref(case: Case, x: torch.Tensor, order: int) -> torch.Tensor:
    ref = case.strategy.reference()
    with ref.active(), torch.enable_grad():
        xr = x.detach().clone().requires_grad_()
        h = _single(case.op, ref, case.sample, case.sample.diff[0])
        if order == 1:
            return loop_jacobian(h, xr)
        return loop_jacobian(lambda y: loop_jacobian(h, y, create_graph=True), xr)


def jacrev(case: Case) -> tuple[tuple, tuple]:
    s, st = case.sample, case.strategy
    x = s.args[s.diff[0]]
    with case.strategy_part():
        actual = st.transform(st.jacrev(_single(case.op, st, s, s.diff[0])))(x)
    return (actual,), (_loop_jac_ref(case, x, 1),)


def jacrev_jacrev(case: Case) -> tuple[tuple, tuple]:
    s, st = case.sample, case.strategy
    x = s.args[s.diff[0]]
    with case.strategy_part():
        actual = st.transform(st.jacrev(st.jacrev(_single(case.op, st, s, s.diff[0]))))(x)
    return (actual,), (_loop_jac_ref(case, x, 2),)


def jacfwd_jacrev(case: Case) -> tuple[tuple, tuple]:
    s, st = case.sample, case.strategy
    x = s.args[s.diff[0]]
    with case.strategy_part():
        actual = st.transform(jacfwd(st.jacrev(_single(case.op, st, s, s.diff[0]))))(x)
    return (actual,), (_loop_jac_ref(case, x, 2),)


def vmap_jacrev(case: Case) -> tuple[tuple, tuple]:
    s, st = case.sample, case.strategy
    x = s.args[s.diff[0]]
    (xb,) = [stacked(e, 0) for e in case.entries([x], [s.diff[0]])]
    with case.strategy_part():
        actual = st.transform(vmap(st.jacrev(_single(case.op, st, s, s.diff[0]))))(xb)
    expected = torch.stack([_loop_jac_ref(case, xb[b], 1) for b in range(case.batch)])
    return (actual,), (expected,)


SCENARIOS: dict[str, Scenario] = {
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
SCENARIO_NAMES = tuple(SCENARIOS)
