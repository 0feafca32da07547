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
  (random ops drawn alike; a refused elision keeps the un-elided graph), then the graph passes of
  :mod:`funcbwd.fx.passes` (common subexpressions, writes into a fresh factory as ``cat`` /
  ``stack`` / ``*_backward``, chains of writes at constant positions as one gather, reads of
  fresh factories folded), each checked the same way and dropped alone if it differs, compiled
  to plain Python
  (:mod:`funcbwd.fx.codegen`) and cached (:mod:`funcbwd.tool.cache`: LRU, ``maxsize`` signatures,
  thread-safe; ``wrapper.cache_info()``, ``wrapper.cache_clear()``). A call with positional
  tensors and scalars whose graph is cached takes a fast path (one key, one dict read).
* **Eager semantics**: a function that mutates its inputs still does (functionalization writes the
  result back with ``copy_``); random ops draw anew on every call and follow ``vmap``'s
  ``randomness=``; the graph computes what ``fn`` computes (same ops, same order).
* **Under torch.compile** (``torch.compile(vmap(jacrev(f)))``, any backend) the wrapper's
  transform path is never traced by dynamo (:func:`funcbwd.internals.dynamo.run_eagerly`: a graph
  break at the call, no frame of the trace compiled), so it traces, caches and elides as in eager
  mode and returns the same values. A trace failure caused by the environment (dynamo's machinery
  raised, or a trace started while dynamo traces) is never cached: one ``FuncbwdError`` line, and
  the next call traces again.
* **Boolean masks** (``x[mask]``, ``t[mask] = v``: a data-dependent shape no trace records) are
  traced again with every mask index as ``where`` (the in-place mode's mask rules: ``x[mask]``
  carried densely through elementwise ops into ``t[mask] = ...``); that graph is kept only if it
  computes what ``fn`` as written computes on seeded inputs (values exact, strides).
* **Untraceable ``fn``** (``.item()``, a Python branch on a tensor, ``nonzero``, a mask selection
  reaching a reduction: data-dependent) warns once (:class:`FunctionalizeFallbackWarning`, with
  the reason) and runs at call time: with a vmap level active, as written under
  :func:`funcbwd.vmap`'s in-place mode (:mod:`funcbwd.tool.inplace`; later calls of the
  signature replay what the mode did), else as ``torch.func.functionalize(fn)``, else as
  written; without a vmap level, as written (eager in-place is differentiable under
  grad/vjp/jvp/jacrev). ``.item()`` on a batched tensor fails under vmap in any case (torch).
* **A graph torch refuses to run** where the code as written runs (a write into a tensor captured
  from outside under forward AD: torch's functionalization asserts; a functionalized random op on
  a batched tensor with ``randomness="same"``): that call runs as written (under the in-place
  mode with a vmap level), with the one-time warning. Any other error of a graph is raised.

First call: the trace costs a few milliseconds per formula (see docs/your-code.md for the
numbers). The one-time costs that remain in a fresh process are torch's: functionalizing an
in-place op whose meta kernel is written in Python (``index_add_``, ``scatter_``, ``clamp_min_``:
functionalization runs it on meta tensors first, pytorch ``gen_functionalization_type.py``) imports
``torch.fx.experimental.symbolic_shapes`` and ``sympy`` (~0.5-1.5 s, once per process, also for
plain ``vmap(functionalize(f))``); ``TORCH_DISABLE_FUNCTIONALIZATION_META_REFERENCE=1`` in the
environment skips that check (read once, at the first functionalized in-place op).
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable

import torch

from funcbwd import internals
from funcbwd.errors import BadInputError
from funcbwd.fx.formula_graphs import FormulaGraph, positional_key
from funcbwd.tool.cache import DEFAULT_MAXSIZE
from funcbwd.tool.core import (CALLED, TRACED, Functionalizer, FunctionalizeFallbackWarning,
                               Observer, Untraceable, signature_key)
from funcbwd.tool.functions import functionalized_function

__all__ = ["functionalized", "FunctionalizeFallbackWarning", "Untraceable", "entries", "CALLED",
           "TRACED", "signature_key"]


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
        return functionalized_function(fn, maxsize=maxsize, warn=warn)
    if not callable(fn):
        raise BadInputError(f"functionalized takes a function or a torch.autograd.Function "
                            f"subclass, got {type(fn).__name__}")
    core = Functionalizer(fn, name=name, maxsize=maxsize, observer=observer, warn=warn)
    depth, call, peek, modules = internals.stack_depth, core.call_outside_compile, core.cache.peek, sys.modules
    fast = observer is None

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not depth():
            return fn(*args, **kwargs)
        if fast and not kwargs and "torch._dynamo" not in modules:
            # the fast path: positional tensors and scalars whose graph is cached (no
            # torch.compile imported: nothing to keep dynamo out of); anything else, the full path
            entry = peek(positional_key(args))
            if entry.__class__ is FormulaGraph:
                try:
                    return entry.run(args)
                except RuntimeError:
                    pass  # the full path decides (a graph torch refuses here: as written)
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
