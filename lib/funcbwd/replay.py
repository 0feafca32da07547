"""A later call of a function :class:`funcbwd.inplace.InplaceMode` ran with nothing but promotions
and saved writes: its :class:`Plan`, replayed by :class:`Replay` without the mode's bookkeeping
(what :func:`funcbwd.vmap` does on the calls after the first)."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals, scope
from funcbwd.journal import Journal

__all__ = ["Plan", "Replay", "Diverged", "identity"]


class Diverged(Exception):
    """A :class:`Replay` met an op its plan does not have there: the call needs the full mode."""


class Plan(tuple):
    """What :class:`~funcbwd.inplace.InplaceMode` did on a call: ``(names, promoted, saved)``,
    the name of every op in order, the indices of the ops whose outputs it promoted (later, on a
    write), the indices of the writes into tensors the caller owns (saved in the journal first)."""

    def __new__(cls, names: tuple, promoted: frozenset, saved: frozenset) -> "Plan":
        return super().__new__(cls, (names, promoted, saved))


class Replay(TorchFunctionMode):
    """A later call of a function the in-place mode ran with only promotions and saved writes
    (its :class:`Plan`): each op runs as called, the outputs the mode promoted are batched when
    made (the same values: a promotion copies), the caller's tensors are saved before the same
    writes. No other bookkeeping. An op that differs from the plan's (another branch taken) raises
    :class:`Diverged`; a write the plan did not foresee fails as vmap fails: the caller then runs
    the full mode. A promotion never changes a value, so a plan can only make a call fail, never
    make it wrong."""

    def __init__(self, plan: Plan, journal: Journal) -> None:
        super().__init__()
        self.names, self.promoted, self.saved = plan
        self.journal = journal
        self.data_reads = {i for i, n in enumerate(self.names) if n == "__get__"}
        self.count = 0
        self._scope = None

    def __enter__(self) -> "Replay":
        self._scope = scope.entered(mode=None)  # nothing tracks what runs inside
        self._scope.__enter__()
        try:
            return super().__enter__()
        except BaseException:
            self._scope.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            self._scope.__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        i = self.count
        self.count = i + 1
        name = getattr(func, "__name__", "") or ""
        if i >= len(self.names) or name != self.names[i]:
            raise Diverged(f"op {i}: {name!r}, the plan has "
                           f"{self.names[i] if i < len(self.names) else 'no more'!r}")
        if i in self.saved:
            out = kwargs.get("out")
            self.journal.save(out if isinstance(out, torch.Tensor) else args[0])
        if (i in self.data_reads and func.__self__ is torch.Tensor.data
                and internals.vmap_active()):
            result = args[0].detach()  # as the mode does: torch refuses ``.data`` under vmap
        else:
            result = func(*args, **kwargs)
        if i in self.promoted:
            if not isinstance(result, torch.Tensor) or internals.dense(result)._is_view():
                raise Diverged(f"op {i} ({name!r}) made no new tensor to promote")
            return internals.batched_copy(result)
        return result


# ------------------------------------------------------------------------------ a function's identity
class _Ref:
    """A part of a function's identity: the object itself, held weakly where it can be (an id
    reused after it is freed never matches), by value where it is hashable, else strongly."""

    __slots__ = ("ref", "hash")

    def __init__(self, obj: Any) -> None:
        try:
            self.ref, self.hash = weakref.ref(obj), id(obj)
        except TypeError:
            try:
                self.ref, self.hash = (obj,), hash(obj)
            except TypeError:
                self.ref, self.hash = [obj], id(obj)

    def get(self) -> Any:
        r = self.ref
        return r() if isinstance(r, weakref.ref) else r[0]

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, _Ref) or type(self.ref) is not type(other.ref):
            return False
        if isinstance(self.ref, tuple):
            return self.ref == other.ref
        a = self.get()
        return a is not None and a is other.get()

    def __hash__(self) -> int:
        return self.hash


def identity(func: Any) -> tuple:
    """A function's identity across fresh closures of the same code over the same objects
    (``vmap(jacrev(f))`` written inline makes a new closure per call): its code, its module's
    globals (two modules made from one source have equal code objects, not the same globals)
    and its closure's contents."""
    code = getattr(func, "__code__", None)
    if code is None:
        return (_Ref(func),)
    owner = getattr(func, "__self__", None)
    if owner is not None:  # a bound method: its code and closure are its class's, not its own
        return (identity(func.__func__), _Ref(owner))
    cells = [_Ref(getattr(func, "__globals__", None))]
    for c in func.__closure__ or ():
        try:
            contents = c.cell_contents
        except ValueError:  # an empty cell
            cells.append(None)
            continue
        ref = _Ref(contents)
        if isinstance(ref.ref, list) or (isinstance(ref.ref, tuple) and not _by_value(contents)):
            # held strongly, a closure's list or tuple of tensors (torch's vjp_fn) would outlive
            # the call in this cache (and look kept by the caller: ``outliving``): this function
            # object, weakly, is the identity
            return (_Ref(func),)
        cells.append(ref)
    return (code, tuple(cells))


def _by_value(obj: Any) -> bool:
    """A value an identity may hold: a number, a string, None, or a tuple of them."""
    return obj is None or isinstance(obj, (int, float, complex, str, bytes, bool)) or (
        isinstance(obj, (tuple, frozenset)) and all(_by_value(o) for o in obj))
