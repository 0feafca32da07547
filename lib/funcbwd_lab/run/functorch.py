"""functorch's compositions as scenarios of the engine (group "functorch"): ``vmapvjp``,
``vmapvjpvjp``, ``vmapjvpvjp``, ``vmapjvpall``, ``vjpvmap``, named as PyTorch's
``test/functorch/test_ops.py`` names its tests and built as it builds them
(:mod:`funcbwd_lab.run.compositions`), over every in_dims choice its generator makes (no cap,
:mod:`funcbwd_lab.run.vmap_inputs`), each followed by its vmap-of-vmap check.

For a case (op, sample, strategy) the composition is built three times from the same seeded
generator, so cotangents and tangents are the same draws: with the strategy's callable for the op
(what runs batched, through the strategy's ``vjp`` and ``transform``), with the reference's (the
per-sample loop: plain autograd over torch.func's unbatched composition of the legacy op, or of
torch's op for an OpInfo op) and with torch's own op (the truth, where the op has a legacy formula).
Each in_dims choice is a trial; so is its vmap-of-vmap call (``vmap(vmap(f, (0, None...)), (0,
*in_dims))`` with a dummy outer batch: it must equal the loop with a size-1 dim at 1), except for
``vjpvmap``, which upstream checks without one. Batch entries are the engine's (distinct by
default), not upstream's copies.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch

from funcbwd_lab.run.compositions import BUILDERS, Composition, VjpOfVmap
from funcbwd_lab.run.scenario import Case, Scenario, Trial

SEED_OFFSET = 1000


@dataclasses.dataclass(frozen=True)
class SampleView:
    """What the builders read of an OpInfo ``SampleInput``, made from a case's sample: its flat
    args, the differentiable ones requiring grad."""

    input: Any
    args: tuple
    kwargs: dict
    output_process_fn_grad: Callable | None = None


def sample_view(case: Case) -> SampleView:
    s = case.sample
    args = [a.detach().requires_grad_(i in s.diff)
            if isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
            else (a.detach() if isinstance(a, torch.Tensor) else a) for i, a in enumerate(s.args)]
    return SampleView(args[0], tuple(args[1:]), {})


def _build(name: str, fn: Callable, case: Case) -> Composition:
    gen = torch.Generator().manual_seed(case.seed + SEED_OFFSET)
    return BUILDERS[name](lambda *a: fn(*a), sample_view(case), gen, name=case.op.name)


def _entries_of(c: Composition, xs: Sequence[torch.Tensor], in_dims: Sequence, batch: int) -> list:
    """The batch entries of ``c.tensors()`` from (fresh copies of) the batched tensors ``xs``."""
    out = []
    for x, i in zip(xs, c.tensor_positions()):
        d = in_dims[i]
        out.append([x.select(d, b) for b in range(batch)] if d is not None else [x] * batch)
    return out


def composition_trials(name: str) -> Callable[[Case], list[Trial]]:
    def trials(case: Case) -> list[Trial]:
        op, st = case.op, case.strategy
        act = _build(name, st.function(op), case)
        ref = _build(name, case.reference.function(op), case)
        tru = _build(name, op.torch_op, case) if op.formula is not None else None
        positions = act.tensor_positions()
        entries = case.entries(act.tensors(), [None] * len(positions))
        names = [f"{act.roles[i]} {k}" for k, i in enumerate(positions)]
        out = []
        for in_dims in act.in_dims():
            batched = act.batched(in_dims, entries)
            inputs = [(n, batched[i]) for n, i in zip(names, positions)]

            def with_tensors(xs: Sequence[torch.Tensor], batched=batched) -> list:
                full = list(batched)
                for x, i in zip(xs, positions):
                    full[i] = x
                return full

            def reference(c: Composition | None, in_dims=in_dims) -> Callable | None:
                if c is None:
                    return None
                return lambda xs: c.expected(in_dims, _entries_of(c, xs, in_dims, case.batch))

            def call(in_dims=in_dims, batched=batched) -> tuple:
                return act.actual(in_dims, batched, vjp=st.vjp, transform=st.transform)

            label = f"in_dims={tuple(in_dims)}"
            bdims = [in_dims[i] for i in positions]
            out.append(Trial(label, inputs, call, reference(ref), reference(tru), bdims=bdims))
            if isinstance(act, VjpOfVmap):
                continue

            def nested(in_dims=in_dims, batched=batched) -> tuple:
                return act.nested_actual(in_dims, batched, case.batch, vjp=st.vjp,
                                         transform=st.transform)

            def unsqueezed(c: Composition | None, in_dims=in_dims) -> Callable | None:
                base = reference(c, in_dims)
                return None if base is None else (lambda xs: tuple(t.unsqueeze(1) for t in base(xs)))

            out.append(Trial("vmap(vmap) " + label, inputs, nested, unsqueezed(ref), unsqueezed(tru),
                             bdims=bdims))
        return out

    return trials


_DESCRIPTIONS = {
    "vmapvjp": "vmap over vjp of every flat arg and cotangent (test_vmapvjp), each in_dims choice",
    "vmapvjpvjp": "vmap over vjp of vjp (test_vmapvjpvjp): primals, cotangents and the outer ones",
    "vmapjvpvjp": "vmap over jvp of vjp, forward over reverse (test_vmapjvpvjp)",
    "vmapjvpall": "vmap over jvp of every floating arg and its tangent (test_vmapjvpall)",
    "vjpvmap": "vjp of vmap(op), each in_dims choice (test_vjpvmap)",
}

FUNCTORCH: dict[str, Scenario] = {
    name: Scenario(name, _DESCRIPTIONS[name], composition_trials(name),
                   needs_jvp=name in ("vmapjvpvjp", "vmapjvpall"),
                   has_backward=name != "vmapjvpall", group="functorch")
    for name in BUILDERS
}
