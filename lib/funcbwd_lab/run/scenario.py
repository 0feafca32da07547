"""What a scenario is: trials of one torch.func composition, each with its two references.

A :class:`Scenario` turns a :class:`Case` (op, sample, strategy, batch size, seed) into one or more
:class:`Trial` s (one per in_dims choice for the all-arguments scenarios). A trial holds:

* ``inputs``: every tensor the scenario creates and hands to the strategy, named (``"arg P"`` for
  the sample's tensor args, ``"cotangent I"``, ``"tangent I"``, ``"outer cotangent I"``): the
  caller's tensors, which the runner snapshots (:mod:`funcbwd_lab.run.caller`);
* ``call()``: the strategy's part, the composed transform call run through
  ``strategy.transform`` on those inputs;
* ``loop(xs)``: the per-sample reference of the formula under study (the strategy's
  ``reference()``, plain autograd, no transforms), on fresh copies ``xs`` of the inputs;
* ``truth(xs)``: the same composition per sample on *torch's own op* through ``torch.func``
  (no batching of ours), or None where the scenario has none.

The building blocks below (binding an op's differentiable args, the loops, in_dims choices) are
shared by the backward (:mod:`funcbwd_lab.run.backward`) and forward-mode
(:mod:`funcbwd_lab.run.forward`) scenarios.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any, Callable, Iterator, Sequence

import torch

from funcbwd_lab.ops.registry import OpSpec, Sample
from funcbwd_lab.run.entries import distinct_entries, stacked
from funcbwd_lab.strategies import Strategy, get_strategy, provenance

BATCH = 3
MAX_IN_DIMS_CHOICES = 16
Tensors = Sequence[torch.Tensor]


@dataclasses.dataclass
class Trial:
    """One comparison: the strategy's ``call`` on named caller ``inputs`` against ``loop`` and
    ``truth`` run on fresh copies of those inputs (see the module docstring)."""

    label: str
    inputs: list[tuple[str, torch.Tensor]]
    call: Callable[[], tuple]
    loop: Callable[[list[torch.Tensor]], tuple]
    truth: Callable[[list[torch.Tensor]], tuple] | None = None
    #: each input's batch dim (None: unbatched); default: inferred from the shapes
    #: (:func:`funcbwd_lab.run.caller.eager_after`)
    bdims: list[int | None] | None = None


@dataclasses.dataclass(frozen=True)
class Scenario:
    """``trials(case)`` builds the trials. ``needs_jvp``: the scenario runs forward mode over the
    op, so a strategy that differentiates the legacy op needs ``OpSpec.jvp``. ``formula_kind``:
    the kind of op (``OpSpec.kind``) whose formula the scenario runs."""

    name: str
    description: str
    trials: Callable[["Case"], list[Trial]]
    needs_jvp: bool = False
    formula_kind: str = "backward"
    #: False for a composition with no backward pass (forward mode only): strategies that act on
    #: backward passes only (``Strategy.backward_only``) do not apply
    has_backward: bool = True
    #: "matrix" (the workbench's scenarios, run by default) or "functorch" (the compositions of
    #: PyTorch's test_ops.py, run by the OpInfo sweep and on request)
    group: str = "matrix"

    def run(self, case: "Case") -> list[tuple]:
        """Only the strategy's part of every trial, nothing compared: the results, or what the
        strategy's calls raise (for tests and probes of failure behaviour; cells use
        :func:`funcbwd_lab.run.runner.run`)."""
        out = []
        for trial in self.trials(case):
            with case.strategy_part():
                out.append(tuple(trial.call()))
        return out

    def not_applicable(self, op: OpSpec, strategy: Strategy) -> str | None:
        """Why this scenario cannot run ``op`` under ``strategy``, or None."""
        if op.kind != self.formula_kind:
            return (f"{self.name} runs {self.formula_kind} formulas; {op.name}'s formula is a "
                    f"{op.kind} formula")
        if self.needs_jvp and strategy.runs_legacy_op and op.formula is not None and op.jvp is None:
            return f"legacy {op.name} has no jvp rule ({self.name} needs one)"
        if not self.has_backward and strategy.backward_only:
            return (f"{strategy.name} acts on backward passes only; {self.name} runs forward mode "
                    "only")
        return None


@dataclasses.dataclass
class Case:
    op: OpSpec
    sample: Sample
    strategy: Strategy
    batch: int = BATCH
    seed: int = 0
    #: "distinct" (every batch entry its own value, :mod:`funcbwd_lab.run.entries`) or "copies"
    #: (every entry the sample itself: upstream's method, for ops whose distinct entries are not
    #: valid inputs)
    entries_kind: str = "distinct"
    #: provenance events the strategy recorded inside :meth:`strategy_part`
    events: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        #: the strategy whose per-sample loop this case is checked against (resolved once): for
        #: an op without a legacy formula (OpInfo), torch's own op under plain autograd
        self.reference: Strategy = get_strategy("builtin" if self.op.formula is None
                                                else self.strategy.reference())

    @property
    def dtype(self) -> torch.dtype:
        return self.sample.args[self.sample.diff[0]].dtype

    @contextlib.contextmanager
    def strategy_part(self) -> Iterator[Strategy]:
        """The strategy's own part of the cell (never a reference): what
        its mechanism records collected into :attr:`events`."""
        with provenance.collecting() as events:
            try:
                yield self.strategy
            finally:
                self.events.extend(events)

    def entries(self, values: Tensors, positions: Sequence[int | None]) -> list:
        """Batch entries of ``values`` (sample-arg ``positions``, None for cotangents): distinct,
        or copies (:attr:`entries_kind`)."""
        if self.entries_kind == "copies":
            return [[v.detach().clone() for _ in range(self.batch)] for v in values]
        return distinct_entries(values, self.batch, self.seed, op=self.op, positions=positions)

    def randn(self, shape: Sequence[int], offset: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Seeded normal values of ``dtype`` (default: the case's; ``offset`` keeps draws apart)."""
        gen = torch.Generator().manual_seed(self.seed + offset)
        return torch.randn(tuple(shape), generator=gen, dtype=dtype or self.dtype)

    def cotangents(self, offset: int, batched: bool) -> list[torch.Tensor]:
        """Seeded random cotangents, one per differentiable output, of its shape and dtype
        (complex outputs get complex cotangents), with a leading batch dim if ``batched``."""
        lead = (self.batch,) if batched else ()
        return [self.randn((*lead, *sh), offset + i, dt)
                for i, (sh, dt) in enumerate(output_specs(self.op, self.sample))]

    def arg_inputs(self) -> list[tuple[str, torch.Tensor]]:
        """The sample's tensor args as named caller inputs."""
        return [(f"arg {p}", self.sample.args[p]) for p in self.sample.tensor_positions()]


# ------------------------------------------------------------------------------ building blocks
def with_args(sample: Sample, positions: Sequence[int], values: Sequence[Any]) -> list:
    """The sample's args with the args at ``positions`` replaced by ``values``."""
    full = list(sample.args)
    for p, v in zip(positions, values):
        full[p] = v
    return full


def bind(op: OpSpec, strategy: Strategy, args: Sequence[Any], diff: Sequence[int]) -> Callable:
    """f(*diff_tensors) -> the op's differentiable outputs under ``strategy``, other args fixed."""
    return bind_callable(op, strategy.function(op), args, diff)


def torch_bind(op: OpSpec, args: Sequence[Any], diff: Sequence[int]) -> Callable:
    """As :func:`bind`, on torch's own op (the truth references)."""
    return bind_callable(op, op.torch_op, args, diff)


def bind_callable(op: OpSpec, fn: Callable, args: Sequence[Any], diff: Sequence[int]) -> Callable:
    def f(*d: torch.Tensor) -> tuple[torch.Tensor, ...]:
        full = list(args)
        for p, v in zip(diff, d):
            full[p] = v
        return op.diff_out(fn(*full))

    return f


def zeros_for_none(grads: Sequence[torch.Tensor | None], like: Tensors) -> tuple:
    return tuple(torch.zeros_like(l) if g is None else g for g, l in zip(grads, like))


def loop_vjp(op: OpSpec, ref: Strategy, args: Sequence[Any], diff: Sequence[int],
             cts: Tensors) -> tuple[torch.Tensor, ...]:
    """One unbatched vjp with plain autograd (the loop body)."""
    with torch.enable_grad():
        prim = [args[p].detach().clone().requires_grad_() for p in diff]
        outs = bind(op, ref, args, diff)(*prim)
        # outputs that do not depend on the args (e.g. a statistic of no grad) contribute nothing
        pairs = [(o, c.clone()) for o, c in zip(outs, cts) if o.requires_grad]
        grads = (torch.autograd.grad([o for o, _ in pairs], prim, [c for _, c in pairs],
                                     allow_unused=True) if pairs else [None] * len(prim))
    return zeros_for_none(grads, prim)


def torch_vjp(op: OpSpec, args: Sequence[Any], diff: Sequence[int], cts: Tensors) -> tuple:
    """One unbatched vjp of torch's own op through ``torch.func`` (the truth body)."""
    _, vjp_fn = torch.func.vjp(torch_bind(op, args, diff), *[args[p] for p in diff])
    return tuple(vjp_fn(tuple(c.clone() for c in cts)))


def stack_loop(results: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.stack(parts) for parts in zip(*results))


def output_specs(op: OpSpec, sample: Sample) -> list[tuple[torch.Size, torch.dtype]]:
    """(shape, dtype) of each differentiable output of the op on the sample."""
    with torch.no_grad():
        return [(o.shape, o.dtype) for o in op.diff_out(op.torch_op(*sample.args))]


def output_shapes(op: OpSpec, sample: Sample) -> list[torch.Size]:
    return [sh for sh, _ in output_specs(op, sample)]


def slice_arg(a: torch.Tensor, b: int, in_dim: int | None) -> torch.Tensor:
    return a if in_dim is None else a.select(in_dim, b).clone()


def in_dims_choices(n: int, cap: int | None = MAX_IN_DIMS_CHOICES) -> list[tuple[int | None, ...]]:
    """PyTorch's test_vmapvjp choices: all 0, then every (-1, None) combination except all-None."""
    choices: list[tuple[int | None, ...]] = [(0,) * n]
    for combo in itertools.product((-1, None), repeat=n):
        if any(c is not None for c in combo):
            choices.append(combo)
    return choices if cap is None else choices[:cap]


def per_in_dims(case: Case, extras: list[tuple[str, torch.Tensor]],
                transform: Callable[[list, Tensors], tuple],
                loop_body: Callable[[list, Tensors], tuple],
                truth_body: Callable[[list, Tensors], tuple] | None) -> list[Trial]:
    """The all-arguments trials (``vmap_all_args``, ``vmap_jvp_all_args``): the sample's tensor
    args followed by ``extras`` (named cotangents or tangents), batched with distinct entries
    for each choice of :func:`in_dims_choices`. ``transform(full_args, extras)`` runs under
    ``vmap`` in the strategy's part; ``loop_body`` / ``truth_body`` run once per batch entry on
    that entry's slices (``full_args`` is the sample's args with the tensor args replaced)."""
    s = case.sample
    tpos = s.tensor_positions()
    names = [f"arg {p}" for p in tpos] + [n for n, _ in extras]
    unbatched = [s.args[p] for p in tpos] + [t for _, t in extras]
    entries = case.entries(unbatched, list(tpos) + [None] * len(extras))
    k = len(tpos)
    trials = []
    for in_dims in in_dims_choices(len(unbatched)):
        batched = [a if d is None else stacked(e, d) for a, e, d in zip(unbatched, entries, in_dims)]

        def h(*xs: torch.Tensor) -> tuple:
            return transform(with_args(s, tpos, xs[:k]), xs[k:])

        def call(batched=batched, in_dims=in_dims, h=h) -> tuple:
            return case.strategy.transform(torch.func.vmap(h, in_dims=in_dims))(*batched)

        def per_sample(body, in_dims=in_dims):
            def run(xs: list[torch.Tensor]) -> tuple:
                out = []
                for b in range(case.batch):
                    sl = [slice_arg(a, b, d) for a, d in zip(xs, in_dims)]
                    out.append(body(with_args(s, tpos, sl[:k]), sl[k:]))
                return stack_loop(out)
            return run

        trials.append(Trial(f"in_dims={in_dims}", list(zip(names, batched)), call,
                            per_sample(loop_body), per_sample(truth_body) if truth_body else None,
                            bdims=list(in_dims)))
    return trials
