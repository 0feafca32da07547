"""Private torch internals, part two: the dispatcher and operator registry (scoped kernels and vmap
rules, registry queries, library lifetime), the OpInfo database, the profiler flag, and the
callables a compiled formula graph calls. Re-exported by :mod:`funcbwd.internals`, the one
entry point.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

_F = torch._C._functorch


# ---------------------------------------------------------------------------- scoped aten kernels (funcbwd_lab.batching.copy)
@contextlib.contextmanager
def scoped_aten_kernel(op_name: str, kernel, dispatch_key: str) -> Iterator[None]:
    """Register ``kernel`` for ``aten::op_name`` at ``dispatch_key`` for the block only.

    ``torch.library.Library(..., "IMPL")`` registrations are process-wide until the library is
    destroyed; ``Library._destroy`` (private) removes them, restoring the previous dispatch entry."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl(op_name, kernel, dispatch_key)
        yield
    finally:
        destroy_library(lib)


# ---------------------------------------------------------------------------- dispatcher registry queries
def dispatcher_op_names(namespace: str) -> list[str]:
    """Every operator the dispatcher knows in ``namespace`` ("ns::name"), sorted. [composite]"""
    prefix = f"{namespace}::"
    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix))


def dispatcher_has_schema(qualified: str) -> bool:
    """True if ``ns::name`` is already defined in the dispatcher. [composite]"""
    try:
        torch._C._dispatch_find_schema_or_throw(qualified, "")
        return True
    except RuntimeError:
        return False


def has_kernel_for_key(qualified: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified, key)


def dispatcher_all_op_names() -> set[str]:
    """Every operator name the dispatcher knows ("ns::name"), all namespaces. [display]"""
    return set(torch._C._dispatch_get_all_op_names())


# ---------------------------------------------------------------------------- library lifetime, profiler, OpInfo
def destroy_library(lib: "torch.library.Library") -> None:
    """Remove every registration a ``torch.library.Library`` made (private ``_destroy``)."""
    lib._destroy()


def profiler_running() -> bool:
    return bool(torch.autograd.profiler._is_profiler_enabled)


def opinfo_database() -> list:
    """torch's OpInfo list (a testing-internal module; importing it needs ``expecttest``)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def batching_kernel_source(op_name: str) -> str | None:
    """Where this torch build registered the ``FuncTorchBatched`` kernel of ``aten::op`` (the
    overload may be given, e.g. ``index_fill.int_Tensor``), as ``path:line`` from
    ``aten/src/...`` on; None for an unknown op or a backend fallback. [findings]"""
    qualified = op_name if "::" in op_name else f"aten::{op_name}"
    try:
        table = torch._C._dispatch_dump_table(qualified)
    except RuntimeError:
        return None
    line = next((ln for ln in table.splitlines() if ln.startswith("FuncTorchBatched:")), "")
    if "registered at " not in line or "[backend fallback]" in line:
        return None
    where = line.split("registered at ", 1)[1].split(" [", 1)[0]
    return where[where.find("aten/src/"):] if "aten/src/" in where else where


def fused_rms_norm(input: torch.Tensor, normalized_shape, weight, eps) -> tuple:
    """``aten._fused_rms_norm(input, normalized_shape, weight, eps)`` -> ``(output, rstd)``: the op
    whose forward-mode formulas are ``rms_norm_jvp`` / ``rms_norm_rstd_jvp`` (derivatives.yaml).
    ``torch.nn.functional.rms_norm`` decomposes on CPU and never reaches it. [live_jvp]"""
    return tuple(torch.ops.aten._fused_rms_norm(input, list(normalized_shape), weight, eps))


# ---------------------------------------------------------------------------- scoped vmap rules (funcbwd_lab.batching.as_strided_scatter)
@contextlib.contextmanager
def scoped_vmap_rule(qualified: str, rule) -> Iterator[None]:
    """Make ``rule`` the vmap rule of operator ``qualified`` (e.g. "aten::as_strided_scatter") for
    the block only.

    ``rule(info, in_dims, *args)`` follows ``torch.library.register_vmap`` (public): it runs on the
    tensors unwrapped from the current vmap level, ``info.batch_size`` is B, ``in_dims`` has one
    entry per argument (None for unbatched ones and non-tensors), and it returns ``(output,
    out_dim)``; calls where nothing is batched at the current level skip it. The registration
    replaces whatever ``FuncTorchBatched`` kernel the op had (for as_strided_scatter torch's
    "requires special handling" error kernel); torch's one-per-process "Overriding a previously
    registered kernel" warning is silenced because the override is the point. Removal (private
    ``Library._destroy``) restores the previous kernel, also when the block raises."""
    import warnings

    namespace = qualified.split("::", 1)[0]
    lib = torch.library.Library(namespace, "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"(?s).*Overriding a previously registered kernel")
            torch.library.register_vmap(qualified, rule, lib=lib)
        yield
    finally:
        destroy_library(lib)


# ---------------------------------------------------------------------------- compiled formula graphs (funcbwd.fx)
def is_plain_tensor(t: torch.Tensor) -> bool:
    """True if ``t`` has no functorch wrapper (its values can be read outside the transforms)."""
    return not _F.is_functorch_wrapped_tensor(t)


def overload_kernel(target):
    """The C++ callable an ``OpOverload`` forwards to (its ``__call__`` is ``self._op(...)``)."""
    return getattr(target, "_op", target) if isinstance(target, torch._ops.OpOverload) else target


def overload_binding(target):
    """``torch.<name>`` or ``torch.Tensor.<name>`` (C++ bindings) of an aten ``OpOverload``, or None;
    faster argument parsing, but it may pick another overload: callers verify (formula_graphs)."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return None
    name = target._schema.name.split("::", 1)[1]
    fns = (getattr(torch, name, None), getattr(torch.Tensor, name, None))
    return next((f for f in fns if type(f).__name__ in ("builtin_function_or_method",
                                                         "method_descriptor")), None)


@contextlib.contextmanager
def fx_sources_dropped() -> Iterator[None]:
    """Forget the sources torch.fx keeps of every GraphModule compiled in the block (``_loader``
    and ``linecache``, for the process's life): a bounded graph cache stays bounded. [fx]"""
    import linecache
    from torch.fx.graph_module import _loader

    before = set(_loader.eval_cache)
    try:
        yield
    finally:
        for key in set(_loader.eval_cache) - before:
            _loader.eval_cache.pop(key, None)
            linecache.cache.pop(key, None)
