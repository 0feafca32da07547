"""The caller's tensors are the caller's: snapshots, changes, and fresh copies for each reference.

A scenario names every tensor it creates and hands to a strategy (the sample's tensor args,
cotangents, tangents, batched or not): its *inputs*. Before the strategy's part runs, the runner
takes a :class:`Snapshot` (a clone of each); afterwards :meth:`Snapshot.changes` says which
input the call changed and by how much; each reference (the per-sample loop, torch's own
gradient) then runs on :meth:`Snapshot.fresh` copies, so no run sees another run's mutation.

What eager autograd would change too is a property of the *formula* (e.g. a backward that does
``grad.mul_(2)``: core's own Functions are told not to), not a failure of the strategy:
:func:`eager_changes` runs the formula once with plain autograd (no transform) on copies and
reports which of its args and cotangents (tangents, for a jvp-kind op) it wrote to.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch
import torch.autograd.forward_ad as fwAD

from funcbwd.ops.registry import OpSpec, Sample


@dataclasses.dataclass(frozen=True)
class Change:
    """Caller tensor ``tensor`` differs after the call by at most ``max_abs_change``;
    ``eager_too``: plain eager autograd changes it as well (a property of the formula)."""

    tensor: str
    max_abs_change: float
    eager_too: bool = False

    def record(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "max_abs_change": self.max_abs_change,
                "eager_too": self.eager_too}


def _difference(now: torch.Tensor, before: torch.Tensor) -> float:
    """Max abs difference (inf for a changed shape/dtype; NaN positions compared as equal)."""
    if now.shape != before.shape or now.dtype != before.dtype:
        return math.inf
    if not now.numel():
        return 0.0
    if not (now.is_floating_point() or now.is_complex()):
        return 0.0 if torch.equal(now, before) else float((now.double() - before.double()).abs().max())
    a, b = now.detach().double(), before.detach().double()
    if now.is_complex():
        a, b = torch.view_as_real(now.detach()).double(), torch.view_as_real(before.detach()).double()
    same = (a == b) | (a.isnan() & b.isnan())
    return 0.0 if bool(same.all()) else float((a - b).abs().masked_fill(same, 0).max())


@dataclasses.dataclass
class Snapshot:
    """Named caller tensors and a copy of each taken before the call."""

    names: list[str]
    tensors: list[torch.Tensor]
    copies: list[torch.Tensor]

    @classmethod
    def of(cls, inputs: Sequence[tuple[str, torch.Tensor]]) -> "Snapshot":
        names = [n for n, _ in inputs]
        tensors = [t for _, t in inputs]
        return cls(names, tensors, [t.detach().clone() for t in tensors])

    def changes(self) -> list[Change]:
        out = []
        for name, now, before in zip(self.names, self.tensors, self.copies):
            d = _difference(now, before)
            if d != 0.0:
                out.append(Change(name, d))
        return out

    def fresh(self) -> list[torch.Tensor]:
        """New copies of the inputs as they were before the call (for one reference run)."""
        return [c.clone() for c in self.copies]

    def restore(self) -> None:
        """Put the before-values back into the caller's tensors (after a reported change)."""
        with torch.no_grad():
            for t, c in zip(self.tensors, self.copies):
                if t.shape == c.shape and t.dtype == c.dtype:
                    t.copy_(c)


def eager_changes(op: OpSpec, sample: Sample, reference: Any) -> dict[str, float]:
    """Which caller tensors plain eager autograd changes when ``op``'s formula runs (name ->
    max abs change): the sample's tensor args (``"arg P"``) and the cotangents
    (``"cotangent I"``; ``"tangent I"`` for a jvp-kind op), under ``reference`` (a strategy whose
    ``function(op)`` runs the formula as written)."""
    args = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in sample.args]
    named = [(f"arg {p}", args[p]) for p in sample.tensor_positions()]
    fn = reference.function(op)
    gen = torch.Generator().manual_seed(1234)
    if op.kind == "jvp":
        tangents = [torch.randn(args[p].shape, generator=gen, dtype=args[p].dtype)
                    for p in sample.diff]
        named += [(f"tangent {i}", t) for i, t in enumerate(tangents)]
        snap = Snapshot.of(named)
        with fwAD.dual_level():
            full = list(args)
            for p, t in zip(sample.diff, tangents):
                full[p] = fwAD.make_dual(args[p], t)
            fn(*full)
    else:
        prim = {p: args[p].requires_grad_() for p in sample.diff}
        with torch.enable_grad():
            outs = op.diff_out(fn(*args))
        cts = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
        named += [(f"cotangent {i}", c) for i, c in enumerate(cts)]
        snap = Snapshot.of(named)
        torch.autograd.grad(outs, list(prim.values()), cts, allow_unused=True)
    return {c.tensor: c.max_abs_change for c in snap.changes()}
