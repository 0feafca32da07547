"""The one place funcbwd touches private torch internals.

Everything under ``torch._C._functorch`` and the functionalization wrappers is reached through
this module, so a torch upgrade touches one file. Functions are thin and named for what they
mean to funcbwd, not for the private symbol they call.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Iterator

import torch

_F = torch._C._functorch
_DK = torch._C.DispatchKey
TransformType = _F.TransformType


# ---------------------------------------------------------------------------- interpreter stack
def interpreter_stack() -> list[tuple[str, int]]:
    """The functorch interpreter stack, bottom (outermost transform) first: [("Vmap", 1), ...]."""
    return [(i.key().name, i.level()) for i in (_F.get_interpreter_stack() or [])]


def stack_depth() -> int:
    return _F.get_dynamic_layer_stack_depth()


_VMAP = int(TransformType.Vmap)  # ints compare faster than the pybind enum (a per-call check)


def vmap_active() -> bool:
    """True when a vmap level is anywhere on the functorch stack."""
    if not _F.get_dynamic_layer_stack_depth():
        return False
    return any(int(i.key()) == _VMAP for i in (_F.get_interpreter_stack() or []))


def format_stack(stack: list[tuple[str, int]] | None = None) -> str:
    stack = interpreter_stack() if stack is None else stack
    return " > ".join(f"{k}({lvl})" for k, lvl in stack) or "(empty)"


def restore_stack_depth(depth: int) -> None:
    """Pop functorch levels above ``depth`` (used only by cleanup paths)."""
    if stack_depth() > depth:
        _F.pop_dynamic_layer_stack_and_undo_to_depth(depth)


# ---------------------------------------------------------------------------- dispatch TLS
@dataclasses.dataclass(frozen=True)
class DispatchState:
    """Everything funcbwd promises to leave as it found it."""

    depth: int
    include: str
    exclude: str
    functionalize_included: bool
    grad_enabled: bool
    fallback_enabled: bool

    def describe_difference(self, other: "DispatchState") -> str:
        diffs = [
            f"{f.name}: {getattr(self, f.name)!r} -> {getattr(other, f.name)!r}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]
        return "; ".join(diffs) or "no difference"


def dispatch_state() -> DispatchState:
    return DispatchState(
        depth=stack_depth(),
        include=str(torch._C._dispatch_tls_local_include_set()),
        exclude=str(torch._C._dispatch_tls_local_exclude_set()),
        functionalize_included=functionalize_included(),
        grad_enabled=torch.is_grad_enabled(),
        fallback_enabled=vmap_fallback_enabled(),
    )


def tls_include_set() -> str:
    return str(torch._C._dispatch_tls_local_include_set())


def tls_exclude_set() -> str:
    return str(torch._C._dispatch_tls_local_exclude_set())


def functionalize_included() -> bool:
    # torch._C._is_functionalization_enabled does not exist on 2.13; ask the TLS directly.
    return torch._C._dispatch_tls_is_dispatch_key_included(_DK.Functionalize)


# ---------------------------------------------------------------------------- functionalization levels
def push_functionalize(reapply_views: bool = True) -> int:
    """Push a Functionalize interpreter (what torch.func.functionalize does on entry); returns its level."""
    return _F._func_increment_nesting(reapply_views)


def pop_functionalize() -> None:
    _F._func_decrement_nesting()


def top_is_functionalize(level: int | None = None) -> bool:
    stack = _F.get_interpreter_stack() or []
    if not stack:
        return False
    top = stack[-1]
    return top.key() == TransformType.Functionalize and (level is None or top.level() == level)


def wrap_functional(t: torch.Tensor, level: int) -> torch.Tensor:
    return _F._wrap_functional_tensor(t, level)


def unwrap_functional(t: torch.Tensor) -> torch.Tensor:
    """Sync pending mutations and return the tensor under a functional wrapper."""
    torch._sync(t)
    return _F._unwrap_functional_tensor(t, True)


def is_functional(t: torch.Tensor) -> bool:
    return torch._is_functional_tensor(t) or _F.is_functionaltensor(t)


# ---------------------------------------------------------------------------- tensor wrapper chains
def wrapper_chain(t: torch.Tensor) -> list[str]:
    """A tensor's functorch wrappers outermost first: ['Functional(2)', 'Dense(3, 5)', ...]."""
    chain: list[str] = []
    cur = t
    for _ in range(16):
        if _F.is_functionaltensor(cur):
            chain.append(f"Functional({_F.maybe_get_level(cur)})")
        elif _F.is_batchedtensor(cur):
            chain.append(f"Batched(level {_F.maybe_get_level(cur)}, bdim {_F.maybe_get_bdim(cur)})")
        elif _F.is_gradtrackingtensor(cur):
            chain.append(f"GradTracking({_F.maybe_get_level(cur)})")
        else:
            chain.append(f"Dense({', '.join(str(s) for s in cur.shape)})")
            break
        cur = _F.get_unwrapped(cur)
    return chain


def key_set(t: torch.Tensor) -> str:
    return str(torch._C._dispatch_keys(t))


def is_batched(t: torch.Tensor) -> bool:
    """True if any wrapper in the chain is a BatchedTensor."""
    cur = t
    for _ in range(16):
        if _F.is_batchedtensor(cur):
            return True
        if not (_F.is_functionaltensor(cur) or _F.is_gradtrackingtensor(cur)):
            return False
        cur = _F.get_unwrapped(cur)
    return False


def first_batch_entry(t: torch.Tensor) -> torch.Tensor:
    """Entry 0 of the outermost BatchedTensor in ``t``'s chain (wrappers above it dropped), else
    ``t``: for tests that build broken strategies (e.g. entry 0's index for every entry)."""
    cur = t
    for _ in range(16):
        if _F.is_batchedtensor(cur):
            return _F.get_unwrapped(cur).select(_F.maybe_get_bdim(cur), 0)
        if not (_F.is_functionaltensor(cur) or _F.is_gradtrackingtensor(cur)):
            return t
        cur = _F.get_unwrapped(cur)
    return t


# ---------------------------------------------------------------------------- vmap's slow fallback
def vmap_fallback_enabled() -> bool:
    return _F._is_vmap_fallback_enabled()


@contextlib.contextmanager
def vmap_fallback_disabled() -> Iterator[None]:
    """Make any op without a batching rule raise instead of looping (PyTorch's has_batch_rule test)."""
    prev = _F._is_vmap_fallback_enabled()
    _F._set_vmap_fallback_enabled(False)
    try:
        yield
    finally:
        _F._set_vmap_fallback_enabled(prev)


def batching_kind(op_name: str) -> str:
    """How vmap handles ``aten::op``: 'batching rule', 'decomposition', or 'fallback' (read from
    the op's dispatch table, its ``FuncTorchBatched`` entry)."""
    qualified = op_name if "::" in op_name else f"aten::{op_name}"
    try:
        table = torch._C._dispatch_dump_table(qualified)
    except RuntimeError:
        return "unknown op"
    line = next((ln for ln in table.splitlines() if ln.startswith("FuncTorchBatched:")), "")
    if not line:
        return "unknown"
    if "fallthrough" in line:
        return "fallthrough"
    if "[backend fallback]" in line:
        return "fallback"
    if "BatchRulesDecompositions" in line or "math kernel" in line or "CompositeImplicit" in line:
        return "decomposition"
    return "batching rule"


@contextlib.contextmanager
def cleared_functorch_state() -> Iterator[None]:
    """Run a block as if no transform were active (used to trace formulas from inside a backward).

    Pops the whole interpreter stack and resets the dispatch TLS to defaults, restoring both in a
    ``finally``."""
    from torch._functorch.pyfunctorch import temporarily_clear_interpreter_stack

    with temporarily_clear_interpreter_stack():
        with torch._C._ForceDispatchKeyGuard(
            torch._C.DispatchKeySet(_DK.BackendSelect) | torch._C.DispatchKeySet(_DK.ADInplaceOrView),
            torch._C._dispatch_tls_local_exclude_set().remove(_DK.FuncTorchDynamicLayerFrontMode)
            .remove(_DK.FuncTorchDynamicLayerBackMode),
        ):
            yield


def dispatch_state_guard_args() -> tuple:
    """The call site's dispatch TLS (include, exclude), to restore it elsewhere."""
    return (torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set())


def autograd_ctx_state(ctx) -> dict:
    """What ``setup_context`` set on ``ctx``, also through functorch's ctx wrappers. [tool]"""
    while "_pt_inner_ctx" in getattr(ctx, "__dict__", {}):
        ctx = ctx.__dict__["_pt_inner_ctx"]
    return {k: v for k, v in getattr(ctx, "__dict__", {}).items() if not k.startswith("_")}


def functional_level(t: torch.Tensor) -> int | None:
    """The functorch level of a functional wrapper (None for any other tensor). [hooks]"""
    return _F.maybe_get_level(t) if _F.is_functionaltensor(t) else None


# ---------------------------------------------------------------------------- vmap rules that run transforms
# (used by strategies/composite.py: a FuncTorchBatched kernel that runs vmap(functionalize(formula)))
def current_interpreter():
    """The functorch interpreter processing the current op (inside a kernel), or None."""
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter

    return retrieve_current_functorch_interpreter() if _F.peek_interpreter_stack() is not None else None


def unwrap_batched_at(args: tuple, level: int) -> tuple[tuple, tuple]:
    """Strip the BatchedTensor wrappers of ``level`` from ``args``: (unwrapped args, in_dims)."""
    from torch._functorch.vmap import unwrap_batched
    return unwrap_batched(args, level)


def add_batch_dim(t: torch.Tensor, dim: int, level: int) -> torch.Tensor:
    return _F._add_batch_dim(t, dim, level)


def _with_dynamic_layer_keys(include, present: bool):
    for k in (_DK.FuncTorchDynamicLayerFrontMode, _DK.FuncTorchDynamicLayerBackMode):
        include = include.add(k) if present else include.remove(k)
    return include


@contextlib.contextmanager
def lowered_with_call_site_tls(interpreter, include, exclude) -> Iterator[None]:
    """Inside a vmap rule: pop the rule's own interpreter and restore the op's call-site dispatch
    TLS, so the rule can run its own vmap/functionalize (torch-2.13-notes: without both, a nested
    transform hits ``savedLocalDispatchKeySet_.has_value()``). The front/back-mode keys follow
    the remaining stack depth. Both are restored on exit, also when the body raises."""
    with interpreter.lower():
        include = _with_dynamic_layer_keys(include, stack_depth() > 0)
        with torch._C._ForceDispatchKeyGuard(include, exclude):
            yield


@contextlib.contextmanager
def below_autograd() -> Iterator[None]:
    """Redispatch below the Autograd keys (what an Autograd kernel does when nothing needs grad)."""
    with torch._C._AutoDispatchBelowAutograd():
        yield


# ---------------------------------------------------------------------------- trace helpers (funcbwd.observe.trace)
def resolve_overload(qualified: str, args: tuple, kwargs: dict) -> str | None:
    """The overload of ``qualified`` (e.g. 'aten::scatter_') a call with these args binds to
    ('src', 'value', 'default', ...), by the dispatcher's own schema matching; None if none does."""
    try:
        return torch._C._jit_resolve_packet(qualified, *args, **kwargs)
    except Exception:  # noqa: BLE001 - not an operator, or no schema accepts these args
        return None


def tracing_active() -> bool:
    """True while make_fx/fake tensors are tracing (a proxy or fake dispatch mode is set)."""
    key = torch._C._TorchDispatchModeKey
    return (torch._C._get_dispatch_mode(key.PROXY) is not None
            or torch._C._get_dispatch_mode(key.FAKE) is not None)


# ---------------------------------------------------------------------------- scoped aten kernels (funcbwd.batching.copy)
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


# ---------------------------------------------------------------------------- scoped vmap rules (funcbwd.batching.as_strided_scatter)
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
