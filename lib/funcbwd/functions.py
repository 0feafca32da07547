"""Custom ``torch.autograd.Function`` classes under the in-place mode.

torch.func transforms refuse a Function whose ``forward`` takes ``ctx`` ("must override the
setup_context staticmethod"); most libraries still ship that style. And a setup_context-style
Function without a ``vmap`` staticmethod "does not have vmap support". While
:func:`functions_converted` is active (every retry stage of :mod:`funcbwd.ladder`),
``Function.apply`` under a transform runs an old-style class as an equivalent setup_context-style
Function (:func:`_converted`): its ``forward`` runs once with a recording ``ctx``; what it saved or set on
``ctx`` is given to the real ``ctx`` in ``setup_context`` (saved intermediates and tensor
attributes are returned as extra, non-differentiable outputs and dropped by ``apply``), with
``generate_vmap_rule = True``, and a setup_context-style class as a subclass with
``generate_vmap_rule = True`` where it has no vmap support of its own (its forward and backward
are written for one sample: vmap runs them batched, as it runs any function). Every Function's
``forward`` and ``backward`` run under an :class:`~funcbwd.inplace.InplaceMode` of their own (torch runs them with the caller's modes
off; the engine runs ``backward`` from inside ``torch.autograd.grad``): the first call of a class,
method and argument signature (shapes, dtypes, batching) runs the full mode; later calls replay
what it did (:class:`~funcbwd.replay.Replay` of its :class:`~funcbwd.replay.Plan`), and
run the full mode again where the replay diverges (an op the plan does not have there, refused
before it runs; the random state is put back; a call that wrote into its arguments before is
not re-run: its error is raised).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator

import torch

from funcbwd import internals, scope
from funcbwd.cache import LRU
from funcbwd.errors import FuncbwdError, LoopInstead, NeedsMode, StateWriteError, fixable
from funcbwd.inplace import InplaceMode
from funcbwd.journal import Journal, rng_states, set_rng_states
from funcbwd.replay import Replay

__all__ = ["functions_converted", "rebound", "setup_context_style", "run_planned", "run_as_written",
           "inplace_mode",
           "run_inplace"]


class _RecordingCtx:
    """What an old-style ``forward(ctx, ...)`` sees: it records instead of saving."""

    def __init__(self, n_inputs: int) -> None:
        object.__setattr__(self, "_calls", {"saved": (), "dirty": (), "nondiff": (),
                                            "materialize": None})
        object.__setattr__(self, "needs_input_grad", (True,) * n_inputs)
        object.__setattr__(self, "_attrs", {})

    def __setattr__(self, name: str, value: Any) -> None:
        self._attrs[name] = value

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_attrs"][name]
        except KeyError:
            raise AttributeError(name) from None

    def save_for_backward(self, *ts: Any) -> None:
        self._calls["saved"] = ts

    def mark_dirty(self, *ts: Any) -> None:
        self._calls["dirty"] = ts

    def mark_non_differentiable(self, *ts: Any) -> None:
        self._calls["nondiff"] = ts

    def set_materialize_grads(self, value: bool) -> None:
        self._calls["materialize"] = value

    @property
    def saved_tensors(self) -> tuple:
        return self._calls["saved"]


#: (class, method, argument signature) -> the Plan of its first call under the mode (None: the
#: call needed the full mode)
PLANS = LRU(1024)


def run_planned(owner: Any, run: Callable[[], Any], args: tuple) -> Any:
    """``run()`` (a call of ``owner``, hashable, on ``args``) under the in-place mode: the full
    mode the first time for ``owner`` and the arguments' signature, its replayed plan later.
    What the call writes of its caller's goes into the current call's journal (a replay that
    diverges puts it back before the full mode runs)."""
    key = (owner, tuple((a.shape, a.dtype, internals.is_batched(a))
                        if isinstance(a, torch.Tensor) else type(a) for a in args))
    outer = scope.current().journal
    plan = PLANS.get(key)
    if plan is not None:
        rng, journal = rng_states(), Journal()
        try:
            with Replay(plan, journal):
                out = run()
        except Exception:  # noqa: BLE001 - diverged: the full mode runs it, from the start
            journal.restore()
            set_rng_states(rng)
        else:
            _hand_over(journal, outer)
            return out
    journal = Journal()
    mode = InplaceMode(journal=journal)
    try:
        with mode:
            out = run()
    except BaseException:
        journal.restore()
        raise
    PLANS.put(key, mode.plan())
    _hand_over(journal, outer)
    return out


#: owner -> True once its code ran as written without the mode (watched), False once it needed
#: the mode
_PLAIN = LRU(1024)


def run_as_written(owner: Any, run: Callable[[], Any], args: tuple) -> Any:
    """``run()`` as written: watched first (the caller's tensors saved before a write, shared
    writes refused, nothing else changed: code torch's transforms run as it is runs so), then,
    if that raised an error in-place code causes, under the in-place mode
    (:func:`run_planned`). What worked is remembered per ``owner``."""
    if _PLAIN.get(owner, True):
        outer = scope.current().journal
        rng, journal = rng_states(), Journal()
        try:
            with InplaceMode(watch=True, journal=journal):
                out = run()
        except StateWriteError:
            journal.restore()
            raise
        except (LoopInstead, NeedsMode, Exception) as e:  # noqa: BLE001 - retried, or raised
            journal.restore()
            if not isinstance(e, (LoopInstead, NeedsMode)) and not fixable(e):
                raise
            set_rng_states(rng)
            _PLAIN.put(owner, False)
        else:
            _PLAIN.put(owner, True)
            _hand_over(journal, outer)
            return out
    return run_planned(owner, run, args)


def _hand_over(journal: Journal, outer: Journal | None) -> None:
    """A Function call's writes become its caller's call's (all or none with it)."""
    if outer is None:
        journal.commit()
    else:
        outer.absorb(journal)


def _where(t: Any, inputs: tuple, outs: tuple, extras: list) -> tuple[str, Any]:
    if not isinstance(t, torch.Tensor):
        return ("value", t)
    for i, a in enumerate(inputs):
        if a is t:
            return ("in", i)
    for i, o in enumerate(outs):
        if o is t:
            return ("out", i)
    extras.append(t)
    return ("out", len(outs) + len(extras) - 1)


#: per thread: the plan of each converted class's latest forward (its setup_context and apply
#: read it right after; functorch may call setup_context more than once per forward)
_LAST = threading.local()


@functools.lru_cache(maxsize=None)
def _converted(cls: type) -> type:
    """``cls`` (old style) as a setup_context-style Function with a generated vmap rule."""

    def forward(*args: Any) -> Any:
        if not hasattr(_LAST, "plans"):
            _LAST.plans = {}

        def run() -> tuple:
            rec = _RecordingCtx(len(args))  # a fresh one if the full mode runs it again
            return rec, cls.forward(rec, *args)

        rec, out = run_planned((cls, "forward"), run, args)
        single = not isinstance(out, tuple)
        outs = (out,) if single else tuple(out)
        extras: list[torch.Tensor] = []
        plan = {
            "saved": [_where(t, args, outs, extras) for t in rec._calls["saved"]],
            "attrs": {k: _where(v, args, outs, extras) for k, v in rec._attrs.items()},
            "dirty": [_where(t, args, outs, extras)[1] for t in rec._calls["dirty"]],
            "nondiff": [_where(t, args, outs, extras)[1] for t in rec._calls["nondiff"]],
            "materialize": rec._calls["materialize"], "n_out": len(outs), "single": single,
        }
        _LAST.plans[cls] = plan  # read by setup_context and apply (the same thread, next)
        if not extras:
            return out
        return (*outs, *(e.detach() for e in extras))

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        plan = _LAST.plans[cls]
        outs = output if isinstance(output, tuple) else (output,)

        def resolve(where: tuple[str, Any]) -> Any:
            kind, i = where
            return i if kind == "value" else inputs[i] if kind == "in" else outs[i]

        saved = tuple(resolve(w) for w in plan["saved"])
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)  # the forward-mode rule built from backward reads them too
        for k, w in plan["attrs"].items():
            setattr(ctx, k, resolve(w))
        if plan["dirty"]:
            ctx.mark_dirty(*(inputs[i] for i in plan["dirty"]))
        nondiff = [outs[i] for i in plan["nondiff"]] + list(outs[plan["n_out"]:])
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        if plan["materialize"] is not None:
            ctx.set_materialize_grads(plan["materialize"])
        ctx.funcbwd_n_out = plan["n_out"]
        ctx._funcbwd_outputs = outs  # the layouts a forward-mode rule's cotangents take

    def backward(ctx: Any, *grads: Any) -> Any:
        grads = grads[:ctx.funcbwd_n_out]
        return run_planned((cls, "backward"), lambda: cls.backward(ctx, *grads), grads)

    conv = type(cls.__name__, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True, "_funcbwd_wrapped": True,
        "__qualname__": f"{cls.__qualname__} (setup_context style)", "__module__": cls.__module__,
        "jvp": staticmethod(_jvp_from(backward, lambda ctx: ctx.funcbwd_n_out, cls)),
    })

    return conv


def _user_outputs(cls: type, out: Any) -> Any:
    """What ``cls.apply`` returns to its caller: the class's own outputs, without the extra
    outputs that carry its saved intermediates (torch's transforms see those: their
    setup_context saves them)."""
    plan = _LAST.plans[cls]
    if not isinstance(out, tuple) or plan["single"] and len(out) == 1:
        return out
    outs = out[:plan["n_out"]]
    return outs[0] if plan["single"] else outs


def setup_context_style(cls: type) -> type:
    """``cls`` itself, or its setup_context-style equivalent if it is old style."""
    return _converted(cls) if internals.function_is_old_style(cls) else cls


@functools.lru_cache(maxsize=None)
def _backward_under_mode(cls: type) -> type:
    """``cls`` (setup_context style) with its ``forward`` and ``backward`` run under an
    :class:`InplaceMode` each, and a generated vmap rule where it has no vmap support."""

    def forward(*args: Any) -> Any:  # torch runs it with the caller's modes off
        return run_planned((cls, "forward"), lambda: cls.forward(*args), args)

    def backward(ctx: Any, *grads: Any) -> Any:
        return run_planned((cls, "backward"), lambda: cls.backward(ctx, *grads), grads)

    attrs = {"forward": staticmethod(forward), "backward": staticmethod(backward),
             "vjp": staticmethod(backward), "__qualname__": cls.__qualname__,
             "_funcbwd_wrapped": True}
    if not internals.function_has_vmap_support(cls):
        attrs["generate_vmap_rule"] = True
    if not internals.function_defines_jvp(cls):
        attrs["jvp"] = staticmethod(_jvp_from(backward, None, cls))
    return type(cls.__name__, (cls,), attrs)


def _jvp_from(backward: Callable[..., Any], n_out: Callable[[Any], int] | None, cls: type):
    """A forward-mode rule for a Function that has only ``backward``: ``backward(ctx, *g)`` is
    linear in the cotangents ``g`` (it computes ``J^T g``), so the vjp of it with respect to
    ``g``, taken at ``g = 0`` with the input tangents as cotangents, is ``J t``. The backward runs
    with ``ctx.needs_input_grad`` saying which inputs have a tangent (forward mode leaves it all
    False, and a backward that reads it would return no gradient at all). It must itself be
    differentiable in ``g``, as for a double backward: a gradient it computes without a graph
    (``once_differentiable``, ``autograd.grad`` without ``create_graph``) would read as a zero
    derivative, so it is refused instead (zuko's ``GaussLegendre``)."""
    once = _once_differentiable(cls.backward)

    def refuse(why: str) -> FuncbwdError:
        return FuncbwdError(
            f"no forward-mode rule for {cls.__qualname__}: its backward {why}, so forward mode "
            "cannot be built from it; give it a jvp staticmethod, or use reverse mode "
            "(jacrev, vjp)")

    def jvp(ctx: Any, *tangents: Any) -> Any:
        if once:
            raise refuse("is marked once_differentiable")
        outs = ctx._funcbwd_outputs
        zeros = tuple(torch.zeros_like(o) for o in outs[:n_out(ctx)] if n_out) if n_out \
            else tuple(torch.zeros_like(o) for o in outs)
        keep = [i for i, t in enumerate(tangents) if isinstance(t, torch.Tensor)]

        def grads_of(*g: Any) -> tuple:
            needs = ctx.needs_input_grad
            ctx.needs_input_grad = tuple(isinstance(t, torch.Tensor) for t in tangents)
            try:
                got = backward(ctx, *g)
            finally:
                ctx.needs_input_grad = needs
            got = got if isinstance(got, tuple) else (got,)
            for i in keep:
                if isinstance(got[i], torch.Tensor) and not got[i].requires_grad:
                    raise refuse(f"computes the gradient of input {i} without a graph "
                                 "(torch.autograd.grad without create_graph)")
            return tuple(got[i] if got[i] is not None else torch.zeros_like(tangents[i])
                         for i in keep)

        _, pull = torch.func.vjp(grads_of, *zeros)
        jt = tuple(pull(tuple(tangents[i] for i in keep)))
        jt += (None,) * (len(outs) - len(jt))  # the extra outputs (saved intermediates): none
        return jt[0] if len(jt) == 1 else jt

    return jvp


def _once_differentiable(backward: Any) -> bool:
    """``backward`` is wrapped by ``torch.autograd.function.once_differentiable``."""
    code = getattr(backward, "__code__", None)
    return (getattr(backward, "__wrapped__", None) is not None and code is not None
            and code.co_filename.replace("\\", "/").endswith("torch/autograd/function.py"))


def _apply_converting(original: Callable[..., Any]) -> Callable[..., Any]:
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        if not (scope.current().functions and internals.stack_depth()) or getattr(
                cls, "_funcbwd_wrapped", False):
            return original(cls, *args, **kwargs)
        mode = scope.current().mode
        if mode is not None:
            mode.promote_arguments(args)
        if not internals.function_is_old_style(cls):
            return original(_backward_under_mode(cls), *args, **kwargs)
        return _user_outputs(cls, _converted(cls).apply(*args, **kwargs))

    return apply


def rebound(func: Any) -> Any:
    """``Cls.apply`` taken before :func:`functions_converted` patched ``Function.apply`` (passed as
    the function to transform: ``jacrev(Cls.apply)``) as a function that looks ``apply`` up when
    called; any other function itself."""
    owner = getattr(func, "__self__", None)
    if (getattr(func, "__name__", None) == "apply" and isinstance(owner, type)
            and issubclass(owner, torch.autograd.Function)):
        return functools.wraps(func)(lambda *a, **k: owner.apply(*a, **k))
    return func


@contextlib.contextmanager
def functions_converted() -> Iterator[None]:
    """While active, ``Function.apply`` under a transform runs custom Functions as described in
    the module docstring."""
    with internals.function_apply_replaced(_apply_converting), scope.entered(functions=True):
        yield


@contextlib.contextmanager
def inplace_mode(*, on_copy: bool = False, state_writes: str = "refuse") -> Iterator[None]:
    """The block runs under the in-place mode alone, custom Functions converted (one stage of
    :mod:`funcbwd.ladder`, no retries): what the caller's tensors took is given back if it
    fails. The workbench compares it, as a mechanism (functorch#1025's "lazy" option), with the
    others."""
    journal = Journal()
    try:
        with scope.entered(journal=journal, state_writes=state_writes), \
                internals.vmap_impl_replaced(scope.sampling), \
                functions_converted(), InplaceMode(on_copy=on_copy, journal=journal):
            yield
    except BaseException:
        journal.restore()
        raise
    journal.commit()


def run_inplace(call: Callable[[], Any], *, on_copy: bool = False,
                state_writes: str = "refuse") -> Any:
    """``call()`` under :func:`inplace_mode`."""
    with inplace_mode(on_copy=on_copy, state_writes=state_writes):
        return call()
