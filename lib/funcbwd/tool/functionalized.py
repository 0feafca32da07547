"""``funcbwd.functionalized``: run your own in-place code under ``torch.func`` transforms.

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

Contract:

* **Outside every torch.func transform** ``fn`` runs as written (one int check of the functorch
  stack's depth, :func:`funcbwd.internals.stack_depth`).
* **Under any transform** (vmap, grad, vjp, jvp, jacrev, jacfwd, hessian, nestings) ``fn`` runs as
  the graph of ``torch.func.functionalize(fn)``, recorded once per signature (every tensor arg's
  shape, strides, dtype and device; every other arg's type and value, kwargs by name; they are
  baked into the graph) by :mod:`funcbwd.fx.tracer`, its ``aten.copy`` elided by
  :func:`funcbwd.fx.elide.elide_copies`, checked once against the un-elided graph on seeded inputs
  (random ops drawn alike; a refused elision keeps the un-elided graph), compiled to plain Python
  (:mod:`funcbwd.fx.codegen`) and cached (:mod:`funcbwd.tool.cache`: LRU, ``maxsize`` signatures,
  thread-safe; ``wrapper.cache_info()``, ``wrapper.cache_clear()``).
* **Eager semantics**: a function that mutates its inputs still does (functionalization writes the
  result back with ``copy_``); random ops draw anew on every call and follow ``vmap``'s
  ``randomness=``; the graph computes what ``fn`` computes (same ops, same order).
* **Untraceable ``fn``** (``.item()``, a Python branch on a tensor, ``nonzero``: data-dependent)
  warns once (:class:`FunctionalizeFallbackWarning`, with the reason) and runs at call time: with
  a vmap level active, as ``torch.func.functionalize(fn)``; otherwise as written (eager in-place
  is differentiable under grad/vjp/jvp/jacrev, whose forward has no vmap level). Where
  functionalize's ``aten.copy`` meets forward AD (``jacfwd``, ``hessian``: vmap over jvp; torch
  raises "Trying to use forward AD with aten::copy" before any write is applied) it retries ``fn``
  as written, which forward AD handles. **What cannot work**: an untraceable ``fn`` writing a
  batched value into an unbatched tensor in place under vmap over reverse mode (``vmap(jacrev)``,
  ``vmap(vjp)`` with batched primals): as written vmap refuses the write, functionalized
  ``aten.copy`` has no derivative (torch raises "derivative for aten::copy is not implemented"
  from the backward, too late to retry) and there is no graph to elide it from. ``.item()`` on a
  batched tensor fails under vmap in any case (torch). A traceable ``fn`` has none of these limits.

First call: the trace costs a few milliseconds per formula (see docs/your-code.md for the
numbers). The one-time costs that remain in a fresh process are torch's: functionalizing an
in-place op whose meta kernel is written in Python (``index_add_``, ``scatter_``, ``clamp_min_``:
functionalization runs it on meta tensors first, pytorch ``gen_functionalization_type.py``) imports
``torch.fx.experimental.symbolic_shapes`` and ``sympy`` (~0.5-1.5 s, once per process, also for
plain ``vmap(functionalize(f))``); ``TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE=1`` in the
environment skips that check (read once, at the first functionalized in-place op).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import warnings
from typing import Any, Callable, Hashable

import torch

from funcbwd import internals
from funcbwd.errors import BadInputError, FuncbwdError, first_line
from funcbwd.fx.formula_graphs import FormulaGraph, build, flatten_args, positional_key
from funcbwd.tool.cache import DEFAULT_MAXSIZE, GraphCache

#: observer kinds: a signature was traced / a call ran its entry
TRACED, CALLED = "traced", "called"


class FunctionalizeFallbackWarning(UserWarning):
    """A ``functionalized`` function could not be traced; it runs functionalized at call time."""


@dataclasses.dataclass(frozen=True)
class Untraceable:
    """A cached negative result: this signature cannot be traced, and why."""

    reason: str


Entry = "FormulaGraph | Untraceable"
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

    # --- one call -------------------------------------------------------------------------
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
            return self.fallback(entry, formula, args)
        return entry.run(args)

    def entry(self, key: Hashable, formula: Callable[..., Any], args: tuple):
        return self.cache.get(key, lambda: self._build(formula, args))

    def _build(self, formula: Callable[..., Any], args: tuple):
        try:
            entry: Any = build(formula, args, name=self.name)
        except Exception as e:  # noqa: BLE001 - any trace failure: run functionalized at call time
            entry = Untraceable(f"{type(e).__name__}: {first_line(str(e))}")
        if self.observer is not None:
            self.observer(TRACED, entry)
        return entry

    # --- untraceable --------------------------------------------------------------------------
    def fallback(self, entry: Untraceable, formula: Callable[..., Any], args: tuple) -> Any:
        if self.warn and not self._warned.is_set():
            self._warned.set()
            warnings.warn(f"funcbwd.functionalized({self.name}) cannot be traced ({entry.reason}); "
                          "it runs functionalized at call time under vmap (slower: no cache, no "
                          "copy elision)", FunctionalizeFallbackWarning, stacklevel=4)
        if not internals.vmap_active():
            return formula(*args)  # eager in-place is differentiable without a vmap level
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


def _positional(fn: Callable[..., Any], n: int, names: tuple[str, ...]) -> Callable[..., Any]:
    def formula(*a: Any) -> Any:
        return fn(*a[:n], **dict(zip(names, a[n:])))

    return formula


def functionalized(fn: Any = None, *, maxsize: int | None = DEFAULT_MAXSIZE,
                   name: str | None = None, observer: Observer | None = None, warn: bool = True):
    """Wrap ``fn`` (a function, or a ``torch.autograd.Function`` subclass) so that it works under
    torch.func transforms (see the module docstring). Usable as ``@functionalized`` or
    ``@functionalized(maxsize=...)``. ``observer(kind, entry)`` is told what was traced
    (``TRACED``) and what ran (``CALLED``) for each call under a transform (the ``traced``
    strategy's provenance); ``warn=False`` silences the fallback warning."""
    if fn is None:
        return functools.partial(functionalized, maxsize=maxsize, name=name, observer=observer,
                                 warn=warn)
    if isinstance(fn, type) and issubclass(fn, torch.autograd.Function):
        from funcbwd.tool.functions import functionalized_function

        return functionalized_function(fn, maxsize=maxsize, warn=warn)
    if not callable(fn):
        raise BadInputError(f"functionalized takes a function or a torch.autograd.Function "
                            f"subclass, got {type(fn).__name__}")
    core = Functionalizer(fn, name=name, maxsize=maxsize, observer=observer, warn=warn)
    depth, call = internals.stack_depth, core.call

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not depth():
            return fn(*args, **kwargs)
        return call(args, kwargs)

    try:
        wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # builtins without a signature keep functools.wraps' view
        pass
    wrapper.cache_info = core.cache.info  # type: ignore[attr-defined]
    wrapper.cache_clear = core.cache.clear  # type: ignore[attr-defined]
    wrapper.functionalizer = core  # type: ignore[attr-defined]
    return wrapper


def entries(wrapper: Callable[..., Any]) -> list[FormulaGraph]:
    """The traced graphs a wrapper holds now (untraceable signatures left out)."""
    return [e for e in wrapper.functionalizer.cache.values() if isinstance(e, FormulaGraph)]
