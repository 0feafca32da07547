"""A later call of a function :class:`funcbwd.tool.inplace.InplaceMode` ran with nothing but
promotions and borrowed tensors: its :class:`Plan`, replayed by :class:`Replay` without the mode's
bookkeeping (what :func:`funcbwd.vmap` does on the calls after the first)."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals
from funcbwd.tool.masks import _name

__all__ = ["Plan", "Replay", "Diverged"]


class Diverged(Exception):
    """A :class:`Replay` met an op its plan does not have there: the call needs the full mode."""


class Plan(tuple):
    """What :class:`InplaceMode` did on a call: ``(names, promoted, borrowed)``, the name of every
    op in order, the indices of the ops whose outputs it promoted (later, on a write), the
    indices of the writes into tensors the caller owns."""

    def __new__(cls, names: tuple, promoted: frozenset, borrowed: frozenset) -> "Plan":
        return super().__new__(cls, (names, promoted, borrowed))


class Replay(TorchFunctionMode):
    """A later call of a function :class:`InplaceMode` ran with only promotions and borrowed
    tensors (its :class:`Plan`): each op runs as called, the outputs the mode promoted are
    batched when made (the same values: a promotion copies), the caller's tensors are borrowed
    before the same writes. No other bookkeeping: the cost of a mode that only counts ops. An op
    that differs from the plan's (another branch taken) raises :class:`Diverged`; a write the plan
    did not foresee fails as vmap fails: the caller then runs the full mode. A promotion never
    changes a value, so a plan can only make a call fail, never make it wrong."""

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.names, self.promoted, self.borrowed_at = plan
        self.data_reads = {i for i, n in enumerate(self.names) if n == "__get__"}
        self.count = 0
        self.borrowed: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for t, old in reversed(self.borrowed):
                internals.swap_impl(t, old)
            self.borrowed.clear()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        i = self.count
        self.count = i + 1
        if i >= len(self.names) or _name(func) != self.names[i]:
            raise Diverged(f"op {i}: {_name(func)!r}, the plan has "
                           f"{self.names[i] if i < len(self.names) else 'no more'!r}")
        if i in self.borrowed_at:
            t = args[0]
            new = internals.batched_copy(t)
            internals.swap_impl(t, new)
            self.borrowed.append((t, new))
        if (i in self.data_reads and func.__self__ is torch.Tensor.data
                and internals.vmap_active()):
            out = args[0].detach()  # as InplaceMode: torch refuses ``.data`` under vmap
        else:
            out = func(*args, **(kwargs or {}))
        if i in self.promoted:
            if not isinstance(out, torch.Tensor) or internals.dense(out)._is_view():
                raise Diverged(f"op {i} ({_name(func)!r}) made no new tensor to promote")
            return internals.batched_copy(out)
        return out
