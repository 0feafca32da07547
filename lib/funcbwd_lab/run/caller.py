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

from funcbwd_lab.ops.registry import OpSpec, Sample


@dataclasses.dataclass(frozen=True)
class Change:
    """Caller tensor ``tensor`` differs after the call by at most ``max_abs_change``;
    ``eager_too``: plain eager autograd leaves it with the same values (a property of the
    formula; compared by value, :func:`eager_after`); ``vs_eager``: the max abs difference between
    the strategy's and eager's values after the call (None: eager has no value for that tensor)."""

    tensor: str
    max_abs_change: float
    eager_too: bool = False
    vs_eager: float | None = None

    def record(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "max_abs_change": self.max_abs_change,
                "eager_too": self.eager_too, "vs_eager": self.vs_eager}


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


def _eager_once(op: OpSpec, sample: Sample, reference: Any, values: dict[str, torch.Tensor]) -> None:
    """Run ``op``'s formula once with plain eager autograd on ``values`` (named ``"arg P"``,
    ``"cotangent I"``, ``"tangent I"``; unnamed ones are the sample's args or seeded random
    cotangents/tangents), letting it write into them."""
    args = [values.get(f"arg {p}", a.detach().clone() if isinstance(a, torch.Tensor) else a)
            for p, a in enumerate(sample.args)]
    fn = reference.function(op)
    gen = torch.Generator().manual_seed(1234)
    if op.kind == "jvp":
        tangents = [values.get(f"tangent {i}", torch.randn(args[p].shape, generator=gen, dtype=args[p].dtype))
                    for i, p in enumerate(sample.diff)]
        with fwAD.dual_level():
            full = list(args)
            for p, t in zip(sample.diff, tangents):
                full[p] = fwAD.make_dual(args[p], t)
            fn(*full)
        return
    with torch.enable_grad():
        # the primals are leaves: a formula's write into an arg lands in the arg's storage
        prim = [args[p].detach().requires_grad_() for p in sample.diff]
        full = list(args)
        for p, x in zip(sample.diff, prim):
            full[p] = x
        outs = op.diff_out(fn(*full))
    cts = [values.get(f"cotangent {i}", torch.randn(o.shape, generator=gen, dtype=o.dtype))
           for i, o in enumerate(outs)]
    pairs = [(o, c) for o, c in zip(outs, cts) if o.requires_grad]
    if pairs:
        torch.autograd.grad([o for o, _ in pairs], prim, [c for _, c in pairs], allow_unused=True)


def _base_shape(name: str, op: OpSpec, sample: Sample) -> torch.Size | None:
    kind, _, idx = name.rpartition(" ")
    if not idx.isdigit():
        return None
    i = int(idx)
    if kind == "arg" and i < len(sample.args) and isinstance(sample.args[i], torch.Tensor):
        return sample.args[i].shape
    if kind == "tangent" and i < len(sample.diff):
        return sample.args[sample.diff[i]].shape
    if kind == "cotangent":
        with torch.no_grad():
            outs = op.diff_out(op.torch_op(*sample.args))
        return outs[i].shape if i < len(outs) else None
    return None


def eager_after(op: OpSpec, sample: Sample, reference: Any, names: Sequence[str],
                before: Sequence[torch.Tensor], batch: int,
                bdims: Sequence[int | None] | None = None) -> dict[str, torch.Tensor]:
    """What plain eager autograd leaves in the caller's tensors: the values of ``names`` after the
    formula runs once per batch entry on that entry's values (``before``, the values the caller
    handed over), each entry's result written back at its place. ``bdims``: each tensor's batch
    dim (None: unbatched; default: inferred from its shape, 0 when it has one more dim than the
    sample's). An unbatched tensor gets what one eager call does to it. Names eager does not know
    (e.g. an outer cotangent) are left out: a strategy's change to them is never eager's."""
    dims: list[int | None] = []
    for i, (n, t) in enumerate(zip(names, before)):
        base = _base_shape(n, op, sample)
        if bdims is not None:
            dims.append(bdims[i])
        elif base is not None and t.dim() == len(base) + 1:
            dims.append(0)
        else:
            dims.append(None)
    known = [i for i, n in enumerate(names) if _base_shape(n, op, sample) is not None]
    after = {names[i]: before[i].detach().clone() for i in known}
    entries = batch if any(dims[i] is not None for i in known) else 1
    for b in range(entries):
        values = {}
        for i in known:
            d = dims[i]
            values[names[i]] = (after[names[i]] if d is None and b == 0 else
                                after[names[i]].clone() if d is None else
                                after[names[i]].select(d, b).clone())
        _eager_once(op, sample, reference, values)
        with torch.no_grad():
            for i in known:
                if dims[i] is not None:
                    after[names[i]].select(dims[i], b).copy_(values[names[i]])
    return after


def matches_eager(now: torch.Tensor, eager: torch.Tensor | None, atol: float, rtol: float) -> tuple[bool, float | None]:
    """(the strategy's values after the call equal eager's within the tolerance, the max abs
    difference); (False, None) when eager leaves no value to compare with."""
    if eager is None:
        return False, None
    d = _difference(now, eager)
    if math.isinf(d):
        return False, d
    ok = d == 0.0 or bool(torch.isclose(now.detach(), eager, atol=atol, rtol=rtol, equal_nan=True).all())
    return ok, d
