"""``composite``: approach 1 of functorch#241, each backward formula registered as an operator.

Every legacy formula becomes ``torch.ops.funcbwd_private.<op>_backward`` (schema from
``OpSpec.schema``), registered lazily on first use with three kernels: CompositeExplicitAutograd
(the formula as written), Autograd (redispatch below autograd when nothing needs grad, so a grad
level above vmap does not decompose the op; decompose in place when something does) and
FuncTorchBatched (pop the vmap level, restore the call site's dispatch TLS and run
``vmap(functionalize(formula))``, so vmap sees out-of-place ops). Limits: the batched kernel
cannot remove data-dependent control flow (prod's ``.item()``) or dynamic shapes
(masked_select), and when a formula input itself needs grad under a grad level above vmap
(e.g. clamp's ``self`` under ``vmap(grad(f))``) the Autograd kernel must decompose the op, so
the in-place ops meet vmap again (fails under mixed batching; per_formula does not).

Provenance (:mod:`funcbwd_lab.strategies.provenance`): the batched kernel records "batched kernel ran"
(ran=True); the Autograd kernel records "op decomposed before vmap (kernel not called)" when it
decomposes under vmap; the explicit kernel records that the formula ran as written, unbatched.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import io
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import torch.func
import torch.utils._pytree as pytree

from funcbwd import internals
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy
from funcbwd.errors import first_line

if TYPE_CHECKING:
    from funcbwd_lab.ops.registry import OpSpec

#: Our operator namespace: private-looking so it reads as "not API" in graphs and artifacts.
NAMESPACE = "funcbwd_private"
OP_DOC = ("PRIVATE funcbwd operator: the legacy backward formula of {name} ({source}). Not API: "
          "its schema may change or disappear; do not serialize graphs that contain it.")
#: Marker attribute on each OpOverloadPacket (torch tags are a fixed enum: no "private" tag).
PRIVATE_MARK = "__funcbwd_private__"

_LOCK = threading.Lock()
_LIBRARY: torch.library.Library | None = None
_REGISTERED: dict[str, "OpSpec"] = {}  # op name -> spec whose formula the kernels run
_CALL_SITE = threading.local()  # per-thread stack of _CallSite frames pushed by run_formula
_DEFAULT_TLS = internals.dispatch_state_guard_args()  # Python-level TLS at import (direct calls)
#: (op name, kernel) -> calls: which kernel actually ran (tests check the batched one did).
KERNEL_CALLS: collections.Counter = collections.Counter()


def op_name_for(op: "OpSpec") -> str:
    return f"{op.name}_backward"


def _library() -> torch.library.Library:
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _LIBRARY


# ------------------------------------------------------------------------------ kernels
def _no_alias(out: Any, args: tuple) -> Any:
    """Custom-op outputs must not alias inputs; a formula returning ``grad`` itself gets a clone."""
    ins = [a for a in args if isinstance(a, torch.Tensor)]

    ins += [t for a in args if isinstance(a, list) for t in a if isinstance(t, torch.Tensor)]

    def fix(t: Any) -> Any:
        return t.clone() if isinstance(t, torch.Tensor) and any(t is a for a in ins) else t

    return tuple(fix(t) for t in out) if isinstance(out, tuple) else fix(out)


@dataclasses.dataclass(frozen=True)
class _CallSite:
    """What run_formula knows at the call and the kernels cannot see: the dispatch TLS before
    any interpreter touched it, and the spec being run (a patched copy may carry another formula)."""

    op_name: str
    spec: "OpSpec"
    include: Any
    exclude: Any


def _frame(name: str) -> _CallSite | None:
    stack = getattr(_CALL_SITE, "stack", None)
    return stack[-1] if stack and stack[-1].op_name == name else None


def _all_none(in_dims: Any) -> bool:
    leaves, _ = pytree.tree_flatten(in_dims, is_leaf=lambda d: d is None)
    return all(d is None for d in leaves)


def _variadic(spec: "OpSpec") -> bool:
    """True if the formula takes ``*tensors``, which the op's schema holds as a ``Tensor[]``."""
    return any(p.kind is inspect.Parameter.VAR_POSITIONAL
               for p in inspect.signature(spec.formula).parameters.values())


def _tensor_list_tail(spec: "OpSpec") -> int | None:
    """Position of a trailing ``Tensor[]`` argument the formula receives splatted, else None."""
    schema = getattr(getattr(torch.ops, NAMESPACE), op_name_for(spec)).default._schema
    last = schema.arguments[-1] if schema.arguments else None
    if last is None or str(last.type) != "List[Tensor]" or not _variadic(_REGISTERED[op_name_for(spec)]):
        return None
    return len(schema.arguments) - 1


def _pack(spec: "OpSpec", args: tuple) -> tuple:
    """run_formula's arguments as the op takes them (trailing varargs as one list)."""
    tail = _tensor_list_tail(spec)
    return args if tail is None else (*args[:tail], list(args[tail:]))


def _make_kernels(name: str) -> tuple[Callable, Callable, Callable]:
    def formula() -> Callable:
        frame = _frame(name)
        spec = frame.spec if frame else _REGISTERED[name]
        if _tensor_list_tail(spec) is not None:
            return lambda *a: spec.formula(*a[:-1], *a[-1])
        return spec.formula

    def explicit(*args: Any) -> Any:
        """CompositeExplicitAutograd: the formula as written, on plain (or fake/meta) tensors."""
        KERNEL_CALLS[name, "explicit"] += 1
        provenance.record("composite", "explicit kernel ran (formula as written, unbatched)", False, name)
        return _no_alias(formula()(*args), args)

    def autograd(keyset, *args: Any) -> Any:
        """Autograd: without a grad-requiring input, redispatch below autograd so the op reaches
        the next functorch level intact (a grad level above vmap would otherwise decompose it);
        with one, decompose here so autograd records the formula's ops (double backward)."""
        KERNEL_CALLS[name, "autograd"] += 1
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in pytree.tree_leaves(args))
        if needs_grad:
            if internals.vmap_active():
                provenance.record("composite", "op decomposed before vmap (kernel not called)", False, name)
            else:
                provenance.record("composite", "op decomposed by autograd (no vmap level)", False, name)
            return _no_alias(formula()(*args), args)
        with internals.below_autograd():
            return getattr(getattr(torch.ops, NAMESPACE), name).default(*args)

    def batched(keyset, *args: Any) -> Any:
        """FuncTorchBatched: run vmap(functionalize(formula)) one level down, re-wrap the result."""
        KERNEL_CALLS[name, "batched"] += 1
        interp = internals.current_interpreter()
        level = interp.level()
        unwrapped, in_dims = internals.unwrap_batched_at(args, level)
        nones: list[bool] = []

        def body(*xs: Any) -> tuple:
            out = formula()(*xs)
            outs = out if isinstance(out, tuple) else (out,)
            nones[:] = [o is None for o in outs]
            return tuple(o for o in outs if o is not None)

        frame = _frame(name)
        include, exclude = (frame.include, frame.exclude) if frame else _DEFAULT_TLS
        with internals.lowered_with_call_site_tls(interp, include, exclude):
            if _all_none(in_dims):  # batched at a lower level only: let that level handle it
                return getattr(getattr(torch.ops, NAMESPACE), name).default(*unwrapped)
            provenance.record("composite", "batched kernel ran: vmap(functionalize(formula))", True, name)
            res = torch.func.vmap(torch.func.functionalize(body), in_dims=tuple(in_dims),
                                  randomness=interp.randomness())(*unwrapped)
        it = iter(internals.add_batch_dim(r, 0, level) for r in res)
        outs = tuple(None if n else next(it) for n in nones)
        return outs if len(outs) > 1 else outs[0]

    return explicit, autograd, batched


def ensure_registered(op: "OpSpec") -> Any:
    """Register ``op``'s formula as ``funcbwd_private::<op>_backward`` (once; thread-safe) and
    return the OpOverload. The kernels run the formula of the spec passed to run_formula (a
    patched copy may carry another formula), or the registered spec's for a direct call."""
    name = op_name_for(op)
    with _LOCK:
        known = _REGISTERED.get(name)
        if known is None:
            qualified = f"{NAMESPACE}::{name}"
            if internals.dispatcher_has_schema(qualified):  # defined by an earlier copy of this module
                raise RuntimeError(f"{qualified} already exists in the dispatcher but was not "
                                   "registered by this module (reloaded?); restart the process")
            lib = _library()
            lib.define(f"{name}{op.schema}")
            explicit, autograd, batched = _make_kernels(name)
            lib.impl(name, explicit, "CompositeExplicitAutograd")
            lib.impl(name, autograd, "Autograd", with_keyset=True)
            lib.impl(name, batched, "FuncTorchBatched", with_keyset=True)
            _REGISTERED[name] = op
            packet = getattr(getattr(torch.ops, NAMESPACE), name)
            packet.__doc__ = OP_DOC.format(name=op.name, source=op.source)
            setattr(packet, PRIVATE_MARK, True)
        elif known.schema != op.schema:
            raise RuntimeError(f"{NAMESPACE}::{name} is registered with schema {known.schema}, "
                               f"not {op.schema}")
    return getattr(getattr(torch.ops, NAMESPACE), name).default


def ops_added() -> list[str]:
    """Operators in our namespace, as the dispatcher lists them (the library-growth number)."""
    return internals.dispatcher_op_names(NAMESPACE)


# ------------------------------------------------------------------------------ the strategy
class Composite(Strategy):
    name = "composite"
    summary = "each formula a private torch.library op with a functionalizing vmap kernel"
    formula_kinds = ("backward", "jvp")

    def run_formula(self, op: "OpSpec", args: tuple) -> Any:
        overload = ensure_registered(op)
        stack = _CALL_SITE.__dict__.setdefault("stack", [])
        stack.append(_CallSite(op_name_for(op), op, *internals.dispatch_state_guard_args()))
        try:
            return overload(*_pack(op, args))
        finally:
            stack.pop()

    def bookkeeping(self) -> Any:
        return len(getattr(_CALL_SITE, "stack", []))


# ------------------------------------------------------------------------------ serialization facts
def _probe_inputs(spec: "OpSpec") -> tuple:
    sample = spec.sample()
    with torch.no_grad():
        outs = spec.outputs_tuple(spec.torch_op(*sample.args))
    grads = tuple(torch.ones_like(outs[i]) for i in spec.diff_outputs)
    return _pack(spec, spec.formula_args(sample.args, outs, grads))


class _Caller(torch.nn.Module):
    """A module calling one of our ops; non-tensor arguments are baked in as constants."""

    def __init__(self, overload: Any, template: tuple):
        super().__init__()
        self.overload, self.template = overload, template

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        args = [next(it) if isinstance(a, torch.Tensor)
                else [next(it) for _ in a] if isinstance(a, list) and a and isinstance(a[0], torch.Tensor)
                else a for a in self.template]
        return self.overload(*args)


def _first_line(e: BaseException) -> str:

    text = f"{type(e).__name__}: {first_line(str(e))}"
    if e.__context__ is not None and e.__cause__ is None:  # e.g. export hides the fake-tensor cause
        text += f" (while handling {type(e.__context__).__name__}: {first_line(str(e.__context__))})"
    return text


def _targets(ep: Any) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def _fresh_load(path: str, register_first: str | None) -> dict[str, Any]:
    """torch.export.load in a new interpreter (only torch imported, or funcbwd registering first)."""
    pre = ""
    if register_first:
        pre = ("from funcbwd_lab.ops import registry; from funcbwd_lab.strategies import composite; "
               f"composite.ensure_registered(registry.get_op({register_first!r})); ")
    code = (f"import torch; {pre}ep = torch.export.load({path!r}); "
            "print('|'.join(str(n.target) for n in ep.graph.nodes if n.op == 'call_function'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [ln.strip() for ln in proc.stderr.strip().splitlines() if ln.strip()]
    # torch.export.load warns with the real reason, then raises a generic error
    reason = _unresolved_reason(lines)
    return {"ok": proc.returncode == 0,
            "error": "" if proc.returncode == 0 else reason or (lines[-1] if lines else f"exit {proc.returncode}"),
            "targets": proc.stdout.strip().split("|") if proc.returncode == 0 else []}


_PROBE_COUNTER = iter(range(1, 1 << 30))
_UNRESOLVED = re.compile(r"failed to resolve (\S+) to an operator")


def _unresolved_reason(lines: list[str]) -> str:
    """torch.export.load logs the real reason and raises a generic error: find the op it names."""
    for ln in lines:
        m = _UNRESOLVED.search(ln)
        if m:
            return f"SerializeError: failed to resolve {m.group(1)} to an operator"
    return ""


@contextlib.contextmanager
def _captured_export_log() -> Iterator[list[str]]:
    """Collect (and keep off stderr) what torch.export.load logs while deserializing."""
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.extend(self.format(record).splitlines())

    logger = logging.getLogger("torch.export")
    handlers, propagate = list(logger.handlers), logger.propagate
    logger.handlers, logger.propagate = [_Collect()], False
    try:
        yield lines
    finally:
        logger.handlers, logger.propagate = handlers, propagate


def _load_without_library(spec: "OpSpec", tensors: tuple, template: tuple) -> dict[str, Any]:
    """In-process stand-in for "a process that never loaded funcbwd": a same-schema copy of the
    op in a throwaway namespace is exported and saved, its Library destroyed, then loaded."""
    ns = f"funcbwd_probe{next(_PROBE_COUNTER)}"
    name = op_name_for(spec)
    lib = torch.library.Library(ns, "FRAGMENT")
    try:
        lib.define(f"{name}{spec.schema}")
        tail = _tensor_list_tail(spec) is not None
        run = (lambda *a: spec.formula(*a[:-1], *a[-1])) if tail else spec.formula
        lib.impl(name, lambda *a: _no_alias(run(*a), a), "CompositeExplicitAutograd")
        ep = torch.export.export(_Caller(getattr(getattr(torch.ops, ns), name).default, template), tensors)
        buf = io.BytesIO()
        torch.export.save(ep, buf)
    except Exception as e:  # noqa: BLE001
        internals.destroy_library(lib)
        return {"load_without_library_ok": None, "load_without_library_error": _first_line(e)}
    internals.destroy_library(lib)
    with _captured_export_log() as log:
        try:
            torch.export.load(io.BytesIO(buf.getvalue()))
            return {"load_without_library_ok": True, "load_without_library_error": ""}
        except Exception as e:  # noqa: BLE001
            return {"load_without_library_ok": False,
                    "load_without_library_error": _unresolved_reason(log) or _first_line(e)}


def serialization_probe(op_name: str, fresh_process: bool = True) -> dict[str, Any]:
    """What torch.export does with ``funcbwd_private::<op>_backward``: export a module calling it,
    then decompose, save, load here, load after the op's Library is gone (a throwaway copy)
    and (``fresh_process``, slow: two interpreters) load in a new interpreter with and without
    funcbwd. Every value is measured, none is assumed."""
    from funcbwd_lab.ops import registry

    spec = registry.get_op(op_name)
    overload = ensure_registered(spec)
    qualified = f"{NAMESPACE}::{op_name_for(spec)}"
    template = _probe_inputs(spec)
    tensors = tuple(t for a in template for t in (a if isinstance(a, list) else [a])
                    if isinstance(t, torch.Tensor))
    module = _Caller(overload, template)
    facts: dict[str, Any] = {
        "op": qualified,
        "namespace_private": NAMESPACE.endswith("_private"),
        "marked_private": bool(getattr(getattr(getattr(torch.ops, NAMESPACE), op_name_for(spec)),
                                       PRIVATE_MARK, False)),
        "tags": sorted(str(t) for t in overload.tags),
        "has_composite_implicit": internals.has_kernel_for_key(qualified, "CompositeImplicitAutograd"),
        "ops_in_namespace": len(ops_added()),
    }
    try:
        ep = torch.export.export(module, tensors)
    except Exception as e:  # noqa: BLE001 - a fact about export, reported as such
        facts.update(export_ok=False, export_error=_first_line(e))
        return facts
    targets = _targets(ep)
    facts.update(export_ok=True, export_error="", graph_targets=targets,
                 op_in_graph=any(t.startswith(f"{NAMESPACE}.") for t in targets))
    try:
        dec = ep.run_decompositions()
        dtargets = _targets(dec)
        facts.update(survives_decompositions=any(t.startswith(f"{NAMESPACE}.") for t in dtargets),
                     decomposed_targets=dtargets, decompositions_error="")
    except Exception as e:  # noqa: BLE001
        facts.update(survives_decompositions=None, decomposed_targets=[],
                     decompositions_error=_first_line(e))
    buf = io.BytesIO()
    try:
        torch.export.save(ep, buf)
        data = buf.getvalue()
        facts.update(save_ok=True, save_error="", artifact_bytes=len(data),
                     artifact_names_op=qualified.encode() in data
                     or f"{NAMESPACE}.{op_name_for(spec)}".encode() in data)
    except Exception as e:  # noqa: BLE001
        facts.update(save_ok=False, save_error=_first_line(e))
        return facts
    try:
        loaded = torch.export.load(io.BytesIO(data))
        want, got = module(*tensors), loaded.module()(*tensors)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, (tuple, list)) else (got,)
        facts.update(load_ok=True, load_error="", load_matches=all(
            (w is None and g is None) or (w is not None and g is not None and torch.allclose(w, g))
            for w, g in zip(want, got)))
    except Exception as e:  # noqa: BLE001
        facts.update(load_ok=False, load_error=_first_line(e), load_matches=False)
    facts.update(_load_without_library(spec, tensors, template))
    if fresh_process:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{spec.name}.pt2")
            with open(path, "wb") as f:
                f.write(data)
            plain = _fresh_load(path, None)
            with_lib = _fresh_load(path, spec.name)
        facts.update(fresh_load_ok=plain["ok"], fresh_load_error=plain["error"],
                     fresh_load_with_funcbwd_ok=with_lib["ok"],
                     fresh_load_with_funcbwd_error=with_lib["error"])
    return facts


__all__ = ["Composite", "NAMESPACE", "ensure_registered", "ops_added",
           "serialization_probe", "op_name_for"]
