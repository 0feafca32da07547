"""Dispatch-key trace of one op x strategy x scenario: what the backward formula executes, and why
vmap accepts or rejects each call.

This module records (it needs torch); :mod:`funcbwd_lab.studies.trace.render` holds the records and
renders them (``Trace.text()``, ``Trace.html()``).

Observers (torch-2.13-notes, "Tracing"): a TorchDispatchMode sits below vmap and sees only final
unbatched kernels, and a TorchFunctionMode entered around ``vjp_fn`` records nothing inside the
backward. So :func:`recording` shadows the strategy's ``run_formula`` (every strategy's legacy
backward calls it) with one that enters a TorchFunctionMode around the formula: each torch call
is recorded with the functorch interpreter stack, the dispatch TLS, every tensor argument's
wrapper chain and key set, and how vmap handles the op (batching rule, decomposition or the slow
per-sample fallback, read from the op's dispatch table). Ops emitted below the mode (by
functionalization, by vmap's fallback loop, inside a custom op's kernel) come from one
``torch.profiler`` session (record_shapes=True): each recorded call is a profiler range, so its
dispatcher op tree hangs under it.

The scenario runs through the matrix's code path (``SCENARIOS[name].run(Case(...))``), so a trace
shows exactly what a matrix cell did, up to the failing call.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

# Kineto (torch.profiler's backend) prints timestamped start/stop lines on stderr unless told
# otherwise; it reads this once, when the profiler first starts.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode, resolve_name

from funcbwd import internals
from funcbwd.errors import check_name, first_line
from funcbwd_lab.studies.trace.render import (DispatcherNode, FormulaCall, TensorArg, Trace,
                                          TraceEvent, strip_keyset)
from funcbwd_lab.ops import registry
from funcbwd_lab.run import runner
from funcbwd_lab.run.scenarios import SCENARIO_GROUPS
from funcbwd_lab.strategies import Strategy, get_strategy

__all__ = ["trace", "recording", "describe_call", "Trace", "TraceEvent", "TensorArg",
           "DispatcherNode", "FormulaCall"]

#: in-place dunders (``__iadd__`` ends with "_" too, but so does ``__getitem__``)
_INPLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                    "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                    "__ilshift__", "__irshift__", "__imatmul__"}
#: Python operators -> the aten op they call (others, like ``__getitem__``, are Python-level)
_DUNDER_OPS = {"__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt",
               "__ge__": "ge", "__add__": "add", "__radd__": "add", "__iadd__": "add_",
               "__sub__": "sub", "__rsub__": "rsub", "__isub__": "sub_", "__mul__": "mul",
               "__rmul__": "mul", "__imul__": "mul_", "__truediv__": "div", "__itruediv__": "div_",
               "__neg__": "neg", "__pow__": "pow", "__matmul__": "matmul",
               "__invert__": "bitwise_not", "__and__": "__and__", "__or__": "__or__"}
#: Tensor methods answered by the TensorImpl (a BatchedTensor reports logical sizes) without
#: dispatching, although aten has a schema and a dispatch table for them.
_METADATA = {"dim", "ndimension", "size", "stride", "numel", "nelement", "storage_offset",
             "is_contiguous", "is_conj", "is_neg", "is_inference", "element_size",
             "is_floating_point", "is_complex", "get_device", "_is_view", "untyped_storage"}


# ------------------------------------------------------------------------------ describing one call
def _is_inplace(name: str) -> bool:
    if name.startswith("__"):
        return name in _INPLACE_DUNDERS
    return name.endswith("_")


def _op_names(func: Any, args: tuple, kwargs: dict) -> tuple[str, str] | None:
    """(display name, qualified aten overload or '') for a torch function; None for attribute
    reads (``grad.dtype``), which run no operator."""
    if isinstance(func, torch._ops.OpOverload):
        schema = func._schema
        qualified = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        return str(func), qualified
    name = getattr(func, "__name__", None) or str(func)
    if name == "__get__":
        return None
    try:
        display = resolve_name(func) or name
    except Exception:  # noqa: BLE001 - resolve_name walks torch's namespaces; any failure: bare name
        display = name
    if name.startswith("__"):
        name = _DUNDER_OPS.get(name, "")
        if not name:
            return display, ""
    return display, _qualify(f"aten::{name}", args, kwargs)


def _qualify(packet: str, args: tuple, kwargs: dict) -> str:
    """'aten::scatter_' + args -> 'aten::scatter_.src' (the overload the args bind to)."""
    overload = internals.resolve_overload(packet, args, kwargs)
    if overload is None:
        return ""
    return packet if overload in ("", "default") else f"{packet}.{overload}"


def _tensor_args(args: tuple, kwargs: dict) -> list[TensorArg]:
    found: list[tuple[str, torch.Tensor]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            found.append((str(i), a))
        elif isinstance(a, (list, tuple)):
            found += [(f"{i}[{j}]", t) for j, t in enumerate(a) if isinstance(t, torch.Tensor)]
    found += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    return [TensorArg(pos, internals.wrapper_chain(t), strip_keyset(internals.key_set(t)),
                      internals.is_batched(t)) for pos, t in found]


def _functionalized_above_vmap(levels: list[tuple[str, int]]) -> bool:
    """True if a Functionalize interpreter sits above the innermost Vmap level: in-place ops are
    then rewritten to their out-of-place variants before vmap sees them."""
    kinds = [k for k, _ in levels]
    if "Vmap" not in kinds or "Functionalize" not in kinds:
        return False
    return max(i for i, k in enumerate(kinds) if k == "Functionalize") > max(
        i for i, k in enumerate(kinds) if k == "Vmap")


def _vmap_view(name: str, aten: str, args: tuple, kwargs: dict, levels: list[tuple[str, int]],
               tensors: list[TensorArg]) -> tuple[str, str]:
    """(operator vmap sees, how vmap handles it)."""
    if not any(k == "Vmap" for k, _ in levels):
        return "", "not under vmap"
    if name in _METADATA:
        return "", "metadata read on the wrapper (no operator dispatch)"
    sees = aten
    if aten and _is_inplace(name) and _functionalized_above_vmap(levels):
        packet = aten.split(".")[0][:-1]  # aten::copy_ -> aten::copy
        sees = _qualify(packet, args, kwargs) or packet
    if not sees:
        return "", "Python-level call, not an operator (its operators: dispatcher view)"
    if not any(t.batched for t in tensors):
        return sees, "no batched tensor argument: runs unbatched"
    return sees, internals.batching_kind(sees)


def describe_call(func: Any, args: tuple, kwargs: dict, index: int, call: int) -> TraceEvent | None:
    """A :class:`TraceEvent` for one torch call made now (None for attribute reads)."""
    names = _op_names(func, args, kwargs)
    if names is None:
        return None
    display, aten = names
    levels = internals.interpreter_stack()
    tensors = _tensor_args(args, kwargs)
    is_overload = isinstance(func, torch._ops.OpOverload)
    name = func._schema.name.split("::")[-1] if is_overload else display.rsplit(".", 1)[-1]
    sees, handling = _vmap_view(name, aten, args, kwargs, levels, tensors)
    ev = TraceEvent(index, call, display, aten, internals.format_stack(levels),
                    internals.tls_include_set(), internals.tls_exclude_set(), tensors, sees, handling)
    self_arg = tensors[0] if tensors and tensors[0].position == "0" else None
    other = next((t for t in tensors[1:] if t.batched), None)
    if (_is_inplace(name) and self_arg is not None and not self_arg.batched and other is not None
            and not _functionalized_above_vmap(levels)):
        ev.inplace_into_unbatched = True
        ev.explanation = (
            f"in-place {name} writes into an unbatched tensor (self: {self_arg.chain_text}) but "
            f"argument {other.position} is batched ({other.chain_text}): vmap cannot store a batch "
            f"of results in one unbatched tensor, so it raises (functionalize the formula, or make "
            f"the target batched)")
    elif _is_inplace(name) and self_arg is not None and "Functionalize" in ev.stack:
        functional = next((t for t in tensors[1:] if t.chain[0].startswith("Functional(")), None)
        if not self_arg.chain[0].startswith("Functional(") and functional is not None:
            ev.explanation = (
                f"in-place {name} under functionalization mutates a non-functional tensor (self: "
                f"{self_arg.chain_text}, e.g. built from a saved tensor) with a functional one "
                f"(argument {functional.position}: {functional.chain_text}); functionalization "
                f"refuses that with an internal assert")
    return ev


# ------------------------------------------------------------------------------ recording
class _FormulaRecorder(TorchFunctionMode):
    """Records each torch call made while a formula runs (entered inside the backward)."""

    def __init__(self, trace: Trace, call: FormulaCall, mark: bool):
        super().__init__()
        self.trace, self.call, self.mark = trace, call, mark

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if internals.tracing_active() or not internals.interpreter_stack():
            # the strategy traces the formula with the functorch state cleared (traced's make_fx)
            self.trace.hidden_ops += 1
            return func(*args, **kwargs)
        ev = describe_call(func, args, kwargs, len(self.trace.events), self.call.index)
        if ev is None:
            return func(*args, **kwargs)
        self.trace.events.append(ev)
        self.call.events.append(ev.index)
        # A profiler range named after the event attributes the dispatcher calls below it.
        try:
            with _range(self.mark, _EVENT_MARK, ev.index):
                return func(*args, **kwargs)
        except Exception as e:
            ev.error = f"{type(e).__name__}: {first_line(str(e))}"
            raise


_EVENT_MARK = "funcbwd_lab.studies.trace.trace.event#"
_CALL_MARK = "funcbwd_lab.studies.trace.trace.call#"


def _marker(prefix: str, index: int) -> str:
    return f"{prefix}{index}"


def _marked(node: "DispatcherNode", prefix: str) -> int | None:
    rest = node.name[len(prefix):] if node.name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def _attribute(trace: Trace, nodes: list["DispatcherNode"]) -> None:
    """Hang each event marker's dispatcher calls on its event; a call marker's other children
    (e.g. the strategy tracing the formula) on the call. Markers may sit anywhere in the tree
    (under the autograd engine's ranges, or nested in another formula call)."""
    for n in nodes:
        ev, call = _marked(n, _EVENT_MARK), _marked(n, _CALL_MARK)
        if ev is not None and ev < len(trace.events):
            trace.events[ev].dispatcher = n.children
        elif call is not None and call < len(trace.calls):
            trace.calls[call].unattributed = [c for c in n.children if _marked(c, _EVENT_MARK) is None
                                              and _marked(c, _CALL_MARK) is None]
        _attribute(trace, n.children)


def _dispatcher_tree(prof: Any) -> list[DispatcherNode]:
    def node(ev: Any) -> DispatcherNode:
        kids = [node(c) for c in ev.cpu_children]
        n = DispatcherNode(ev.name, [list(s) for s in (ev.input_shapes or []) if s], kids)
        same = sum(k.name == ev.name for k in kids)
        if same >= 2 and any(k.name == "aten::stack" for k in kids):
            # BatchedFallback.cpp: slice each sample, call the op, stack the results.
            n.note = f"per-sample fallback loop: {same} x {ev.name} + aten::stack"
        return n

    return [node(e) for e in (prof.events() or []) if e.cpu_parent is None]


def _range(mark: bool, prefix: str, index: int) -> Any:
    if not mark:
        return contextlib.nullcontext()
    return torch.profiler.record_function(_marker(prefix, index))


@contextlib.contextmanager
def recording(strategy: Strategy, trace: Trace, *, mark: bool = False) -> Iterator[Trace]:
    """Shadow ``strategy.run_formula`` (on the instance) with one that records the formula's torch
    calls under a TorchFunctionMode; with ``mark``, each call and event is also a profiler range
    (so a surrounding torch.profiler session can attribute dispatcher calls to them)."""
    original = strategy.run_formula
    had_own = "run_formula" in vars(strategy)

    def run_formula(op: Any, args: tuple) -> Any:
        if not internals.interpreter_stack():  # the per-sample reference loop: no transform
            trace.untransformed_calls += 1
            return original(op, args)
        call = FormulaCall(len(trace.calls), internals.format_stack())
        trace.calls.append(call)
        try:
            with _range(mark, _CALL_MARK, call.index), _FormulaRecorder(trace, call, mark):
                return original(op, args)
        except Exception as e:
            call.error = f"{type(e).__name__}: {first_line(str(e))}"
            raise

    strategy.run_formula = run_formula  # type: ignore[method-assign]
    try:
        yield trace
    finally:
        if had_own:
            strategy.run_formula = original  # type: ignore[method-assign]
        else:
            del strategy.run_formula


def trace(op: str | registry.OpSpec, strategy: str | Strategy, scenario: str,
          sample: str | registry.Sample | None = None, *, profile: bool = True) -> Trace:
    """Run one matrix cell with its formula calls recorded (default sample: the op's first).

    ``profile``: also record the dispatcher calls (one torch.profiler session around the
    scenario; skipped if a profiler is already running)."""
    spec = registry.get_op(op) if isinstance(op, str) else op
    check_name("scenario", scenario, SCENARIO_GROUPS)
    st = get_strategy(strategy)
    smp = sample if isinstance(sample, registry.Sample) else spec.sample(sample)
    tr = Trace(spec.name, smp.name, st.name, scenario)
    prof = None
    if profile and not internals.profiler_running():
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      record_shapes=True)
    # The cell runs exactly as in the matrix; the recorder is entered around the scenario.
    with prof or contextlib.nullcontext():
        cell = runner.run(spec, scenario, st, smp,
                          around=lambda: recording(st, tr, mark=prof is not None))
    if prof is not None:
        _attribute(tr, _dispatcher_tree(prof))
    tr.status, tr.reason, tr.fallback_ops = cell.status, cell.reason, cell.fallback_ops
    tr.error = f"{cell.error_class}: {cell.message}" if cell.error_class else cell.message
    return tr

