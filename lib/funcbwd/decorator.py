"""``funcbwd.functionalized``: your own in-place code under ``torch.func`` transforms.

``vmap`` refuses an in-place write of a batched tensor into an unbatched one ("vmap: inplace
arithmetic ... is not possible", pytorch#97248); ``torch.func.functionalize`` rewrites such code
out of place, but the ``aten.copy`` it emits for ``view.copy_(src)`` (and ``y[i] = v``) has no
derivative ("derivative for aten::copy is not implemented" under ``vmap(jacrev)``, pytorch#103329)
and no batching rule. The wrapper::

    @funcbwd.functionalized
    def f(x):
        y = torch.zeros(x.shape)
        y[0] = x[0] * 2
        return y

    torch.func.vmap(torch.func.jacrev(f))(x)   # works; f(x) outside transforms runs f as written

The promise is the tool's: under every transform, what ``f`` as written gives (a per-sample loop
of it, eager autograd), or one error naming the cause. How:

* **Outside every transform** ``f`` runs as written (one int check of the functorch stack).
* **Under any transform** ``f`` runs as the graph of ``torch.func.functionalize(f)``, traced once
  per key on fake tensors (:mod:`funcbwd.fx.tracer`: the first call's cost does not grow with the
  sizes), its ``aten.copy`` elided and the graph passes of :mod:`funcbwd.fx.passes` applied, each
  checked against the trace on seeded inputs, compiled to plain Python and cached
  (:class:`funcbwd.cache.LRU`, ``maxsize`` keys per function). The key: every argument's
  signature (tensors by shape, strides, dtype, device; other values by value), grad mode, and the
  Python values ``f`` can reach (:mod:`funcbwd.guards`: a rebound ``alpha = 0.5`` traces anew).
  Tensors ``f`` captures (a closure, a global, a module's weight) are graph inputs, fed from where
  they are found at each call (a rebound global is seen).
* **What a graph cannot stand for** (:mod:`funcbwd.audit`: a write under ``no_grad`` or through
  ``.data``/``.detach()`` into a tensor that carries gradient, ``detach_()``, a read of
  ``requires_grad``), **data-dependent code** (``.item()``, a Python branch on a tensor,
  ``nonzero``) and captured tensors the guards cannot find are not traced: ``f`` runs as written at
  every call (under vmap, under the in-place mode of :mod:`funcbwd.inplace`, whose plans are
  replayed on later calls), with a one-time :class:`FunctionalizeFallbackWarning` naming why.
  Boolean masks (``x[mask]``, ``t[mask] = v``) are traced again with every mask as ``where``,
  kept only if that graph matches ``f`` as written on seeded inputs. A graph that detached what
  ran under ``no_grad`` runs as written where forward-mode AD is active (jvp, jacfwd, hessian:
  forward AD ignores ``no_grad``). Where ``f`` as written fails too (vmap's ``.item()``), torch's
  error gets a note naming what ran and the user's ``file:line``; the random state is put back.
* **Nested and concurrent**: a decorated function called while another is being traced runs as
  written inside that trace; keys are built under a lock of their own (threads tracing one key
  share it; nothing else waits).
* **Under torch.compile** the wrapper's transform path is never traced by dynamo
  (:func:`funcbwd.internals.dynamo.run_eagerly`), so it traces, caches and elides as in eager mode.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import types
import warnings
from typing import Any, Callable, Hashable

import torch

from funcbwd import guards, internals, scope
from funcbwd.audit import Audit
from funcbwd.cache import DEFAULT_MAXSIZE, LRU
from funcbwd.errors import (BadInputError, FuncbwdError, LoopInstead, NeedsMode, first_line,
                            user_frame)
from funcbwd.fx.formula_graphs import FormulaGraph, build, flatten_args, positional_key
from funcbwd.journal import Journal
from funcbwd.internals import dynamo

__all__ = ["functionalized", "FunctionalizeFallbackWarning", "Untraceable", "entries", "CALLED",
           "TRACED", "signature_key"]

#: observer kinds: a key was traced / a call ran its entry
TRACED, CALLED = "traced", "called"


class FunctionalizeFallbackWarning(UserWarning):
    """A ``functionalized`` function is not traced; it runs as written under transforms."""


class Untraceable(tuple):
    """A cached negative result: this key is not traced, and why (``.reason``)."""

    def __new__(cls, reason: str) -> "Untraceable":
        return super().__new__(cls, (reason,))

    reason = property(lambda self: self[0])


Observer = Callable[[str, Any], None]


def signature_key(args: tuple) -> tuple:
    """What identifies one graph of ``fn(*args)`` besides the guards (see the module docstring)."""
    key = positional_key(args)
    return key if key is not None else ("pytree",) + flatten_args(args).key


class Functionalizer:
    """The machinery behind one wrapper: its cache, its guards, its one-time warning."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 maxsize: int | None = DEFAULT_MAXSIZE, observer: Observer | None = None,
                 warn: bool = True) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)
        self.cache = LRU(maxsize)
        self.observer = observer
        self.warn = warn
        self._warned = threading.Event()
        self._env: guards.Env | None = None
        self._outside_compile: Callable[[tuple, dict], Any] | None = None

    # --- one call -------------------------------------------------------------------------
    def call_outside_compile(self, args: tuple, kwargs: dict) -> Any:
        """:meth:`call`, never traced by torch.compile (module docstring)."""
        run = self._outside_compile
        if run is None:
            if not dynamo.imported():  # no torch.compile yet: no dynamo callback can be active
                return self.call(args, kwargs)
            run = self._outside_compile = dynamo.run_eagerly(
                self.call, f"funcbwd.functionalized({self.name}) traces and runs eagerly")
        return run(args, kwargs)

    def call(self, args: tuple, kwargs: dict) -> Any:
        """``fn(*args, **kwargs)`` under a transform: the cached graph, or the code as written."""
        names = tuple(kwargs)
        full = args + tuple(kwargs.values()) if names else args
        formula = self.fn if not names else _positional(self.fn, len(args), names)
        key = (names, signature_key(full)) if names else signature_key(full)
        return self.run(key, formula, full)

    def env(self, args: tuple) -> guards.Env:
        if self._env is None:
            self._env = guards.environment(self.fn, args)
        return self._env

    def key(self, key: Hashable, args: tuple) -> tuple:
        return (key, torch.is_grad_enabled(), self.env(args).values(self.fn, args))

    def entry(self, key: Hashable, formula: Callable[..., Any], args: tuple) -> Any:
        """The cache entry of ``key`` for these arguments (traced on a miss)."""
        return self.cache.get_or_build(self.key(key, args), lambda: self._build(formula, args))

    def run(self, key: Hashable, formula: Callable[..., Any], args: tuple) -> Any:
        """Run ``formula(*args)`` through the entry of ``key`` (traced from ``formula`` on a miss)."""
        full_key = self.key(key, args)
        entry = self.cache.get_or_build(full_key, lambda: self._build(formula, args))
        captured = _captured_now(self.fn, args, entry)
        if captured is None:  # a captured tensor rebound to another shape: trace for that too
            entry = self.cache.get_or_build(full_key + (_specs_now(self.fn, args, entry),),
                                            lambda: self._build(formula, args))
            captured = _captured_now(self.fn, args, entry)
        if self.observer is not None:
            self.observer(CALLED, entry)
        if captured is None or isinstance(entry, Untraceable):
            return self.as_written(formula, args, entry, key)
        if not _runnable_here(entry):
            return self.as_written(formula, args, Untraceable(
                "its graph has random ops and vmap's randomness='same' is active"), key)
        if entry.no_grad and internals.forward_ad_active():
            return self.as_written(formula, args, Untraceable(
                "it computes under no_grad, which forward-mode AD (jvp, jacfwd, hessian) ignores "
                "and its graph's detach would not"), key)
        return entry.run(args + captured)

    def _build(self, formula: Callable[..., Any], args: tuple) -> Any:
        """The entry for one key: its graph, or :class:`Untraceable` (why). A failure caused by
        the environment (torch.compile tracing) is never cached: one FuncbwdError, and the next
        call traces again."""
        if dynamo.is_compiling():
            raise FuncbwdError(self._refusal("torch.compile is tracing this call"))
        entry: Any = None
        with scope.entered(tracing=scope.current().tracing | {id(self)}):
            try:
                pre = guards.reachable(self.fn, args)
                try:
                    entry = build(formula, args, name=self.name, optimize=True, fake=True,
                                  capture=True, grad_mode=torch.is_grad_enabled(), audit=Audit)
                finally:  # the trace's tensors are not left in the caller's objects
                    stored = guards.trace_tensors_stored(self.fn, args)
                    for path in stored:
                        guards.put(self.fn, args, path, pre.get(path, guards.GONE))
                if stored:
                    raise guards.StoresTensor(stored[0])
                entry.paths = self.env(args).locate(entry.captured_tensors)
            except Exception as e:  # noqa: BLE001 - any trace failure: run as written
                if dynamo.is_dynamo_error(e):
                    raise FuncbwdError(self._refusal(
                        f"torch.compile's machinery raised while tracing: {type(e).__name__}")
                    ) from e
                entry = Untraceable(f"{type(e).__name__}: {first_line(str(e))}")
                if _MASK_SHAPES in str(e):
                    from funcbwd.dense_masks import with_dense_masks

                    entry = with_dense_masks(formula, args, self.name, entry)
                    if not isinstance(entry, Untraceable):
                        entry.paths = self.env(args).locate(entry.captured_tensors)
            finally:
                if entry is not None and not isinstance(entry, Untraceable):
                    entry.captured_tensors = ()  # the caller's tensors are never kept
        if self.observer is not None:
            self.observer(TRACED, entry)
        return entry

    def as_written(self, formula: Callable[..., Any], args: tuple, why: Untraceable,
                   key: Hashable = None) -> Any:
        """``formula(*args)`` as written (:func:`funcbwd.functions.run_as_written`: as it is,
        else under the in-place mode, its plan replayed on later calls), the caller's tensors
        handled by the tool's contract (:mod:`funcbwd.inplace`)."""
        if self.warn and not self._warned.is_set():
            self._warned.set()
            warnings.warn(f"funcbwd.functionalized({self.name}) runs as written under transforms "
                          f"({why.reason})", FunctionalizeFallbackWarning,
                          stacklevel=_wrapper_level())
        from funcbwd.functions import functions_converted, run_as_written
        from funcbwd.masks import tensors

        samples = scope.samples_now(tensors(args))
        rng = internals.rng_states()
        pre, outer, journal = guards.reachable(self.fn, args), scope.current().journal, Journal()
        try:  # the call's writes into the caller's tensors land in ``journal`` until checked
            with scope.entered(samples=samples, journal=journal), functions_converted():
                out = run_as_written((self, key), lambda: formula(*args), args)
            if internals.vmap_active():
                self._check_stored(args, pre)
            journal.commit() if outer is None else outer.absorb(journal)
            return out
        except Exception as e:
            journal.restore()
            internals.set_rng_states(rng)  # a refused call draws nothing
            guards.put_back(self.fn, args, pre)  # nor stores anything
            if not isinstance(e, (FuncbwdError, LoopInstead, NeedsMode)):  # torch's own error:
                # say what ran, and where
                e.add_note(f"funcbwd.functionalized({self.name}) ran it as written under this "
                           f"transform (not traced: {why.reason}), as it is and under the "
                           f"in-place mode; it raised at {user_frame(e, self.fn)}")
            raise

    def _check_stored(self, args: tuple, pre: dict) -> None:
        """A tensor stored under vmap where the caller can reach it is batched: once the call
        returns it escapes, not the per-sample loop's last value. Refused (the caller's error
        handler puts every store back)."""
        for path, t in guards.changed(self.fn, args, pre).items():
            if isinstance(t, torch.Tensor) and internals.vmap_levels(t):
                raise FuncbwdError(
                    f"funcbwd.functionalized({self.name}) ({user_frame(None, self.fn)}) stores a "
                    f"tensor it computes under vmap at {guards.path_text(path)}: a batched tensor "
                    "of a finished transform, not a per-sample loop's last value. Nothing was "
                    "stored: return it, or store it outside the transform")

    def _refusal(self, why: str) -> str:
        return (f"funcbwd.functionalized({self.name}) cannot trace under torch.compile ({why}); "
                "nothing was cached: call it eagerly, or around torch.compile")


#: what tracing ``x[mask]`` / ``t[mask] = v`` raises (a data-dependent output shape)
_MASK_SHAPES = "output shape depends on"


def _captured_now(fn: Any, args: tuple, entry: Any) -> tuple | None:
    """The tensors a graph captured, from where they are now (None: not all found, not one
    object at all of a tensor's paths, or another layout than traced)."""
    if isinstance(entry, Untraceable) or not entry.paths:
        return ()
    out = []
    for paths, spec in zip(entry.paths, entry.captured):
        found = [guards.resolve(fn, args, p) for p in paths]
        t = found[0]
        if not isinstance(t, torch.Tensor) or any(f is not t for f in found[1:]):
            return None
        if (tuple(t.shape), t.stride(), t.dtype, t.device) != spec:
            return None
        out.append(t)
    return tuple(out)


def _specs_now(fn: Any, args: tuple, entry: Any) -> tuple:
    out = []
    for paths in entry.paths:
        t = guards.resolve(fn, args, paths[0])
        out.append((tuple(t.shape), t.stride(), t.dtype, t.device) if isinstance(
            t, torch.Tensor) else ("object", id(t)))
    return tuple(out)


def _runnable_here(entry: FormulaGraph) -> bool:
    """A graph with random ops cannot run under vmap's ``randomness="same"`` with a batched input
    (torch refuses the functionalized random op): that call runs as written."""
    return not (entry.random and internals.vmap_randomness_same())


def _wrapper_level() -> int:
    """The ``warnings.warn`` stacklevel of the nearest ``functionalized`` wrapper frame."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code is not _WRAPPER_CODE[0]:
        frame, level = frame.f_back, level + 1
    return level + 1 if frame is not None else 4


_WRAPPER_CODE: list = [None]


def _positional(fn: Callable[..., Any], n: int, names: tuple[str, ...]) -> Callable[..., Any]:
    def formula(*a: Any) -> Any:
        return fn(*a[:n], **dict(zip(names, a[n:])))

    return formula


def functionalized(fn: Any = None, *, maxsize: int | None = DEFAULT_MAXSIZE,
                   name: str | None = None, observer: Observer | None = None, warn: bool = True):
    """Wrap ``fn`` (a function, or a ``torch.autograd.Function`` subclass) so that it works under
    torch.func transforms (see the module docstring). Usable as ``@functionalized`` or
    ``@functionalized(maxsize=...)``. ``observer(kind, entry)`` is told what was traced
    (``TRACED``) and what ran (``CALLED``); ``warn=False`` silences the one-time warning."""
    if fn is None:
        return functools.partial(functionalized, maxsize=maxsize, name=name, observer=observer,
                                 warn=warn)
    if isinstance(fn, type) and issubclass(fn, torch.autograd.Function):
        return functionalized_function(fn, maxsize=maxsize, warn=warn)
    if not callable(fn):
        raise BadInputError(f"functionalized takes a function or a torch.autograd.Function "
                            f"subclass, got {type(fn).__name__}")
    core = Functionalizer(fn, name=name, maxsize=maxsize, observer=observer, warn=warn)
    depth, call, current = internals.stack_depth, core.call_outside_compile, scope.current

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not depth() or current().tracing:  # no transform, or inside another's trace
            return fn(*args, **kwargs)
        return call(args, kwargs)

    _WRAPPER_CODE[0] = wrapper.__code__
    try:
        wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # builtins without a signature keep functools.wraps' view
        pass
    wrapper.cache_info = core.cache.info  # type: ignore[attr-defined]
    wrapper.cache_clear = core.cache.clear  # type: ignore[attr-defined]
    wrapper.functionalizer = core  # type: ignore[attr-defined]
    return wrapper


def entries(wrapper: Callable[..., Any]) -> list[FormulaGraph]:
    """The traced graphs a wrapper holds now (untraceable keys left out)."""
    return [e for e in wrapper.functionalizer.cache.values() if isinstance(e, FormulaGraph)]


# ------------------------------------------------------------------------------ Function classes
# ``@funcbwd.functionalized`` on a ``torch.autograd.Function`` subclass.
#
# functorch#207: a custom Function whose backward writes into a fresh tensor in place
# (``grad_input = grad.clone(); grad_input[input < 0] = 0``) fails under ``vmap(vjp)`` once the
# cotangent is batched. The decorator returns a subclass whose ``backward`` (and ``jvp``, if the
# class defines one) runs functionalized under transforms, as :func:`funcbwd.functionalized` runs a
# function: traced once per signature, copies elided, checked, cached. ``apply`` and ``forward`` are
# the class's own; ``generate_vmap_rule = True`` unless the class defines ``vmap`` (so ``vmap`` over
# ``apply`` works too).
#
# What a signature of ``backward(ctx, *grads)`` is: ``ctx.saved_tensors`` and every tensor
# attribute ``setup_context`` set on ``ctx`` are graph **inputs** (never baked in: the next call's
# saved tensors are other tensors); every other attribute (``ctx.dim = 1``) and
# ``ctx.needs_input_grad`` are part of the cache key (baked into the graph); the grads are inputs.
# The backward sees a stand-in ctx with those attributes and ``saved_tensors``; one that calls
# other ctx methods (``ctx.mark_dirty`` is forward-only anyway) is not supported.
#
# Only the ``setup_context`` style can work under torch.func (torch requires it): an old-style
# ``forward(ctx, ...)`` class is first converted (:func:`funcbwd.functions.setup_context_style`:
# its forward runs once with a recording ctx, what it saved reaches ``setup_context``).
#
# A non-tensor ctx value is baked into the graph by value where it has one (numbers, strings,
# dtypes, slices, ``...``, tuples of those: an index tuple rebuilt on every call hits the cache);
# other objects by identity.

_HASHABLE_KINDS = (int, float, bool, str, type(None), complex, torch.dtype, torch.device,
                   type(Ellipsis))


def _defines(cls: type, name: str) -> bool:
    base = getattr(torch.autograd.Function, name, None)
    return getattr(cls, name, None) is not base


def _split_state(ctx: Any) -> tuple[tuple[str, ...], tuple, tuple[str, ...], tuple]:
    """(tensor attribute names, their tensors, other attribute names, their values)."""
    state = internals.autograd_ctx_state(ctx)
    tnames = tuple(sorted(k for k, v in state.items() if isinstance(v, torch.Tensor)))
    onames = tuple(sorted(k for k in state if k not in tnames))
    return tnames, tuple(state[k] for k in tnames), onames, tuple(state[k] for k in onames)


def _baked(value: Any) -> Any:
    """A key part for a non-tensor ctx attribute (baked into the graph)."""
    if isinstance(value, _HASHABLE_KINDS):
        return (type(value), value.hex() if type(value) is float else value)
    if isinstance(value, slice):
        return (slice, _baked(value.start), _baked(value.stop), _baked(value.step))
    if isinstance(value, (tuple, list)):
        parts = tuple(_baked(v) for v in value)
        if all(p[0] is not object for p in parts):
            return (type(value), parts)
    return (object, type(value), id(value))  # an object: by identity (a new one retraces)


def _runner(core: Functionalizer, method):
    """``method(ctx, *grads)`` functionalized under transforms, as written outside them."""

    def run(ctx: Any, *grads: Any) -> Any:
        if not internals.stack_depth():
            return method(ctx, *grads)
        saved = tuple(ctx.saved_tensors) if hasattr(ctx, "saved_tensors") else ()
        needs = tuple(getattr(ctx, "needs_input_grad", ()) or ())
        tnames, tvals, onames, ovals = _split_state(ctx)
        n_saved, n_attr = len(saved), len(tnames)
        args = saved + tvals + tuple(grads)
        key = ("ctx", n_saved, tnames, onames, tuple(map(_baked, ovals)), needs,
               signature_key(args))

        def formula(*flat: Any) -> Any:
            stand_in = types.SimpleNamespace(
                saved_tensors=tuple(flat[:n_saved]), needs_input_grad=needs,
                **dict(zip(onames, ovals)), **dict(zip(tnames, flat[n_saved:n_saved + n_attr])))
            return method(stand_in, *flat[n_saved + n_attr:])

        return core.run(key, formula, args)

    return run


def functionalized_function(cls: type, *, maxsize: int | None = DEFAULT_MAXSIZE,
                            warn: bool = True) -> type:
    """The subclass of ``cls`` described in the module docstring."""
    from funcbwd.functions import setup_context_style

    cls = setup_context_style(cls)  # an old-style forward(ctx, ...) class, converted
    attrs: dict[str, Any] = {"__module__": cls.__module__, "__doc__": cls.__doc__,
                             "__qualname__": cls.__qualname__}
    methods = ["backward"] + (["jvp"] if _defines(cls, "jvp") else [])
    for m in methods:
        core = Functionalizer(getattr(cls, m), name=f"{cls.__qualname__}.{m}", maxsize=maxsize,
                              warn=warn)
        attrs[m] = staticmethod(_runner(core, getattr(cls, m)))
        attrs[f"_funcbwd_{m}"] = core
    if not _defines(cls, "vmap"):
        attrs["generate_vmap_rule"] = True
    new = type(cls.__name__, (cls,), attrs)
    new.cache_info = staticmethod(new._funcbwd_backward.cache.info)  # type: ignore[attr-defined]
    new.cache_clear = staticmethod(new._funcbwd_backward.cache.clear)  # type: ignore[attr-defined]
    return new
