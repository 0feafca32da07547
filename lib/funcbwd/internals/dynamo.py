"""torch.compile's private parts (dynamo, its backends, AOTAutograd's caches), for
:mod:`funcbwd_lab.strategies.compiled` and the study :mod:`funcbwd_lab.studies.compiled`.

Part of :mod:`funcbwd.internals`, the one place funcbwd touches private torch APIs (split off by
topic to keep each module small). Functions are thin and named for what they mean to funcbwd.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any, Callable, Iterator

import torch


def compile_backend(name: str):
    """The backend object ``torch.compile(fn, backend=name)`` builds for ``name`` with no mode or
    options (torch/__init__.py ``compile``): for "inductor" its private
    ``_TorchCompileInductorWrapper``, else dynamo's registered backend (``lookup_backend``)."""
    if name == "inductor":
        return torch._TorchCompileInductorWrapper(None, None, False)
    from torch._dynamo import lookup_backend

    return lookup_backend(name)


#: torch.compile's loggers whose warnings a compiled cell keeps off stderr (inside fresh_compiler)
QUIET_LOGGERS = ("torch._dynamo", "torch._inductor", "torch._functorch")


@contextlib.contextmanager
def fresh_compiler() -> Iterator[None]:
    """A block that compiles as a fresh process would: dynamo reset on entry and on exit (code
    caches, guards, graph-break reasons; ``torch.compiler.reset``) and every compile cache off
    inside (FX graph, AOT autograd; ``torch.compiler.config.force_disable_caches``), so no compiled
    call reuses another's work. Files inductor writes (generated C++ and its build, keyed by the
    source's hash) are not results and are left where torch puts them. Dynamo's warnings are kept
    off stderr inside (:data:`QUIET_LOGGERS` at ERROR). The reset is process-wide:
    a caller's own compiled functions recompile on their next call (same results, compile cost)."""
    torch.compiler.reset()
    quiet = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in quiet]
    for lg in quiet:  # dynamo's warnings (timestamped) would go to stderr: the report records
        lg.setLevel(logging.ERROR)  # graph breaks and errors instead
    try:
        with torch.compiler.config.patch(force_disable_caches=True):
            yield
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)
        torch.compiler.reset()


def graph_break_reasons() -> list[tuple[str, list]]:
    """``(reason, user stack)`` of each graph break dynamo took since the last reset, in order
    (``torch._dynamo.utils.graph_break_reasons``; the stack is ``traceback.FrameSummary`` s,
    outermost first)."""
    from torch._dynamo.utils import graph_break_reasons as reasons

    return [(r.reason, list(r.user_stack)) for r in reasons]


def is_autograd_function_apply(target) -> bool:
    """True for dynamo's higher-order op that carries an ``autograd.Function``'s forward and
    backward bodies into a graph (``torch.ops.higher_order.autograd_function_apply``)."""
    return target is torch.ops.higher_order.autograd_function_apply


def compile_error_stage(exc: BaseException) -> str:
    """Where a failed compiled call raised: "dynamo" (tracing the Python: an internal error, an
    unsupported construct, a fake-tensor run of a traced op), "backend" (the backend compiler
    raised on dynamo's graph) or "run" (anything else: the compiled code or an eager fallback)."""
    from torch._dynamo import exc as dexc

    if isinstance(exc, dexc.BackendCompilerFailed):
        return "backend"
    if isinstance(exc, dexc.TorchDynamoException):
        return "dynamo"
    return "run"


def compile_error_cause(exc: BaseException) -> BaseException:
    """The exception a backend raised, for a ``BackendCompilerFailed`` (whose own message is only
    "backend=... raised:"); ``exc`` itself otherwise."""
    from torch._dynamo import exc as dexc

    if isinstance(exc, dexc.BackendCompilerFailed) and exc.inner_exception is not None:
        return exc.inner_exception
    return exc


def dynamo_cache_entries(code) -> int:
    """How many compiled versions dynamo holds for a code object (``fn.__code__``); 0 after a
    reset (private ``_debug_get_cache_entry_list``)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(code))


@contextlib.contextmanager
def dynamo_recompile_limit(n: int) -> Iterator[None]:
    """Dynamo's per-code recompile limit set to ``n`` for the block (past it dynamo stops compiling
    that code and runs it eagerly)."""
    with torch._dynamo.config.patch(recompile_limit=n):
        yield


# ---------------------------------------------------------------------------- around funcbwd's tool
def imported() -> bool:
    """True once anything imported ``torch._dynamo`` (torch.compile does; ``import torch`` does
    not): before that no dynamo frame callback can be active, so nothing needs turning off."""
    return "torch._dynamo" in sys.modules


def run_eagerly(fn: Callable[..., Any], reason: str) -> Callable[..., Any]:
    """``fn`` as dynamo's ``torch.compiler.disable`` makes it: dynamo does not trace into it (a
    graph break at its call, ``reason`` in the break's explanation) and while it runs no frame it
    calls is compiled (the eval-frame callback is off). Imports ``torch._dynamo`` (seconds in a
    fresh process): call it only when :func:`imported` is True."""
    import torch._dynamo

    return torch._dynamo.disable(fn, reason=reason)


def is_compiling() -> bool:
    """True while dynamo traces the calling code (``torch.compiler.is_compiling``)."""
    return torch.compiler.is_compiling()


def is_dynamo_error(exc: BaseException) -> bool:
    """An exception raised by dynamo's own machinery (its internal errors, unsupported constructs,
    a backend's failure), anywhere in ``exc``'s cause chain: the environment failed, not the
    traced code."""
    seen = 0
    while exc is not None and seen < 16:
        if type(exc).__module__.startswith("torch._dynamo"):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
