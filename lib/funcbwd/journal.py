"""What a call may change that its caller owns, saved so that it changes all or nothing, once.

A :class:`Journal` keeps, for each tensor the caller owns that the call writes, its contents as
they were before the first write. When an attempt fails, :meth:`Journal.restore` puts every one
back before anything runs again (a retry never repeats what a failed attempt did); when the call
succeeds, the journal is dropped (the writes land, once); under ``state_writes="discard"`` the
call's writes are given back when it ends (each batch entry saw its own writes during the call).
A tensor *borrowed* for the call (given a batched stand-in while per-sample values are written
into it) is restored by swapping its own contents back: the caller's storage was never written.

:func:`rng_states` / :func:`set_rng_states`: the random state of the CPU generator and of every
accelerator torch has initialized (CUDA, XPU, MPS), saved and put back as one.
"""

from __future__ import annotations

import gc
import inspect
from typing import Any

import torch

from funcbwd import internals


class Journal:
    def __init__(self) -> None:
        self._saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._borrowed: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._lifted: list[tuple[torch.Tensor, torch.Tensor, int]] = []
        #: (weak reference, in-place mode node) of every tensor a mode saw made in the call and
        #: alive when the mode ended (:func:`funcbwd.journal.outliving`); not part of ``bool``
        self.made: list = []

    def __bool__(self) -> bool:
        return bool(self._saved or self._borrowed or self._lifted)

    def has_stand_ins(self) -> bool:
        return bool(self._borrowed or self._lifted)

    def save(self, t: torch.Tensor) -> None:
        """Before a write into ``t``, a tensor the caller owns: its contents, once per call."""
        if id(t) not in self._saved:
            with internals.cleared_functorch_state(), torch.no_grad():
                self._saved[id(t)] = (t, internals.dense(t).detach().clone())

    def borrow(self, t: torch.Tensor, stand_in: torch.Tensor) -> None:
        """``t`` takes ``stand_in``'s contents for the rest of the call (its own are kept aside)."""
        internals.swap_impl(t, stand_in)  # ``stand_in`` now holds the caller's contents
        self._borrowed.append((t, stand_in))

    def lift(self, t: torch.Tensor, stand_in: torch.Tensor, leading: int = 0) -> None:
        """``t`` takes ``stand_in``'s contents (``t``'s own, wrapped at the call's transforms,
        batched at ``leading`` vmap levels over basis vectors, not samples) for the rest of the
        call; when the call succeeds, its final value is written back into ``t``'s own contents
        (the write lands; the value is the same for every basis vector: the first is taken);
        when it fails, ``t`` is as it was."""
        internals.swap_impl(t, stand_in)
        self._lifted.append((t, stand_in, leading))

    def borrowed(self, t: torch.Tensor) -> bool:
        return any(b[0] is t for b in self._borrowed + self._lifted)

    def absorb(self, other: "Journal") -> None:
        """``other``'s saved contents and stand-ins become this journal's (a nested call's writes
        land or go with the call around it); a tensor saved in both keeps the older contents."""
        for key, entry in other._saved.items():
            self._saved.setdefault(key, entry)
        self._borrowed += other._borrowed
        self._lifted += other._lifted
        self.made += other.made
        other._saved, other._borrowed, other._lifted, other.made = {}, [], [], []

    def restore(self) -> None:
        """Every tensor the call wrote, as it was before the call; the journal is then empty."""
        self.made.clear()  # a failed attempt's tensors: the exception's frames may hold them
        for t, own, *_ in reversed(self._borrowed + self._lifted):
            internals.swap_impl(t, own)
        self._borrowed.clear()
        self._lifted.clear()
        with internals.cleared_functorch_state(), torch.no_grad():  # below every transform
            for t, old in self._saved.values():
                now = internals.dense(t)
                if now.shape == old.shape:
                    now.copy_(old)
                # else: an enclosing call's mode promoted it since (a tensor made in that
                # call, not the caller's): its contents go with that call's failed attempt
        self._saved.clear()

    def commit(self) -> None:
        """The call succeeded: its writes stay (borrowed tensors are always given back; a lifted
        tensor takes its final value)."""
        for t, own in reversed(self._borrowed):
            internals.swap_impl(t, own)
        self._borrowed.clear()
        for t, own, leading in reversed(self._lifted):
            final = internals.dense(t).detach()
            for _ in range(leading):
                final = final[0]
            internals.swap_impl(t, own)
            with internals.cleared_functorch_state(), torch.no_grad():
                internals.dense(t).copy_(final)
        self._lifted.clear()
        self._saved.clear()


rng_states = internals.rng_states
set_rng_states = internals.set_rng_states


def outliving(journal: Journal) -> list:
    """The tensors a mode saw made in the call batched by a vmap that are alive after the
    outermost call ended and that funcbwd itself does not hold (a view's parent):
    the caller keeps them (a dict entry, a list, an attribute), which a per-sample loop would
    have filled with plain tensors."""
    def alive() -> list:
        pairs = [(r(), n) for r, n in journal.made]
        pairs = [(t, n) for t, n in pairs if t is not None]
        held = {id(n.of) for _, n in pairs if n.of is not None}
        return [t for t, _ in pairs if id(t) not in held and internals.is_batched(t)]

    if not alive():
        return []
    gc.collect()  # reference cycles (a view's node and its parent) are not the caller's
    candidates = alive()
    if not candidates:
        return []
    # kept in a Python container (a dict, a list, an object's attributes); a tensor only C++
    # holds (autograd's saved values keep their Python object alive) is not the caller's
    ours = {id(candidates)}
    containers = [r for r in gc.get_referrers(*candidates)
                  if id(r) not in ours and isinstance(r, (dict, list, set))]
    inside = {id(v) for r in containers for v in (r.values() if isinstance(r, dict) else r)}
    return [t for t in candidates if id(t) in inside]


def defined_at(func: Any) -> str:
    user = inspect.unwrap(func)
    code = getattr(user, "__code__", None)
    return (f"{getattr(user, '__name__', 'the function')} at {code.co_filename}:"
            f"{code.co_firstlineno}" if code is not None else "the function")
