"""The one place funcbwd touches private torch internals.

Everything under ``torch._C._functorch`` and the functionalization wrappers is reached through
this module, so a torch upgrade touches one file. Functions are thin and named for what they
mean to funcbwd, not for the private symbol they call. torch.compile's private parts (dynamo,
its backends) are in :mod:`funcbwd.internals.dynamo`; the dispatcher and registry helpers in
:mod:`funcbwd.internals.dispatcher` and torch's decompositions in :mod:`funcbwd.internals.decomp`
(both re-exported here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any, Iterable, Iterator

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
        diffs = [f"{f.name}: {getattr(self, f.name)!r} -> {getattr(other, f.name)!r}"
                 for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(other, f.name)]
        return "; ".join(diffs) or "no difference"


def _key_names(key_set_text: str) -> set[str]:
    inner = key_set_text.strip()
    inner = inner[inner.find("(") + 1: inner.rfind(")")]
    return {k.strip() for k in inner.split(",") if k.strip()}


def restore_dispatch_state(state: DispatchState) -> None:
    """Put the functorch stack depth, the dispatch TLS include/exclude sets, grad mode and the
    vmap fallback flag back to ``state`` (cleanup after a leak was detected and reported)."""
    restore_stack_depth(state.depth)
    for text, now, setter in ((state.include, tls_include_set(), torch._C._dispatch_tls_set_dispatch_key_included),
                              (state.exclude, tls_exclude_set(), torch._C._dispatch_tls_set_dispatch_key_excluded)):
        want, have = _key_names(text), _key_names(now)
        for name, flag in [(n, False) for n in have - want] + [(n, True) for n in want - have]:
            key = getattr(_DK, name, None)
            if key is None:  # a functionality key Python cannot name: say so, do not guess
                raise RuntimeError(f"cannot restore dispatch key {name!r} (not in torch._C.DispatchKey); "
                                   "the process's dispatch state is corrupted: restart it")
            setter(key, flag)
    torch.set_grad_enabled(state.grad_enabled)
    _F._set_vmap_fallback_enabled(state.fallback_enabled)


def dispatch_state() -> DispatchState:
    return DispatchState(depth=stack_depth(), include=tls_include_set(), exclude=tls_exclude_set(),
                         functionalize_included=functionalize_included(),
                         grad_enabled=torch.is_grad_enabled(), fallback_enabled=vmap_fallback_enabled())


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
from funcbwd.internals.levels import _levels  # noqa: E402  (one walk down a tensor's wrappers)

def wrapper_chain(t: torch.Tensor) -> list[str]:
    """Describe a tensor's functorch wrappers outermost first, e.g.
    ['Functional(2)', 'Batched(level 1, bdim 0)', 'Dense(3, 5)']."""
    return [f"Dense({', '.join(str(s) for s in c.shape)})" if k == "Dense" else
            f"Batched(level {_F.maybe_get_level(c)}, bdim {_F.maybe_get_bdim(c)})" if k == "Batched"
            else f"{k}({_F.maybe_get_level(c)})" for c, k in _levels(t)]


def key_set(t: torch.Tensor) -> str:
    return str(torch._C._dispatch_keys(t))


def batched_here(t: torch.Tensor) -> bool:
    """True if ``t`` itself is a BatchedTensor (its outermost wrapper; one C call, per-call
    cheap, unlike :func:`is_batched`'s walk). [traced_backward's keys]"""
    return _F.is_batchedtensor(t)


def is_batched(t: torch.Tensor) -> bool:
    """True if any wrapper in the chain is a BatchedTensor."""
    return any(kind == "Batched" for _, kind in _levels(t))


def first_batch_entry(t: torch.Tensor) -> torch.Tensor:
    """Entry 0 of the outermost BatchedTensor in ``t``'s wrapper chain, as the tensor under that
    wrapper (the wrappers above it dropped); ``t`` itself if it is not batched. For tests that
    build deliberately broken strategies (e.g. one that uses entry 0's index for every entry)."""
    cur = next((c for c, kind in _levels(t) if kind == "Batched"), None)
    return t if cur is None else _F.get_unwrapped(cur).select(_F.maybe_get_bdim(cur), 0)


def one_sample(t: torch.Tensor) -> torch.Tensor:
    """One sample of ``t`` (entry 0 at every vmap level, wrappers stripped: its logical shape),
    detached, a view of the dense tensor; functional pending mutations unsynced. [traced_backward]"""
    levels = list(_levels(t))
    with cleared_functorch_state():
        out = levels[-1][0].detach()
        for cur, kind in reversed(levels):  # innermost first: its bdim is in inner coordinates
            if kind == "Batched":
                out = out.select(_F.maybe_get_bdim(cur), 0)
    return out


# ---------------------------------------------------------------------------- vmap's slow fallback
def vmap_fallback_enabled() -> bool:
    return _F._is_vmap_fallback_enabled()


#: vmap's slow-fallback warning, naming the op ("performance drop ... batching rule for aten::op")
FALLBACK_RE = re.compile(r"batching rule for (\w+::\w+(?:\.\w+)?)")


def fallback_ops(caught: Iterable[Any]) -> list[str]:
    """The ATen ops named by vmap's "performance drop ... batching rule for <op>" warnings
    (Python warnings, or lines torch's C++ wrote to stderr)."""
    texts = (w if isinstance(w, str) else str(w.message) for w in caught)
    return sorted({m.group(1) for t in texts for m in [FALLBACK_RE.search(t)] if m})


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

    # The outer guard re-forces the caller's own TLS, so leaving it puts that TLS back exactly:
    # under a jvp level, restoring the interpreter stack alone leaves the inner forced sets
    # behind on torch 2.13 (seen tracing inside vmap(jvp(vjp))).
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(),
                                         torch._C._dispatch_tls_local_exclude_set()):
        with temporarily_clear_interpreter_stack():
            with torch._C._ForceDispatchKeyGuard(
                torch._C.DispatchKeySet(_DK.BackendSelect) | torch._C.DispatchKeySet(_DK.ADInplaceOrView),
                torch._C._dispatch_tls_local_exclude_set().remove(_DK.FuncTorchDynamicLayerFrontMode)
                .remove(_DK.FuncTorchDynamicLayerBackMode),
            ):
                yield


def dispatch_state_guard_args() -> tuple:
    """The call site's dispatch TLS (include, exclude), to restore it elsewhere with
    ``torch._C._ForceDispatchKeyGuard`` (composite's batched kernel)."""
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


def fake_trace(fn, *args):
    """make_fx in fake mode; real tensors ``fn`` captures become graph constants (make_fx's private
    ``_allow_non_fake_inputs``). [traced_backward]"""
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(*args)


def fake_like(real: torch.Tensor, like: Any) -> torch.Tensor:
    """``real`` as a fake tensor of ``like``'s fake mode (a graph pass's new constant beside the
    trace's fake values: FakeTensor's ``fake_mode``), or ``real`` itself where ``like`` is not
    fake. [funcbwd.fx.gather]"""
    mode = getattr(like, "fake_mode", None)
    return mode.from_tensor(real) if mode is not None else real


# ---------------------------------------------------------------------------- trace helpers (funcbwd_lab.studies.trace.trace)
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


# the dispatcher and registry half (funcbwd.internals.dispatcher), re-exported
from funcbwd.internals.dispatcher import (  # noqa: E402,F401
    scoped_aten_kernel,
    dispatcher_op_names,
    dispatcher_has_schema,
    has_kernel_for_key,
    dispatcher_all_op_names,
    destroy_library,
    profiler_running,
    opinfo_database,
    batching_kernel_source,
    fused_rms_norm,
    scoped_vmap_rule,
    is_plain_tensor,
    overload_kernel,
    overload_binding,
    fx_sources_dropped,
)


# torch's decompositions (funcbwd_lab.fx.fallback_free), re-exported
from funcbwd.internals.decomp import decomposition, fallback_op_in, retrace_decomposed  # noqa: E402,F401


# in-place under vmap (funcbwd.inplace), re-exported
from funcbwd.internals.levels import (  # noqa: E402,F401
    accelerator_rng,
    all_vmap_levels,
    vmap_randomness_same,
    alias_of,
    batched_copy,
    dense,
    dense_alias_of,
    is_view,
    forward_ad_active,
    function_apply_replaced,
    function_defines_jvp,
    function_has_vmap_support,
    function_is_old_style,
    grad_levels,
    innermost_vmap_level,
    leaves,
    original_vmap_impl,
    primal_vmap_levels,
    rng_forked,
    rng_states,
    set_rng_states,
    swap_impl,
    torch_transform_internal,
    transforms_routed,
    vmap_impl_replaced,
    vmap_levels,
    vmap_inputs,
    flatten,
    unflatten,
    stack_outputs,
    wrapper_levels,
    zeros_at_every_level,
)


@contextlib.contextmanager
def _fd2_silenced() -> Iterator[None]:
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_cpu_bytes(fn) -> int:
    """The most CPU memory ``fn``'s tensors hold at once during one call, above what was held
    before it: the running sum of torch's profiler allocation events (``kineto_results``; its
    start/stop log lines on descriptor 2 are dropped)."""
    from torch.profiler import ProfilerActivity, profile

    with _fd2_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    held = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        held += e.nbytes()
        peak = max(peak, held)
    return peak
