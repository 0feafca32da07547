"""One transform call of :func:`funcbwd.vmap` (or any vmap, grad, vjp, jvp, jacrev, jacfwd or
hessian inside :func:`funcbwd.allow_inplace`): torch's own transform first, then the retry stages
in order, the caller's state all or nothing.

:func:`call` is the whole story:

1. A call made while a retry stage runs (a vmap inside the function) runs as the stage runs it.
2. What worked for this function and argument signature before (:data:`WORKED`) is tried first:
   torch's vmap as it is, or a stage (the in-place mode's replayed :class:`~funcbwd.replay.Plan`
   where it has one). If that fails, the call starts over.
3. Torch's vmap. On the first call of a signature it runs under the in-place mode's *watch* (no
   change to what runs, only the caller's tensors saved before a write and shared writes refused
   before they happen, :mod:`funcbwd.inplace`); later calls of a signature that wrote nothing of
   the caller's run bare, at torch's own cost.
4. If torch raised an error in-place code causes (:func:`fixable`), the stages of :data:`STAGES`
   run in order, each from the caller's state and random state as they were before the call
   (:class:`~funcbwd.journal.Journal`: a retry never repeats what a failed attempt did).
5. When all fail, torch's own error is raised with one note saying what funcbwd tried, and the
   caller's state is as it was. A :class:`~funcbwd.errors.StateWriteError` (a write the caller's
   ``state_writes`` refuses) is raised as it is, at once.

What a call does with the caller's tensors, by ``state_writes`` (:mod:`funcbwd.inplace`):
``"refuse"`` (default), ``"loop"`` (the per-sample loop), ``"discard"`` (given back at the end).
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import time
import warnings
import weakref
from typing import Any, Callable

import torch

from funcbwd import eager, internals, scope
from funcbwd.cache import LRU
from funcbwd.errors import (FuncbwdError, InplaceModeError, LoopInstead, NeedsMode,
                            StateWriteError, first_line, fixable, user_line_of)
from funcbwd.functions import functions_converted, rebound
from funcbwd.inplace import InplaceMode, outputs_refreshed
from funcbwd.journal import Journal, defined_at, outliving, rng_states, set_rng_states
from funcbwd.replay import Plan, Replay, identity

__all__ = ["Call", "TransformCall", "call", "fixable", "PerSampleLoopWarning", "STAGES", "WORKED"]


class PerSampleLoopWarning(UserWarning):
    """funcbwd ran a function once per batch entry (slow): nothing batched could run it."""


@dataclasses.dataclass
class TransformCall:
    """One call of a grad transform's implementation (``grad``, ``vjp``, ``jvp`` and what is built
    on them: ``jacrev``, ``jacfwd``, ``hessian``) for any function: ``run(f)`` runs it with
    ``f``. It has no batch: no per-sample loop stage."""

    impl: Callable[[Any], Any]
    args: tuple
    kwargs: dict
    name: str
    samples: bool = False
    plan: Plan | None = None

    def run(self, f: Any) -> Any:
        return self.impl(f)


@dataclasses.dataclass
class Call:
    """One vmap call: torch's ``vmap_impl`` and its arguments, for any function. ``samples``:
    its batch entries are samples (False for the basis vectors torch's own ``jacrev``, ``jacfwd``
    and ``hessian`` vmap over)."""

    impl: Callable[..., Any]
    in_dims: Any
    out_dims: Any
    randomness: str
    chunk_size: int | None
    args: tuple
    kwargs: dict
    samples: bool = True
    plan: Plan | None = None  # what the in-place mode stage did, if a replay can redo it

    def run(self, f: Any) -> Any:
        f = scope.over_samples(f, basis=not self.samples)
        return self.impl(f, self.in_dims, self.out_dims, self.randomness, self.chunk_size,
                         *self.args, **self.kwargs)


# ------------------------------------------------------------------------------ what worked
@dataclasses.dataclass(frozen=True)
class Way:
    """What worked: ``"plain"`` (torch's vmap; ``writes``: it saved caller tensors on its first
    call, so later calls run watched too) or a stage's name (and its plan, if it has one).
    ``graph``: a traced graph of the function (:func:`funcbwd.functionalized`) found on a later
    call to give the same answer faster than the stage (:func:`_captured`; only for a call outside
    every transform, where the answers can be compared); ``tried``: looked for."""

    how: str
    plan: Plan | None = None
    writes: bool = False
    graph: Any = None
    tried: bool = False


#: (function identity, argument signature, state policy) -> the Way that worked
WORKED = LRU(1024)


def _signature(call: "Call | TransformCall") -> tuple:
    flat = internals.leaves((call.args, call.kwargs))
    return tuple((a.shape, a.dtype, internals.is_batched(a)) if isinstance(a, torch.Tensor)
                 else type(a) for a in flat)


# ------------------------------------------------------------------------------ one call
def call(func: Any, c: "Call | TransformCall") -> Any:
    """``c.run(func)`` as the module docstring says. A call made inside another's (a grad
    transform inside a vmap, a vmap inside a grad) hands what it wrote to the outer call, which
    lands it, gives it back or restores it with its own."""
    s = scope.current()
    if s.retrying:
        return c.run(outputs_refreshed(func) if s.mode is not None else func)
    key = (identity(func), _signature(c), s.state_writes)
    rng = rng_states()
    journal = Journal()
    with scope.entered(journal=journal):
        try:
            out = _attempts(func, c, key, rng, journal)
            if journal.made and not internals.stack_depth():
                out = _kept_nothing(func, c, key, rng, journal, out)
        except BaseException:
            _start_over(rng, journal)  # the caller's tensors and random state as they were
            raise
    if s.journal is not None:
        s.journal.absorb(journal)
    elif s.state_writes == "discard":
        journal.restore()
    else:
        journal.commit()
    return out


def _attempts(func: Any, c: Call, key: tuple, rng: dict, journal: Journal) -> Any:
    way = WORKED.get(key)
    if way is not None:
        try:
            return _run_way(func, c, way, journal, key)
        except StateWriteError:
            raise
        except Exception:  # noqa: BLE001 - start over: plain, then every stage
            WORKED.pop(key)
            _start_over(rng, journal)
    try:
        out = _plain(func, c, journal, watch=True)
        WORKED.put(key, Way("plain", writes=bool(journal)))
        return out
    except StateWriteError:
        raise
    except LoopInstead:
        if not isinstance(c, Call):
            raise  # a grad transform inside a vmap's entry: the vmap runs its loop
        _start_over(rng, journal)
        return _remembered(key, "per-sample loop", _loop_stage(func, c, journal), c)
    except NeedsMode as e:
        plain: Exception = RuntimeError(f"a shared write under state_writes='discard': {e}")
    except Exception as e:  # noqa: BLE001 - only fixable errors are retried
        if not fixable(e):
            raise
        plain = e
    failures = []
    for stage in STAGES if isinstance(c, Call) else eager.ordered(STAGES[:-1]):
        _start_over(rng, journal)
        try:
            with scope.entered(retrying=True):
                out = stage.run(func, c, journal)
        except (StateWriteError, LoopInstead) as e:
            if isinstance(e, StateWriteError) or not isinstance(c, Call):
                raise
            _start_over(rng, journal)
            return _remembered(key, "per-sample loop", _loop_stage(func, c, journal), c)
        except Exception as e:  # noqa: BLE001 - torch's own error, ours noted
            failures.append(f"{stage.name}: {type(e).__name__}: {first_line(str(e), 120)}")
            continue
        return _remembered(key, stage.name, out, c)
    _start_over(rng, journal)
    plain.add_note(f"funcbwd could not run it either (at {user_line_of(plain)}); "
                   + "; ".join(failures))
    raise plain


def _kept_nothing(func: Any, c: "Call | TransformCall", key: tuple, rng: dict, journal: Journal,
                  out: Any) -> Any:
    """``out``, unless, under a vmap of samples, the caller kept a tensor made under the
    transform (:func:`outliving`): then the per-sample loop's answer (its plain tensors replace
    the batched ones where the caller keeps them), or, if the caller still holds one after the
    loop (appended, not replaced), a clear error."""
    kept = outliving(journal) if isinstance(c, Call) and c.samples else []
    if not kept:  # (no vmap of samples: what torch's transforms leave there is torch's)
        journal.made.clear()
        return out
    refs = [weakref.ref(t) for t in kept]
    shapes = sorted({tuple(t.shape) for t in kept})
    del kept, out
    where = defined_at(func)
    _start_over(rng, journal)
    out = _remembered(key, "per-sample loop", _loop_stage(func, c, journal), c)
    journal.made.clear()
    gc.collect()
    if not any(r() is not None for r in refs):
        return out
    raise InplaceModeError(
        f"a tensor made under the transform (shape {shapes[0]}) is kept by the caller after the "
        f"call (a dict, a list or an attribute; in {where}): outside the transform it has no "
        "value. Store a value computed outside the transform, or return it")


def _start_over(rng: dict, journal: Journal) -> None:
    journal.restore()
    set_rng_states(rng)


def _remembered(key: tuple, how: str, out: Any, c: Call) -> Any:
    WORKED.put(key, Way(how, c.plan))
    return out


def _run_way(func: Any, c: Call, way: Way, journal: Journal, key: tuple) -> Any:
    if way.how == "plain":
        return _plain(func, c, journal, watch=way.writes)
    if way.graph is not None:
        with scope.entered(retrying=True), functions_converted():
            return c.run(way.graph)
    start = time.perf_counter()
    if way.plan is not None:
        with scope.entered(retrying=True), functions_converted(), Replay(way.plan, journal):
            out = c.run(rebound(func))
    else:
        with scope.entered(retrying=True):
            out = STAGES_BY_NAME[way.how].run(func, c, journal)
    if not way.tried and way.how in _CAPTURABLE:
        WORKED.put(key, _captured(func, c, way, out, time.perf_counter() - start))
    return out


#: stages whose answer a traced graph may stand for (the loop's answer carries the caller's
#: state from entry to entry: no graph does that)
_CAPTURABLE = ("in-place mode", "writes on copies")


def _captured(func: Any, c: Call, way: Way, want: Any, seconds: float) -> Way:
    """On the second call of a signature a stage ran: the function's traced graph
    (:func:`funcbwd.functionalized`, checked against the code as written by its own build), run
    on the same arguments. Only for a call outside every transform (its answer is plain
    tensors); kept when it runs in at most 0.9x the stage's time (a warm run each) and gives
    this call's answer (equal within the graph's reordering of float sums). What the graph's runs
    write of the caller's and draw from its generators is put back; a function that writes its
    own arguments keeps its stage (its answer may alias them: torchaudio's ``dcshift``)."""
    from funcbwd.decorator import functionalized

    if internals.stack_depth():
        # inside another transform the answers are wrapped tensors no check can compare: a graph
        # kept unchecked there gave a wrong answer (vmap(jacrev(f)), f: new_tensor, sub_, sin_)
        return dataclasses.replace(way, tried=True)
    graph = functionalized(rebound(func), warn=False)
    rng, journal = rng_states(), Journal()
    arguments = _Arguments((c.args, c.kwargs))
    same = False
    try:
        with scope.entered(retrying=True, journal=journal), functions_converted():
            got = c.run(graph)  # traces
            start = time.perf_counter()
            c.run(graph)
            graph_s = time.perf_counter() - start
        same = _same_answer(want, got)
    except Exception:  # noqa: BLE001 - no graph stands for it: keep the stage
        same = False
    finally:
        journal.restore()
        set_rng_states(rng)
        if arguments.restore():
            same = False
    if not same or graph_s > 0.9 * seconds:
        return dataclasses.replace(way, tried=True)
    return dataclasses.replace(way, graph=graph, tried=True)


class _Arguments:
    """The call's tensor arguments as they were (copies), put back by :meth:`restore`."""

    def __init__(self, args: Any) -> None:
        self.saved = [(t, t._version, t.detach().clone()) for t in internals.leaves(args)
                      if isinstance(t, torch.Tensor) and not t.is_inference()]

    def restore(self) -> bool:
        """Put back every argument written since; True if there was one."""
        written = [(t, copy) for t, version, copy in self.saved if t._version != version]
        with torch.no_grad():
            for t, copy in written:
                t.detach().copy_(copy)
        return bool(written)


def _same_answer(want: Any, got: Any) -> bool:
    a, b = internals.leaves(want), internals.leaves(got)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if not isinstance(x, torch.Tensor):
            if x != y:
                return False
        elif x.shape != y.shape or x.dtype != y.dtype or not torch.allclose(
                x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            return False
    return True


def _plain(func: Any, c: Call, journal: Journal, watch: bool) -> Any:
    """Torch's vmap as it is; watched: the caller's tensors saved before a write, a shared write
    refused before it happens (the in-place mode changing nothing else)."""
    if not watch:
        return c.run(func)
    with InplaceMode(watch=True, journal=journal):
        return c.run(func)


# ------------------------------------------------------------------------------ the stages
@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Any, Call, Journal], Any]
    doc: str


def _mode_stage(func: Any, c: Call, journal: Journal) -> Any:
    with functions_converted():
        mode = InplaceMode(journal=journal)
        with mode:
            out = c.run(outputs_refreshed(rebound(func)))
    c.plan = mode.plan()
    return out


def _on_copy_stage(func: Any, c: Call, journal: Journal) -> Any:
    with functions_converted(), InplaceMode(on_copy=True, journal=journal):
        return c.run(outputs_refreshed(rebound(func)))


def _functionalized_stage(func: Any, c: Call, journal: Journal) -> Any:
    from funcbwd.decorator import functionalized

    with functions_converted():
        return c.run(functionalized(rebound(func), warn=False))


_LOOP_WARNED: "weakref.WeakSet | set" = weakref.WeakSet()
LOOP_RUNS = [0]  # how many times the per-sample loop stage ran (the corpus counts its fixes apart)


def _loop_stage(func: Any, c: Call, journal: Journal) -> Any:
    """The last resort: ``func`` once per batch entry, in order, outputs stacked at ``out_dims``:
    the per-sample loop itself. A write into the caller's tensors lands as the loop makes it (each
    entry sees the ones before), or, under ``state_writes="discard"``, each entry starts from the
    caller's state as it was. ``randomness="same"``: every entry draws from the same state. The
    first entry runs watched (the caller's tensors saved before a write); the others run bare
    unless it wrote any (or the policy discards)."""
    size, dims, flat, spec = internals.vmap_inputs(c.in_dims, c.args, func)
    # the basis vectors torch's jacrev/jacfwd/hessian vmap over are one call of the function,
    # not samples: each entry starts from the caller's state and random state as they were, and
    # the last entry's writes (the same for every basis vector) stay
    start = rng_states() if c.randomness == "same" or not c.samples else None
    discard = scope.current().state_writes == "discard" or not c.samples
    outs = []
    for i in range(size):
        if start is not None:
            set_rng_states(start)
        if discard and i:
            journal.restore()
        sample = [a.select(d, i) if d is not None else a for a, d in zip(flat, dims)]
        args = internals.unflatten(sample, spec)
        # a vmap inside retries itself; an eager stage inside knows it runs in a loop entry
        with scope.entered(retrying=False, samples=frozenset()), eager.loop_entry(not c.samples):
            if i == 0 or discard or journal:
                with InplaceMode(watch=True, journal=journal):
                    outs.append(func(*args, **c.kwargs))
            else:
                outs.append(func(*args, **c.kwargs))
    LOOP_RUNS[0] += 1
    _warn_loop(func, size)
    return internals.stack_outputs(outs, c.out_dims)


def _warn_loop(func: Any, size: int) -> None:
    user = inspect.unwrap(func)  # under vmap(jacrev(f)): f, not torch's wrapper
    try:
        if user in _LOOP_WARNED:
            return
        _LOOP_WARNED.add(user)
    except TypeError:  # not weakly referable: warn every time
        pass
    warnings.warn(f"funcbwd.vmap ran {getattr(user, '__name__', 'the function')} once per batch "
                  f"entry ({size} calls): no batched run worked (see the error torch raised for "
                  "the batched run)", PerSampleLoopWarning, stacklevel=5)


#: what is tried, in order, after torch's own vmap raised an error in-place code causes
STAGES = (
    Stage("in-place mode", _mode_stage, "fresh tensors promoted when a batched value is written"),
    Stage("writes on copies", _on_copy_stage, "every write into a fresh tensor on a copy"),
    Stage("functionalized", _functionalized_stage, "the function as funcbwd.functionalized"),
    Stage("per-sample loop", _loop_stage, "once per batch entry (slow, exact)"),
)
STAGES_BY_NAME = {s.name: s for s in (*STAGES, eager.STAGE)}


def refuse_unknown_policy(state_writes: str) -> None:
    if state_writes not in scope.STATE_WRITES:
        raise FuncbwdError(f"state_writes must be one of {', '.join(map(repr, scope.STATE_WRITES))}"
                           f", got {state_writes!r}")
