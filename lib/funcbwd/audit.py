"""What a traced graph cannot stand for, found while tracing: the trace is then refused (the
decorated function runs as written instead, :mod:`funcbwd.decorator`).

A functionalized graph differentiates every write it records. Eager autograd does not: a write
made under ``no_grad`` (or ``inference_mode``), or through ``.data`` / ``.detach()``, or after
``detach_()``, changes values without being recorded, so the gradient of what was written flows
to the tensor's history as if the write had not happened. The trace follows eager autograd where
it can and refuses where it cannot:

* an op run under ``no_grad`` computes a value with no gradient: its graph node is detached (by
  the tracer, :func:`funcbwd.fx.tracer.trace` with ``grad_mode``), as eager computes it;
* a write under ``no_grad`` into a tensor that carries gradient (one computed from an input or a
  captured tensor while grad was enabled), a write into a detached alias of such a tensor, and
  ``detach_()`` of one are refused (:class:`TraceRefused`);
* assigning ``.data`` of a tensor the call did not make (the caller's) is refused; reading
  ``.data`` of one it made that carries no gradient is traced as ``.detach()`` (the same alias);
* reading ``requires_grad``, ``grad_fn``, ``is_leaf`` or ``grad`` is refused: the trace runs on
  tensors that carry no gradient, so a branch on it would be fixed at trace time;
* ``torch.tensor(data)`` and ``new_tensor(data)`` are traced as a clone of themselves (a fresh
  tensor, as eager makes: functionalization would take them for a view of the data and drop the
  gradient of a write into them).

:class:`Audit` is a ``TorchFunctionMode`` around the traced call, tracking which tensors carry
gradient (the inputs and captured tensors, and what grad-enabled ops compute from them).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from funcbwd import masks, rules

_AUTOGRAD_STATE = frozenset({"requires_grad", "grad_fn", "is_leaf", "grad", "_version"})
#: factories of tensors from Python data (see :meth:`Audit.__torch_function__`)
_FROM_DATA = frozenset({"tensor", "new_tensor"})
#: factories whose output carries no gradient, whatever their tensor argument carries
_FRESH = _FROM_DATA | frozenset({
    "new_zeros", "new_ones", "new_full", "new_empty", "zeros_like", "ones_like", "empty_like",
    "full_like", "rand_like", "randn_like", "randint_like"})


class TraceRefused(RuntimeError):
    """The traced call does something a graph cannot stand for (module docstring)."""


class _Tensors:
    """A set of tensors by identity, held weakly (a tensor's ``==`` is elementwise)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def add(self, t: torch.Tensor) -> None:
        self._refs[id(t)] = weakref.ref(t)

    def __contains__(self, t: Any) -> bool:
        ref = self._refs.get(id(t))
        return ref is not None and ref() is t


class Audit(TorchFunctionMode):
    def __init__(self, inputs: tuple) -> None:
        super().__init__()
        self.tracked, self.detached, self.made = _Tensors(), _Tensors(), _Tensors()
        self.inputs = _Tensors()
        #: .data read as .detach() (and views of it): id -> (the alias, the tensor it is of)
        self.data_of: dict[int, tuple[weakref.ref, weakref.ref]] = {}
        for t in masks.tensors(inputs):
            self.tracked.add(t)
            self.inputs.add(t)

    def _carries(self, t: Any) -> bool:
        """``t`` carries gradient: an input, computed from one with grad enabled, or a tensor the
        caller owns that requires grad (a module's parameter)."""
        if not isinstance(t, torch.Tensor):
            return False
        return t in self.tracked or (t not in self.made and t.requires_grad)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "") or ""
        if name == "__get__":
            attr = getattr(func.__self__, "__name__", "")
            if attr in _AUTOGRAD_STATE:
                raise TraceRefused(f"it reads .{attr}, which a trace on tensors without "
                                   "gradient would fix at trace time")
            if attr == "data" and args[0] in self.made and not self._carries(args[0]):
                # .data of a tensor the call made, carrying no gradient: the same alias as
                # .detach(), which functionalization follows (.data it cannot)
                out = args[0].detach()
                self.made.add(out)
                self.data_of[id(out)] = (weakref.ref(out), weakref.ref(args[0]))
                return out
            out = func(*args, **kwargs)
            if attr == "data" and self._carries(args[0]):
                self.detached.add(out)
            return out
        if (name == "__set__" and func.__self__ is torch.Tensor.data and args
                and args[0] not in self.made):
            raise TraceRefused("it assigns .data of a tensor it did not make (a graph cannot "
                               "hold a new value in the caller's tensor)")
        k = rules.kind(name, kwargs)
        if k in ("write", "setitem", "out") or name == "detach_":
            target = kwargs["out"] if k == "out" else (args[0] if args else None)
            self._check_write(name, target)
            base = self._data_base(target)
            if base is not None and any(self._carries(a) for a in masks.tensors((args, kwargs))
                                        if a is not target):
                raise TraceRefused(f"{name} writes a value that carries gradient through "
                                   ".data or .detach() of a tensor (eager keeps that gradient "
                                   "in the alias alone; a functionalized graph cannot)")
        out = func(*args, **kwargs)
        if name in _FROM_DATA and isinstance(out, torch.Tensor) and not out.requires_grad:
            # torch.tensor(data) / new_tensor(data) is detach(lift_fresh(data)): functionalization
            # takes it for a view of the lifted data, and after a write into it regenerates it as
            # detach(written value), dropping the write's gradient. Eager makes a fresh leaf: so
            # does a clone (the same values, no view).
            out = out.clone()
        grad = torch.is_grad_enabled()
        inputs = masks.tensors((args, kwargs))
        for o in masks.tensors(out):
            self.made.add(o)
            self._alias(name, o, inputs)
            if name in _FRESH:
                continue  # takes only a shape, dtype or device of its input: no gradient
            if name in ("detach", "detach_") or not grad:
                if any(self._carries(a) for a in inputs) and o not in self.tracked:
                    self.detached.add(o)
                continue
            if any(self._carries(a) for a in inputs):
                self.tracked.add(o)
            if any(a in self.detached for a in inputs) and _is_view_of_any(o, inputs):
                self.detached.add(o)
        return out

    def _alias(self, name: str, o: torch.Tensor, inputs: list) -> None:
        """Record ``o`` if it is ``detach()`` of a tensor, or a view of such an alias."""
        if name == "detach" and inputs:
            self.data_of[id(o)] = (weakref.ref(o), weakref.ref(inputs[0]))
            return
        for a in inputs:
            base = self._data_base(a)
            if base is not None and _is_view_of_any(o, [a]):
                self.data_of[id(o)] = (weakref.ref(o), weakref.ref(base))

    def _data_base(self, t: Any) -> Any:
        """The tensor whose ``.data`` ``t`` is (or a view of), else None."""
        refs = self.data_of.get(id(t))
        return refs[1]() if refs is not None and refs[0]() is t else None

    def _check_write(self, name: str, target: Any) -> None:
        if not isinstance(target, torch.Tensor):
            return
        if name == "detach_":  # of one that carries gradient, or not: functionalization
            # follows detach_ as a view op and loses the gradient of what is written after
            raise TraceRefused("detach_() of a tensor that carries gradient" if self._carries(
                target) else "detach_(), which functionalization follows as a view op")
        base = self._data_base(target)
        if target in self.detached or (base is not None and self._carries(base)):
            raise TraceRefused(f"{name} writes through .data or .detach() of a tensor that "
                               "carries gradient")
        if not torch.is_grad_enabled() and self._carries(target):
            raise TraceRefused(f"{name} under no_grad into a tensor that carries gradient")


def _is_view_of_any(o: torch.Tensor, inputs: list[torch.Tensor]) -> bool:
    return o._is_view() and any(o._base is a or o._base is getattr(a, "_base", None)
                                for a in inputs if isinstance(a, torch.Tensor))
