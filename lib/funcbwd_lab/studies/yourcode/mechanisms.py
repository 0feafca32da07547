"""The mechanisms the corpus measures: the answers to functorch#1025 ("needs design") and ours.

==============  ============================================================================
``plain``        torch.func as is (the code as written)
``decorator``    ``@funcbwd.functionalized`` where a user would put it (on the function, the
                 method, or the custom Function class): functionalize + trace + elide copies
``batched``      functorch#1025's option 1: under vmap every floating-point factory output
                 (``zeros``, ``empty``, ``*_like``, ``new_*``, ...) is made batched at once
                 (expanded and copied at every level): a prototype, :class:`BatchedFactories`
``lazy``         option 2: a fresh tensor becomes batched when a batched value is first written
                 into it (:class:`funcbwd.inplace.InplaceMode` on for the whole call)
``mode``         what funcbwd ships: ``with funcbwd.allow_inplace():`` - torch's own vmap first,
                 the lazy mode only for a vmap call that raised an in-place error
``dropin``       ``funcbwd.vmap`` in place of the user's own ``torch.func.vmap`` (only the
                 outer vmap of the vmap transforms; ``jacfwd``/``hessian`` have none: "n/a")
==============  ============================================================================
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd_lab.studies.yourcode.case import Case, identity
from funcbwd_lab.studies.yourcode.check import run_cell

#: factories option 1 batches (floating point only: batching integer counters read with .item()
#: breaks code that works today)
FACTORIES = {"zeros", "ones", "empty", "full", "eye", "arange", "linspace", "rand", "randn",
             "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
             "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "tensor"}


class BatchedFactories(TorchFunctionMode):
    """functorch#1025 option 1 (a prototype): every floating factory output made under a vmap
    level comes out batched at every level (and wrapped at every grad/jvp level)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (getattr(func, "__name__", "") in FACTORIES and isinstance(out, torch.Tensor)
                and out.dtype.is_floating_point and internals.vmap_active()):
            return internals.batched_copy(out)
        return out


@contextlib.contextmanager
def _batched() -> Iterator[None]:
    with BatchedFactories():
        yield


def _lazy() -> Any:
    import funcbwd

    return funcbwd.inplace_mode()


def _allow() -> Any:
    import funcbwd

    return funcbwd.allow_inplace()


def _decorate(f: Any) -> Any:
    import funcbwd

    return funcbwd.functionalized(f, warn=False)


def _twice(cell: Callable[[], tuple[str, str]]) -> tuple[str, str]:
    """A cell of the mode, run twice: the second call goes straight to what worked (a replayed
    plan, see funcbwd.replay.Replay) and must be right too."""
    first = cell()
    if first[0] != "ok":
        return first
    second = cell()
    return first if second[0] == "ok" else (second[0], "second call: " + second[1])


#: the detail of a cell the mode fixed only with its per-sample loop stage (slow)
LOOPED = "via the per-sample loop"
MECHANISMS = ("plain", "decorator", "batched", "lazy", "mode", "dropin")
VMAP_TRANSFORMS = ("vmap", "vmap_vjp", "vmap_jacrev", "vmap_vmap")


def run(mechanism: str, case: Case, transform: str) -> tuple[str, str]:
    """(verdict, detail) of ``case`` under ``transform`` with ``mechanism``."""
    if mechanism == "plain":
        return run_cell(transform, case.fn(identity), case)
    if mechanism == "decorator":
        try:
            fn = case.fn(_decorate)
        except Exception as e:  # noqa: BLE001 - the decorator refused the code: the cell fails
            return "fail", f"decorating raised {type(e).__name__}: {first_line(str(e), 140)}"
        return run_cell(transform, fn, case)
    if mechanism == "batched":
        return run_cell(transform, case.fn(identity), case, within=_batched)
    if mechanism == "lazy":
        return run_cell(transform, case.fn(identity), case, within=_lazy)
    if mechanism == "mode":
        from funcbwd.ladder import LOOP_RUNS

        before = LOOP_RUNS[0]
        verdict, detail = _twice(lambda: run_cell(transform, case.fn(identity), case,
                                                  within=_allow))
        if verdict == "ok" and LOOP_RUNS[0] != before:
            detail = LOOPED  # fixed, but by running the function once per batch entry
        return verdict, detail
    if mechanism == "dropin":
        if transform not in VMAP_TRANSFORMS:
            return "n/a", "no vmap of the user's own to replace (jacfwd/hessian call torch's)"
        import funcbwd

        return _twice(lambda: run_cell(transform, case.fn(identity), case, vmap=funcbwd.vmap))
    raise ValueError(f"unknown mechanism {mechanism!r}; known: {', '.join(MECHANISMS)}")


def error_class(detail: str) -> str:
    """The kind of a failure, from its message."""
    kinds = (("inplace arithmetic", "vmap in-place"), ("dynamic shape", "dynamic shape"),
             ("setup_context", "old-style Function"), ("custom_function_call", "Function in trace"),
             ("aten::copy", "aten::copy"), ("non-functional tensor", "captured tensor"),
             ("item()", "value read"), ("data-dependent", "value read"),
             ("is a view and is being modified", "multi-output view"),
             ("x[mask]", "mask selection"), ("broadcast shape", "vmap in-place"))
    return next((k for m, k in kinds if m in detail), "other")


__all__ = ["MECHANISMS", "BatchedFactories", "run", "error_class"]
