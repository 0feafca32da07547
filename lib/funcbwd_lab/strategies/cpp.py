"""The C++ approaches of functorch#241 as strategies: the 8 test ops built as C++ operators.

The C++ study (:mod:`funcbwd_lab.studies.cpp`, docs/cpp.md) builds an extension in which each test
op is an operator with autograd (``torch.ops.funcbwd_cpp.<op>_<approach>``: torch's forward, a C++
backward node calling the op's formula), once per approach. The strategies here run those
operators through the same engine as the Python strategies:

* ``cpp_legacy``: the historical formulas as written in C++ (in place): the failure, and the
  per-sample loop every C++ strategy is checked against (with torch's own gradient as truth);
* ``cpp_handfixed``: core's modern out-of-place formulas in C++ (the machinery-equal reference);
* ``cpp_composite`` (approach 1): each formula an operator with a functionalizing
  ``FuncTorchBatched`` kernel;
* ``cpp_guard`` (option 2): a guard inside the formula functionalizes it under vmap;
* ``cpp_whole``: the legacy nodes, the whole ``vjp_fn`` under one Functionalize layer (in C++);
* ``cpp_traced``: ``traced``'s graphs emitted as C++ at build time.

Provenance: the extension counts what ran in thread-local C++ counters; :meth:`Cpp.transform`
reads them around the transform call and records each kind of call that happened. The strategies
find the extension through :func:`use_extension`, which the study calls when it is imported (the
strategies sit below the studies: they cannot import it). Without it, or where the extension
cannot be built here, every cell is not applicable, saying why.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, ClassVar

import torch

from funcbwd.errors import NotApplicableError
from funcbwd_lab.ops.registry import TEST_OPS
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy
from funcbwd_lab.strategies.whole import Whole

#: (loader, why-unavailable) of the extension, set by the study (:func:`use_extension`)
_PROVIDER: dict[str, Callable[[], Any]] = {}
NOT_WIRED = ("the C++ extension is not wired in: import funcbwd_lab.studies.cpp (it builds the "
             "extension on first use)")


def use_extension(load: Callable[[], Any], unavailable: Callable[[], str | None]) -> None:
    """Tell the C++ strategies how to load the extension and why it may be unavailable."""
    _PROVIDER.update(load=load, unavailable=unavailable)


def unavailable() -> str | None:
    """Why the C++ strategies cannot run here (one line), or None."""
    if not _PROVIDER:
        return NOT_WIRED
    return _PROVIDER["unavailable"]()


def extension() -> Any:
    """The loaded extension module (built on first use); NotApplicableError if impossible."""
    reason = unavailable()
    if reason:
        raise NotApplicableError(reason)
    return _PROVIDER["load"]()


def _tensor(v: Any, like: torch.Tensor) -> Any:
    """A scalar bound of clamp as a 0-dim tensor (the Python legacy op's _clamp_args does the
    same); tensors and None pass."""
    return v if v is None or isinstance(v, torch.Tensor) else torch.tensor(v, dtype=like.dtype)


#: op -> how the torch op's positional call maps onto the C++ operator's schema
_CALLS: dict[str, Callable[[Any], Callable[..., Any]]] = {
    "diag": lambda f: lambda x, diagonal=0: f(x, diagonal),
    "index_select": lambda f: lambda x, dim, index: f(x, dim, index),
    "topk": lambda f: lambda x, k, dim=-1, largest=True, sorted=True: tuple(f(x, k, dim, largest, sorted)),
    "sort": lambda f: lambda x, dim=-1, descending=False: tuple(f(x, dim, descending)),
    "mode": lambda f: lambda x, dim=-1, keepdim=False: tuple(f(x, dim, keepdim)),
    "masked_select": lambda f: lambda x, mask: f(x, mask),
    "clamp": lambda f: lambda x, min=None, max=None: f(x, _tensor(min, x), _tensor(max, x)),
    "prod": lambda f: lambda x, dim=None, keepdim=False: f(x, dim, keepdim),
}
assert set(_CALLS) == set(TEST_OPS)


@functools.cache
def operator(op: str, approach: str) -> Callable[..., Any]:
    """The C++ op ``op`` under ``approach``, callable like the torch op (the extension loaded)."""
    extension()
    return _CALLS[op](getattr(torch.ops.funcbwd_cpp, f"{op}_{approach}").default)


class Cpp(Strategy):
    """What the C++ strategies share: the operators, the reference, provenance from counters."""

    #: the operators' suffix (``funcbwd_cpp::<op>_<approach>``)
    approach: ClassVar[str] = "legacy"
    #: C++ event name -> (provenance text, whether it is the strategy's own mechanism acting)
    events: ClassVar[dict[str, tuple[str, bool]]] = {}
    formula_kinds = ("backward",)
    formula_kinds_reason = "the C++ study builds the 8 test ops' backward formulas"

    def function(self, op: Any) -> Callable[..., Any]:
        if isinstance(op, str):
            from funcbwd_lab.ops import registry

            op = registry.get_op(op)
        if op.name not in _CALLS:
            raise NotApplicableError(self._not_built(op.name))
        return operator(op.name, self.approach)

    def reference(self) -> str:
        return "cpp_legacy"

    def _not_built(self, name: str) -> str:
        return f"{self.name}: the C++ study builds the 8 test ops' formulas only, not {name}'s"

    def not_applicable(self, op: Any, scenario: str) -> str | None:
        reason = super().not_applicable(op, scenario)
        if reason:
            return reason
        if op.name not in _CALLS:
            return self._not_built(op.name)
        why = unavailable()
        return f"{self.name}: {why}" if why else None

    def transform(self, composed: Callable[..., Any]) -> Callable[..., Any]:
        """``composed``, recording as provenance what the extension counted while it ran."""
        ext = extension()

        def run(*args: Any, **kwargs: Any) -> Any:
            before = ext.counters()
            try:
                return composed(*args, **kwargs)
            finally:
                self._record(ext, before, ext.counters())

        return run

    def _record(self, ext: Any, before: list[int], after: list[int]) -> None:
        names, formulas = ext.events, ext.formulas
        for i, (a, b) in enumerate(zip(before, after)):
            event, formula = names[i // len(formulas)], formulas[i % len(formulas)]
            if b > a and event in self.events:
                text, ran = self.events[event]
                provenance.record(self.name, text, ran, f"{formula}: {b - a} call(s)")

    def bookkeeping(self) -> Any:
        """Functionalize layers and reopened vmap fronts left open on this thread (none should
        outlive a call, whatever it raised)."""
        return {"open_scopes": extension().open_scopes() if unavailable() is None else 0}


class CppLegacy(Cpp):
    name = "cpp_legacy"
    summary = "the historical C++ formulas as written (in place): the failure, and the loop"
    approach = "legacy"
    events = {"legacy": ("legacy C++ formula ran as written", True)}


class CppHandfixed(Cpp):
    name = "cpp_handfixed"
    summary = "core's modern out-of-place formulas in C++, through the same C++ ops"
    approach = "handfixed"
    events = {"handfixed": ("modern C++ formula ran (out of place)", True)}


class CppComposite(Cpp):
    name = "cpp_composite"
    summary = "approach 1 in C++: each formula an operator with a functionalizing vmap kernel"
    approach = "composite"
    events = {"composite_batched": ("batched kernel ran: formula functionalized", True),
              "composite_explicit": ("explicit kernel ran (formula as written, unbatched)", False),
              "composite_decomposed": ("op decomposed by its Autograd kernel (grad needed)", False)}


class CppGuard(Cpp):
    name = "cpp_guard"
    summary = "option 2 in C++: a guard in the formula functionalizes it under vmap"
    approach = "guard"
    events = {"guard_functionalized": ("guard: formula functionalized under vmap", True),
              "guard_as_written": ("guard: formula ran as written (no vmap level)", False)}


class CppTraced(Cpp):
    name = "cpp_traced"
    summary = "traced's graphs emitted as C++ at build time, one per signature"
    approach = "traced"
    events = {"traced_graph": ("generated C++ graph ran", True),
              "traced_fallback": ("no graph for the signature: functionalized at call time", False),
              "traced_as_written": ("formula ran as written (outside every transform)", False)}


class CppWhole(Cpp, Whole):
    """The legacy C++ operators; :meth:`vjp` returns a ``vjp_fn`` that the extension runs under
    one Functionalize layer when vmap is active (its ``grad`` and ``jacrev`` are built on it, as
    ``whole``'s; torch.func's own ``grad``/``jacrev`` are not reached)."""

    name = "cpp_whole"
    summary = "the legacy C++ nodes; the whole vjp_fn under one Functionalize layer (C++)"
    approach = "legacy"
    events = {"whole_functionalized": ("vjp_fn functionalized under vmap (C++ layer)", True),
              "whole_as_written": ("vjp_fn ran as written (no vmap level)", False)}

    def vjp(self, fn: Callable, *primals: Any, inputs=()):
        out, vjp_fn = Strategy.vjp(self, fn, *primals, inputs=inputs)
        ext = extension()

        @functools.wraps(vjp_fn)
        def wrapper(*cotangents: Any, **kwargs: Any) -> Any:
            call = functools.partial(vjp_fn, **kwargs) if kwargs else vjp_fn
            return ext.whole_call(call, cotangents)

        return out, self.scoped_backward(wrapper)

    def bookkeeping(self) -> Any:
        return {**Cpp.bookkeeping(self), **Whole.bookkeeping(self)}


__all__ = ["Cpp", "CppLegacy", "CppHandfixed", "CppComposite", "CppGuard", "CppTraced",
           "CppWhole", "use_extension", "unavailable", "extension", "operator"]
