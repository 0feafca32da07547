"""``funcbwd.vmap`` and ``funcbwd.allow_inplace()``: in-place code under torch.func, no code change.

::

    per_sample = funcbwd.vmap(torch.func.jacrev(f))(xs)     # drop-in for torch.func.vmap

    with funcbwd.allow_inplace():                            # every vmap inside: jacfwd, hessian,
        torch.func.hessian(f)(x)                             # libraries calling torch.func.vmap

Each vmap call first runs as torch's own ``vmap`` (code that works today runs exactly as today, at
today's cost). Only when that raises one of the errors in-place code causes (:func:`fixable`) is
the call re-run with :class:`funcbwd.tool.inplace.InplaceMode` (fresh tensors promoted when a
batched value is written into them, batched-mask writes as ``where``, old-style
``autograd.Function`` classes converted; see that module), after putting torch's CPU random
state back; if that fails, with the mode writing into copies of fresh tensors (code autograd
refuses as written: a buffer window it saved, overwritten later, as torchaudio's ``lfilter``);
then with the function :func:`funcbwd.functionalized`; then once per batch entry (a per-sample
value read; a vmap inside one entry retries on its own, so ``vmap(vmap(f))`` works too). If all
fail, torch's own error is raised with one note saying what funcbwd tried. A function that
changed one of its tensor inputs in place before failing is not re-run (the retry would see the
changed input): that raises one line saying so. A (function, argument signature) that needed a retry goes
straight to what worked on later calls; where that was the in-place mode doing nothing but
promote and borrow tensors (its :class:`~funcbwd.tool.inplace.Plan`), a later call replays just
that (:class:`~funcbwd.tool.inplace.Replay`), and runs the full mode if the program changed.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import functools
import threading
import warnings
from typing import Any, Callable, Iterator

import torch

from funcbwd import internals
from funcbwd.errors import FuncbwdError, first_line
from funcbwd.tool.masks import InplaceModeError
from funcbwd.tool.inplace import InplaceMode
from funcbwd.tool.replay import Plan, Replay
from funcbwd.tool.oldstyle import functions_converted, mode_active, run_inplace

__all__ = ["vmap", "allow_inplace", "fixable", "run_inplace", "PerSampleLoopWarning"]

#: messages of the errors in-place code raises under torch.func (and nothing else)
_FIXABLE = (
    "is not possible because there exists a Tensor",  # vmap: unbatched.inplace_(batched)
    "would mutate a captured Tensor",           # grad transforms: a caller's tensor written
    "operators that can support dynamic shape", # t[mask] = v with a batched mask
    "operators that can output dynamic shape",  # x[mask] (nonzero) with a batched mask
    "calling .item() on a Tensor",              # a per-sample value read: the per-sample loop
    "data-dependent control flow",              # a branch on a per-sample value: the loop
    "must override the setup_context",          # an old-style autograd.Function
    "is a view and is being modified inplace",  # unbind/split views written
    "do not allow the output views to be modified inplace",
    "doesn't match the broadcast shape",        # an unbatched out= / in-place target
    ".out. We could not generate a fallback",   # an out= op into an unbatched tensor
    "aten::nonzero",                            # torch.where(c) / nonzero of a per-sample mask
    "modified by an inplace operation",         # a value autograd saved, overwritten: on copies
)


def fixable(error: BaseException) -> bool:
    """True if ``error`` is one the in-place mode exists for (or the mode's own refusal: a vmap
    inside one entry of the per-sample loop runs under that entry's mode)."""
    if isinstance(error, InplaceModeError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(m in text for m in _FIXABLE)


def _leaves(args: tuple, kwargs: dict) -> list:
    return list(args) + list(kwargs.values()) if all(
        isinstance(a, (torch.Tensor, int, float, bool, type(None))) for a in args
    ) and not kwargs else internals.leaves((args, kwargs))


def _signature(flat: list) -> tuple:
    return tuple((a.shape, a.dtype) if isinstance(a, torch.Tensor) else type(a) for a in flat)


#: True while a retry stage runs (a vmap called inside runs as the stage runs it); False inside
#: one entry of the per-sample loop (a vmap called there has its own retries); None outside
_INNER: contextvars.ContextVar[bool | None] = contextvars.ContextVar("funcbwd_inner", default=None)


@dataclasses.dataclass
class _Call:
    """One vmap call: torch's ``vmap_impl`` and its arguments, for any function."""

    impl: Callable[..., Any]
    in_dims: Any
    out_dims: Any
    randomness: str
    chunk_size: int | None
    args: tuple
    kwargs: dict
    plan: Plan | None = None  # what the in-place mode stage did, if a replay can redo it

    def run(self, f: Any) -> Any:
        return self.impl(f, self.in_dims, self.out_dims, self.randomness, self.chunk_size,
                         *self.args, **self.kwargs)


class _Retry:
    """The plain attempt, the retries and the memory of what worked, for one vmap'd function."""

    _lock = threading.Lock()
    #: key -> (the stage that worked, its plan if it was the in-place mode's and it has one)
    _worked: "collections.OrderedDict[tuple, tuple[str, Plan | None]]" = collections.OrderedDict()
    MAXSIZE = 1024

    @staticmethod
    def _key(func: Any, sig: tuple) -> tuple:
        """A function's identity across fresh closures of the same code over the same objects
        (``vmap(jacrev(f))`` written inline makes a new closure per call)."""
        code = getattr(func, "__code__", None)
        if code is None:
            return (id(func), sig)
        cells = tuple(id(c.cell_contents) for c in (func.__closure__ or ()))
        return (code, cells, sig)

    @classmethod
    def _remember(cls, key: tuple, how: str | None, plan: Plan | None = None) -> None:
        with cls._lock:
            if how is None:
                cls._worked.pop(key, None)
                return
            cls._worked[key] = (how, plan)
            cls._worked.move_to_end(key)
            while len(cls._worked) > cls.MAXSIZE:
                cls._worked.popitem(last=False)

    @classmethod
    def call(cls, func: Callable[..., Any], call: _Call) -> Any:
        """``call.run(func)`` (torch's vmap), then the stages if it raised a fixable error."""
        inner = _INNER.get()
        if inner or (inner is None and mode_active()):
            return call.run(func)  # inside a retry: inner vmaps run as the retry runs them
        args, kwargs, randomness = call.args, call.kwargs, call.randomness
        flat = _leaves(args, kwargs)
        key = cls._key(func, _signature(flat))
        # under randomness="error" a random op raises: no random state to put back
        rng = torch.get_rng_state() if randomness != "error" else None
        versions = [(a, a._version) for a in flat if isinstance(a, torch.Tensor)]
        worked = cls._worked.get(key)
        if worked is not None:  # what worked last time; if it no longer does, start over
            how, plan = worked
            if plan is not None:
                try:
                    return _replay(func, call, plan)
                except Exception as e:  # noqa: BLE001 - the full stage runs it instead
                    _not_rerun_on_changed_inputs(func, versions, e)
                    if rng is not None:
                        torch.set_rng_state(rng)
            try:
                out = _STAGES[how](func, call)
                cls._remember(key, how, call.plan)
                return out
            except Exception as e:  # noqa: BLE001 - start over: plain, then every stage
                cls._remember(key, None)
                _not_rerun_on_changed_inputs(func, versions, e)
                if rng is not None:
                    torch.set_rng_state(rng)
        try:
            return call.run(func)
        except Exception as plain:  # noqa: BLE001 - only fixable errors are retried
            if not fixable(plain):
                raise
            _not_rerun_on_changed_inputs(func, versions, plain)
            failures = []
            for how, stage in _STAGES.items():
                if rng is not None:
                    torch.set_rng_state(rng)
                token = _INNER.set(True)
                try:
                    out = stage(func, call)
                except Exception as e:  # noqa: BLE001 - torch's own error, ours noted
                    failures.append(f"{how}: {type(e).__name__}: {first_line(str(e), 120)}")
                    continue
                finally:
                    _INNER.reset(token)
                cls._remember(key, how, call.plan)
                return out
            plain.add_note("funcbwd could not run it either; " + "; ".join(failures))
            raise plain from None


def _not_rerun_on_changed_inputs(func: Any, versions: list, error: Exception) -> None:
    if any(t._version != v for t, v in versions):
        raise FuncbwdError(
            f"{getattr(func, '__name__', func)} wrote into one of its inputs before vmap "
            f"refused an in-place write ({first_line(str(error), 80)}); funcbwd does not "
            "re-run it on changed inputs: clone the input first") from error


def _mode_stage(func: Any, call: _Call) -> Any:
    with functions_converted(), InplaceMode() as mode:
        out = call.run(func)
    call.plan = mode.plan()
    return out


def _replay(func: Any, call: _Call, plan: Plan) -> Any:
    """A call the in-place mode ran before, with only its promotions and borrowed tensors
    (:class:`funcbwd.tool.inplace.Replay`); a vmap inside runs as it ran under the mode."""
    token = _INNER.set(True)
    try:
        with functions_converted(), Replay(plan):  # custom Functions as under the mode
            return call.run(func)
    finally:
        _INNER.reset(token)


def _on_copy_stage(func: Any, call: _Call) -> Any:
    return run_inplace(lambda: call.run(func), on_copy=True)


def _functionalized_stage(func: Any, call: _Call) -> Any:
    from funcbwd.tool.functionalized import functionalized

    return call.run(functionalized(func, warn=False))


class PerSampleLoopWarning(UserWarning):
    """funcbwd.vmap ran a function once per batch entry (slow): nothing batched could run it."""


#: how many times the per-sample loop stage ran (the corpus counts its fixes apart)
LOOP_RUNS = [0]
_LOOP_WARNED: set = set()


def _loop_stage(func: Any, call: _Call) -> Any:
    """The last resort: ``func`` once per batch entry, outputs stacked at ``out_dims``: what vmap
    computes, at the cost of a Python loop. Code that reads a per-sample value (``.item()``,
    ``if t.any():``) runs this way. ``randomness="same"``: every entry draws from the same random
    state. Each entry runs under an isolated :class:`InplaceMode`: a write into a tensor not made
    in the call (a module's buffer, an argument) is refused, since the entries after it would see
    it (vmap's entries never see each other's)."""
    size, dims, flat, spec = internals.vmap_inputs(call.in_dims, call.args, func)
    rng = torch.get_rng_state() if call.randomness == "same" else None
    outs = []
    for i in range(size):
        if rng is not None:
            torch.set_rng_state(rng)
        sample = [a.select(d, i) if d is not None else a for a, d in zip(flat, dims)]
        token = _INNER.set(False)  # a vmap inside the entry (vmap(vmap(f))) retries on its own
        try:
            outs.append(run_inplace(
                lambda s=sample: func(*internals.unflatten(s, spec), **call.kwargs),
                isolated=True))
        finally:
            _INNER.reset(token)
    LOOP_RUNS[0] += 1
    key = getattr(func, "__code__", id(func))
    if key not in _LOOP_WARNED:
        _LOOP_WARNED.add(key)
        warnings.warn(f"funcbwd.vmap ran {getattr(func, '__name__', 'the function')} once per "
                      f"batch entry ({size} calls): no batched run worked (see the error torch "
                      "raised for the batched run)", PerSampleLoopWarning, stacklevel=4)
    return internals.stack_outputs(outs, call.out_dims)


#: what is tried, in order, after torch's own vmap raised an error in-place code causes
_STAGES = {"in-place mode": _mode_stage, "writes on copies": _on_copy_stage,
           "functionalized": _functionalized_stage, "per-sample loop": _loop_stage}


def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
         randomness: str = "error", *, chunk_size: int | None = None) -> Callable[..., Any]:
    """``torch.func.vmap`` that also runs in-place code (see the module docstring)."""
    impl = internals.original_vmap_impl()

    @functools.wraps(func)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return _Retry.call(func, _Call(impl, in_dims, out_dims, randomness, chunk_size, args,
                                       kwargs))

    return wrapped


def _retrying(original: Callable[..., Any]) -> Callable[..., Any]:
    def vmap_impl(func, in_dims, out_dims, randomness, chunk_size, *args, **kwargs):
        return _Retry.call(func, _Call(original, in_dims, out_dims, randomness, chunk_size, args,
                                       kwargs))

    return vmap_impl


@contextlib.contextmanager
def allow_inplace() -> Iterator[None]:
    """Every ``torch.func.vmap`` call in the block (also those inside ``jacfwd``, ``hessian`` and
    libraries) behaves as :func:`funcbwd.vmap`."""
    with internals.vmap_impl_replaced(_retrying):
        yield
