"""Old-style ``torch.autograd.Function`` classes under torch.func, for the in-place mode.

torch.func transforms refuse a Function whose ``forward`` takes ``ctx`` ("must override the
setup_context staticmethod"); most libraries still ship that style. While
:class:`functions_converted` is active (the mode of :mod:`funcbwd.tool.vmap`), ``Function.apply``
under a transform runs such a class as an equivalent setup_context-style Function
(:func:`_converted`): its ``forward`` runs once with a recording ``ctx``; what it saved or set on
``ctx`` is given to the real ``ctx`` in ``setup_context`` (saved intermediates and tensor
attributes are returned as extra, non-differentiable outputs and dropped by ``apply``), with
``generate_vmap_rule = True``. Every Function's ``forward`` and ``backward`` run under an
:class:`~funcbwd.tool.inplace.InplaceMode` of their own (torch runs them with the caller's modes
off; the engine runs ``backward`` from inside ``torch.autograd.grad``): the first call of a class,
method and argument signature (shapes, dtypes, batching) runs the full mode; later calls replay
what it did (:class:`~funcbwd.tool.replay.Replay` of its :class:`~funcbwd.tool.replay.Plan`), and
run the full mode again where the replay diverges (an op the plan does not have there, refused
before it runs; the random state is put back; a call that wrote into its arguments before is
not re-run: its error is raised).
"""

from __future__ import annotations

import collections
import contextvars
import functools
import threading
from typing import Any, Callable

import torch

from funcbwd import internals
from funcbwd.tool.inplace import InplaceMode, current, untracked
from funcbwd.tool.replay import Plan, Replay

__all__ = ["functions_converted", "mode_active", "setup_context_style", "run_inplace",
           "run_planned"]


_SLOT: contextvars.ContextVar[list | None] = contextvars.ContextVar("funcbwd_function_slot",
                                                                    default=None)
_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("funcbwd_inplace_active",
                                                               default=False)


def mode_active() -> bool:
    return _ACTIVE.get()


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
#: call needed the full mode), least recently used out past :data:`PLANS_KEPT`
_PLANS: "collections.OrderedDict[tuple, Plan | None]" = collections.OrderedDict()
PLANS_KEPT = 1024
_PLANS_LOCK = threading.Lock()


def run_planned(owner: Any, run: Callable[[], Any], args: tuple) -> Any:
    """``run()`` (a call of ``owner``, hashable, on ``args``) under the in-place mode: the full
    mode the first time for ``owner`` and the arguments' signature, its replayed plan later."""
    key = (owner, tuple((a.shape, a.dtype, internals.is_batched(a))
                        if isinstance(a, torch.Tensor) else type(a) for a in args))
    plan = _PLANS.get(key)
    if plan is not None:
        rng = torch.get_rng_state()
        versions = [(a, a._version) for a in args if isinstance(a, torch.Tensor)]
        try:
            with untracked(), Replay(plan):
                return run()
        except Exception:  # noqa: BLE001 - diverged: the full mode runs it (unless it wrote)
            if any(t._version != v for t, v in versions):
                raise
            torch.set_rng_state(rng)
    mode = InplaceMode()
    with mode:
        out = run()
    with _PLANS_LOCK:
        _PLANS[key] = mode.plan()
        _PLANS.move_to_end(key)
        while len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)
    return out


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


@functools.lru_cache(maxsize=None)
def _converted(cls: type) -> type:
    """``cls`` (old style) as a setup_context-style Function with a generated vmap rule."""

    def forward(*args: Any) -> Any:
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
        slot = _SLOT.get()
        if slot is not None:
            slot.append(plan)
        if not extras:
            return out
        return (*outs, *(e.detach() for e in extras))

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        plan = _SLOT.get()[-1]
        outs = output if isinstance(output, tuple) else (output,)

        def resolve(where: tuple[str, Any]) -> Any:
            kind, i = where
            return i if kind == "value" else inputs[i] if kind == "in" else outs[i]

        ctx.save_for_backward(*(resolve(w) for w in plan["saved"]))
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

    def backward(ctx: Any, *grads: Any) -> Any:
        grads = grads[:ctx.funcbwd_n_out]
        return run_planned((cls, "backward"), lambda: cls.backward(ctx, *grads), grads)

    conv = type(cls.__name__, (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(backward), "generate_vmap_rule": True, "_funcbwd_wrapped": True,
        "__qualname__": f"{cls.__qualname__} (setup_context style)", "__module__": cls.__module__,
    })

    def apply(k: type, *args: Any, **kwargs: Any) -> Any:
        """The class's outputs only (the extra outputs carrying saved intermediates dropped)."""
        token = _SLOT.set([])
        try:
            out = super(conv, k).apply(*args, **kwargs)
            plan = _SLOT.get()[-1]
        finally:
            _SLOT.reset(token)
        if not isinstance(out, tuple) or plan["single"] and len(out) == 1:
            return out
        outs = out[:plan["n_out"]]
        return outs[0] if plan["single"] else outs

    conv.apply = classmethod(apply)
    return conv


def setup_context_style(cls: type) -> type:
    """``cls`` itself, or its setup_context-style equivalent if it is old style."""
    return _converted(cls) if internals.function_is_old_style(cls) else cls


@functools.lru_cache(maxsize=None)
def _backward_under_mode(cls: type) -> type:
    """``cls`` (setup_context style) with its ``forward`` and ``backward`` run under an
    :class:`InplaceMode` each."""

    def forward(*args: Any) -> Any:  # torch runs it with the caller's modes off
        return run_planned((cls, "forward"), lambda: cls.forward(*args), args)

    def backward(ctx: Any, *grads: Any) -> Any:
        return run_planned((cls, "backward"), lambda: cls.backward(ctx, *grads), grads)

    return type(cls.__name__, (cls,), {"forward": staticmethod(forward),
                                       "backward": staticmethod(backward),
                                       "vjp": staticmethod(backward),
                                       "__qualname__": cls.__qualname__,
                                       "_funcbwd_wrapped": True})


def _apply_converting(original: Callable[..., Any]) -> Callable[..., Any]:
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        if not (_ACTIVE.get() and internals.stack_depth()) or getattr(cls, "_funcbwd_wrapped",
                                                                        False):
            return original(cls, *args, **kwargs)
        mode = current()
        if mode is not None:
            mode.promote_arguments(args)
        if not internals.function_is_old_style(cls):
            return original(_backward_under_mode(cls), *args, **kwargs)
        return _converted(cls).apply(*args, **kwargs)

    return apply


class functions_converted:
    """While active (and the mode flag is set), old-style Functions' ``apply`` converts them."""

    def __enter__(self) -> None:
        self._patch = internals.function_apply_replaced(_apply_converting)
        self._patch.__enter__()
        # set only once patched: a flag left set would make every later funcbwd.vmap skip its
        # retries (it would take itself for a vmap inside a retry)
        self._token = _ACTIVE.set(True)

    def __exit__(self, *exc: Any) -> None:
        try:
            self._patch.__exit__(*exc)
        finally:
            _ACTIVE.reset(self._token)


def run_inplace(call: Callable[[], Any], isolated: bool = False, on_copy: bool = False) -> Any:
    """``call()`` under the in-place mode with custom Functions converted (what each retry of
    :func:`funcbwd.vmap` and the decorator's as-written fallback run); ``isolated``,
    ``on_copy``: see :class:`InplaceMode`."""
    with functions_converted(), InplaceMode(isolated=isolated, on_copy=on_copy):
        return call()
