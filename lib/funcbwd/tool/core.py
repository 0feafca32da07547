"""The machinery behind one :func:`funcbwd.functionalized` wrapper: the cache lookup per call,
the trace on a miss (:func:`funcbwd.fx.formula_graphs.build`), the one-time warning and the
call-time fallback for untraceable code (the contract: :mod:`funcbwd.tool.functionalized`)."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import warnings
from typing import Any, Callable, Hashable

import torch

from funcbwd import internals
from funcbwd.errors import FuncbwdError, first_line
from funcbwd.fx.formula_graphs import build, flatten_args, positional_key
from funcbwd.internals import dynamo
from funcbwd.tool.cache import DEFAULT_MAXSIZE, GraphCache

#: observer kinds: a signature was traced / a call ran its entry
TRACED, CALLED = "traced", "called"


class FunctionalizeFallbackWarning(UserWarning):
    """A ``functionalized`` function could not be traced; it runs functionalized at call time."""


@dataclasses.dataclass(frozen=True)
class Untraceable:
    """A cached negative result: this signature cannot be traced, and why."""

    reason: str


Observer = Callable[[str, Any], None]


def signature_key(args: tuple) -> tuple:
    """What identifies one graph of ``fn(*args)`` (see :mod:`funcbwd.fx.formula_graphs`)."""
    key = positional_key(args)
    return key if key is not None else ("pytree",) + flatten_args(args).key


class Functionalizer:
    """The machinery behind one wrapper: its cache, its one-time warning, its fallback."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 maxsize: int | None = DEFAULT_MAXSIZE, observer: Observer | None = None,
                 warn: bool = True) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)
        self.cache = GraphCache(maxsize)
        self.observer = observer
        self.warn = warn
        self._warned = threading.Event()
        self._outside_compile: Callable[[tuple, dict], Any] | None = None

    # --- one call -------------------------------------------------------------------------
    def call_outside_compile(self, args: tuple, kwargs: dict) -> Any:
        """:meth:`call`, never traced by torch.compile: once ``torch._dynamo`` is imported it runs
        through :func:`funcbwd.internals.dynamo.run_eagerly` (dynamo graph-breaks at the call and
        compiles none of the trace's frames), so a ``torch.compile`` around the transforms runs
        this call eagerly and traces, caches and elides exactly as without compile."""
        run = self._outside_compile
        if run is None:
            if not dynamo.imported():  # no torch.compile yet: no dynamo callback can be active
                return self.call(args, kwargs)
            run = self._outside_compile = dynamo.run_eagerly(
                self.call, f"funcbwd.functionalized({self.name}) traces and runs eagerly")
        return run(args, kwargs)

    def call(self, args: tuple, kwargs: dict) -> Any:
        """``fn(*args, **kwargs)`` under a transform: the cached graph, or the fallback."""
        names = tuple(kwargs)
        full = args + tuple(kwargs.values()) if names else args
        key = (names, signature_key(full)) if names else signature_key(full)
        formula = self.fn if not names else _positional(self.fn, len(args), names)
        return self.run(key, formula, full)

    def run(self, key: Hashable, formula: Callable[..., Any], args: tuple) -> Any:
        """Run ``formula(*args)`` through the entry of ``key`` (traced from ``formula`` on a miss)."""
        entry = self.entry(key, formula, args)
        if self.observer is not None:
            self.observer(CALLED, entry)
        if isinstance(entry, Untraceable):
            return self.fallback(entry, formula, args, key)
        try:
            return entry.run(args)
        except RuntimeError as e:  # torch cannot run the graph here: the code as written might
            if not any(m in str(e) for m in _GRAPH_LIMITS):
                raise
            # both refusals come from the op's kernel check, before it draws or writes anything
            # (a graph writes its inputs back only at its end): nothing to undo
            return self.as_written(formula, args, e, key)

    def entry(self, key: Hashable, formula: Callable[..., Any], args: tuple):
        return self.cache.get(key, lambda: self._build(formula, args))

    def _build(self, formula: Callable[..., Any], args: tuple):
        """The entry for one signature: its graph, or :class:`Untraceable` when tracing ``formula``
        failed. A failure caused by the environment (the trace ran while torch.compile was
        tracing, or dynamo's machinery raised) is never cached: it raises one FuncbwdError and the
        next call traces again."""
        if dynamo.is_compiling():
            raise FuncbwdError(self._refusal("torch.compile is tracing this call"))
        try:
            entry: Any = build(formula, args, name=self.name, optimize=True)
        except Exception as e:  # noqa: BLE001 - any trace failure: run functionalized at call time
            if dynamo.is_dynamo_error(e):
                raise FuncbwdError(self._refusal(
                    f"torch.compile's machinery raised while tracing: {type(e).__name__}")) from e
            entry = Untraceable(f"{type(e).__name__}: {first_line(str(e))}")
            if _MASK_SHAPES in str(e):
                entry = _with_dense_masks(formula, args, self.name, entry)
        if self.observer is not None:
            self.observer(TRACED, entry)
        return entry

    def as_written(self, formula: Callable[..., Any], args: tuple, error: RuntimeError,
                   key: Hashable = None) -> Any:
        """The graph of a signature raised at call time (e.g. torch refuses a functionalized
        write into a tensor captured from outside under forward AD, or ``randomness="same"``
        with a functionalized random op on a batched tensor): the code as written, under
        funcbwd.vmap's in-place mode where a vmap level is active. If that fails too, the
        graph's error is raised."""
        try:
            out = (_under_inplace_mode((self, key), formula, args) if internals.vmap_active()
                   else formula(*args))
        except Exception:  # noqa: BLE001 - neither runs: the graph's error is the one to see
            raise error from None
        if self.warn and not self._warned.is_set():
            self._warned.set()
            warnings.warn(f"funcbwd.functionalized({self.name}): its graph cannot run here "
                          f"({type(error).__name__}: {first_line(str(error), 100)}); it ran as "
                          "written instead", FunctionalizeFallbackWarning, stacklevel=_wrapper_level())
        return out

    def _refusal(self, why: str) -> str:
        return (f"funcbwd.functionalized({self.name}) cannot trace under torch.compile ({why}); "
                "nothing was cached: call it eagerly, or around torch.compile")

    # --- untraceable --------------------------------------------------------------------------
    def fallback(self, entry: Untraceable, formula: Callable[..., Any], args: tuple,
                 key: Hashable = None) -> Any:
        if self.warn and not self._warned.is_set():
            self._warned.set()
            warnings.warn(f"funcbwd.functionalized({self.name}) cannot be traced ({entry.reason}); "
                          "it runs functionalized at call time under vmap (slower: no cache, no "
                          "copy elision)", FunctionalizeFallbackWarning, stacklevel=_wrapper_level())
        if not internals.vmap_active():
            return formula(*args)  # eager in-place is differentiable without a vmap level
        try:
            return _under_inplace_mode((self, key), formula, args)  # as written, funcbwd.vmap's mode
        except Exception:  # noqa: BLE001 - the mode cannot run it: functionalize at call time
            pass
        try:
            return torch.func.functionalize(formula)(*args)
        except (RuntimeError, NotImplementedError) as e:
            if "aten::copy" not in str(e):
                raise
            functionalized_error = e  # copy has no derivative; its writes were not applied yet
        try:
            return formula(*args)  # forward AD handles the in-place write as written
        except RuntimeError as e:
            raise FuncbwdError(
                f"{self.name} cannot run under these transforms: functionalized, "
                f"{first_line(str(functionalized_error), 120)}; as written, {first_line(str(e), 120)}"
                ". Make it traceable (no .item(), no value-dependent shapes) or write the copy "
                "out of place") from e


#: torch's refusals of a functionalized graph that the code as written does not meet (anything
#: else a graph raises is a bug of the graph, and raises)
_GRAPH_LIMITS = (
    "RegisterFunctionalization",  # a captured tensor written, under forward AD (INTERNAL ASSERT)
    "same randomness with a batched tensor input",  # a functionalized random op, randomness="same"
)


#: what tracing ``x[mask]`` / ``t[mask] = v`` raises (a data-dependent output shape)
_MASK_SHAPES = "output shape depends on"


def _with_dense_masks(formula: Callable[..., Any], args: tuple, name: str,
                      untraceable: Untraceable) -> Any:
    """The graph of ``formula`` traced with every boolean mask index as ``where`` (the in-place
    mode's mask rules, :class:`funcbwd.tool.inplace.InplaceMode` with ``dense_masks``: ``x[mask]``
    carried densely through elementwise ops into ``t[mask] = ...``), kept only if it computes
    what ``formula`` computes as written on seeded inputs (:func:`_differs_as_written`); else
    ``untraceable`` with both reasons."""
    from funcbwd.tool.inplace import InplaceMode

    def dense(*a: Any) -> Any:
        with InplaceMode(dense_masks=True):
            return formula(*a)

    try:
        entry = build(dense, args, name=f"{name} (masks as where)", optimize=True)
        why = _differs_as_written(entry, formula, args)
    except Exception as e:  # noqa: BLE001 - still untraceable (a selection reached a reduction)
        why = f"{type(e).__name__}: {first_line(str(e), 120)}"
    if why:
        return Untraceable(f"{untraceable.reason}; with masks as where: {why}")
    return entry


def _differs_as_written(entry: Any, formula: Callable[..., Any], args: tuple) -> str:
    """'' if ``entry``'s graph and ``formula`` as written agree (values exact, NaN-equal;
    shapes, dtypes, strides) on seeded inputs of ``args``' signature, outside every transform,
    else the difference (the mask rules' where is checked against the eager boolean index)."""
    from funcbwd.fx.formula_graphs import check_inputs, compare_outputs, tensor_positions

    with internals.cleared_functorch_state(), torch.no_grad():
        positions = tensor_positions(args)
        seeded = check_inputs([args[p] for p in positions], seed=1)
        runs = []
        for run in (lambda a: formula(*a), entry.run):
            full = list(args)
            for p, t in zip(positions, seeded):
                full[p] = t.clone()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(1)
                runs.append(run(tuple(full)))
    return compare_outputs(runs[0], runs[1])


def _under_inplace_mode(owner: Any, formula: Callable[..., Any], args: tuple) -> Any:
    """``formula(*args)`` as written under funcbwd.vmap's in-place mode, custom Functions
    converted; later calls of ``owner`` (a wrapper and signature) replay what the mode did."""
    from funcbwd.tool.oldstyle import functions_converted, run_planned

    with functions_converted():
        return run_planned(owner, lambda: formula(*args), args)


def _wrapper_level() -> int:
    """The ``warnings.warn`` stacklevel (counted from :meth:`Functionalizer.fallback`) of the
    nearest ``functionalized`` wrapper frame, however many frames lie between (the dynamo-disabled
    call adds some once torch.compile is imported)."""
    frame, level = sys._getframe(2), 2  # 1: fallback, 2: its caller
    while frame is not None and not frame.f_code.co_filename.endswith(_WRAPPER_FILE):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 4


_WRAPPER_FILE = os.path.join("tool", "functionalized.py")


def _positional(fn: Callable[..., Any], n: int, names: tuple[str, ...]) -> Callable[..., Any]:
    def formula(*a: Any) -> Any:
        return fn(*a[:n], **dict(zip(names, a[n:])))

    return formula
