"""A tracer that records a function's aten calls into an FX graph, without ``make_fx``.

Why not ``make_fx``: in a fresh process its first call costs about a second before it traces
anything. ``make_fx`` runs ``from torch._inductor import config`` (``torch._inductor`` imports
``torch._dynamo``), and every ``FakeTensorMode()`` runs ``import torch._dynamo.config``; importing
``torch._dynamo`` pulls in ``torch._inductor``, ``sympy``, ``torch.distributed.fsdp``: about 830
modules, 1.1-1.7 s on this machine (profiled with cProfile and ``-X importtime``,
docs/your-code.md). That was the whole of the 1-1.5 s first trace of the catalog formulas.

How: :func:`trace` runs ``fn`` once on plain tensors of the signature's shapes and strides (zeros:
valid indices and masks) under a ``TorchDispatchMode`` that records every aten call it sees (the
calls below ``torch.func.functionalize`` when ``fn`` is functionalized, as ``make_fx`` records
them). Values never reach the graph: an op that reads one (``.item()``, ``bool(t)``: the
``data_dependent_output`` tag or ``_local_scalar_dense``) or whose output shape depends on values
(``nonzero``, ``masked_select``, ``x[mask]``: the ``dynamic_output_shape`` tag)
raises :class:`DataDependentError` ("data-dependent ..."). Each node's ``meta["val"]`` is the
tensor the op returned, so shapes, strides and dtypes are the real ones; the tensors are dropped
by :func:`shed_values` once a caller is done with them. A kernel that refuses the zeros (e.g. a
solver on a singular matrix) is retried on meta tensors for its output's layout.

Running on plain tensors means ``fn``'s ops run once for real at trace time (the cost of one eager
call at the signature's size; random ops draw under ``torch.random.fork_rng``, so the caller's
random stream is not advanced). ``tests/test_tracer.py`` checks that the graph of every catalog
formula equals ``make_fx``'s (same calls, same arguments, same order).

Limits: one device per trace (CPU is what this project runs); a tensor that ``fn`` captures from
outside (a closure) becomes a graph constant, as with ``make_fx``.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

from funcbwd import internals

aten = torch.ops.aten
_META = torch.device("meta")

#: (shape, strides, dtype, device) of one tensor input
TensorSpec = tuple


class CapturedWriteError(RuntimeError):
    """The traced code writes into a tensor it captured: a graph cannot stand for it (the code
    runs as written, where such writes are the caller's state)."""


class DataDependentError(RuntimeError):
    """``fn`` reads a tensor's values or produces a value-dependent shape: no graph can stand for
    every call of the signature."""


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def is_fake(t: torch.Tensor) -> bool:
    """``t`` is a tensor of a trace (a fake tensor)."""
    return _is_fake(t)


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _storage_for(shape: Sequence[int], stride: Sequence[int]) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


def blank(spec: TensorSpec, generator: torch.Generator | None = None) -> torch.Tensor:
    """A plain tensor of ``spec``'s shape and strides (also overlapping ones, e.g. stride 0) over
    a storage of zeros, or of random normal values drawn from ``generator``."""
    shape, stride, dtype, device = spec
    n = _storage_for(shape, stride)
    if generator is None:
        storage = torch.zeros(n, dtype=dtype, device=device)
    else:
        storage = torch.randn(n, generator=generator, dtype=dtype).to(device)
    return storage.as_strided(shape, stride)


def data_dependence(func, args: tuple) -> str | None:
    """Why calling ``func`` on ``args`` depends on tensor values, or None."""
    if func is aten._local_scalar_dense.default or torch.Tag.data_dependent_output in func.tags:
        return f"{func} reads a tensor's value (.item(), bool(tensor), a Python branch on a tensor)"
    if torch.Tag.dynamic_output_shape in func.tags:
        return f"{func}'s output shape depends on tensor values"
    return None


def _on_meta(func, args: tuple, kwargs: dict) -> Any:
    """``func``'s outputs for these args' layouts, from meta tensors, as plain zeros."""
    devices = [a.device for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    device = kwargs.get("device") or (devices[0] if devices else torch.device("cpu"))

    def to_meta(a):
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=_META)
        return _META if isinstance(a, torch.device) else a

    margs, mkwargs = pytree.tree_map(to_meta, (args, kwargs))
    out = func(*margs, **mkwargs)
    return pytree.tree_map(lambda t: blank((t.shape, t.stride(), t.dtype, device))
                           if isinstance(t, torch.Tensor) else t, out)


_LIFTS = (aten.lift_fresh.default, aten.lift_fresh_copy.default)


class Recorder(TorchDispatchMode):
    """Records each aten call as an FX node (see the module docstring). ``fake``: every op runs
    on fake tensors (torch's ``FakeTensorMode``: layouts and devices, no data; real tensors it
    meets are faked). ``capture``: a real
    tensor the traced code captures becomes a graph input (``cap0``, ``cap1``, ...: the tensors in
    :attr:`captured`) instead of a constant; one made from Python data in the call
    (``torch.tensor([...])``) stays a constant. ``detach_no_grad``: an op run with grad disabled
    has its outputs detached in the graph, as eager computes them."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, whose
        # first call imports torch._dynamo (the second the tracer exists to avoid); nothing here
        # is compiled, so there is nothing for dynamo to skip.
        return False

    def __init__(self, *, fake: bool = False, capture: bool = False,
                 detach_no_grad: bool = False) -> None:
        super().__init__()
        self.capture, self.detach_no_grad = capture, detach_no_grad
        self.fake_mode = _fake_mode() if fake else None
        self.captured: list[torch.Tensor] = []
        self._last_input: torch.fx.Node | None = None
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        # Weak keys, and meta["val"] a detached alias: an op's output must leave the mode with no
        # other reference, or torch's factory bindings see a shared tensor and add a detach.
        self._nodes = WeakTensorKeyDictionary()
        self._constants = 0

    def node_of(self, t: torch.Tensor) -> torch.fx.Node | None:
        return self._nodes.get(t)

    def track(self, t: torch.Tensor, node: torch.fx.Node) -> None:
        self._nodes[t] = node
        node.meta["val"] = t.detach()

    def input(self, t: torch.Tensor, name: str) -> None:
        self._last_input = self.graph.placeholder(name)
        self.track(t, self._last_input)

    def node_for(self, a: Any, lifted: bool = False) -> Any:
        """The graph value of ``a``: its node for a tensor (a new constant if untracked, or a new
        input with ``capture``, unless ``lifted`` from Python data in the call)."""
        if not isinstance(a, torch.Tensor):
            return a
        node = self.node_of(a)
        fake = self.fake_mode is not None and _is_fake(a)
        if node is None and fake:
            # functionalization made it from something the trace did not see (``.data`` of a
            # captured tensor): no graph value stands for it
            raise CapturedWriteError("the traced code reaches a tensor through an alias the "
                                     "trace cannot follow (.data or .detach() of a captured tensor)")
        if node is None:
            if self.capture and not lifted and not fake:
                with self.graph.inserting_after(self._last_input) if self._last_input else \
                        self.graph.inserting_before(None):
                    node = self.graph.placeholder(f"cap{len(self.captured)}")
                self._last_input = node
                self.captured.append(a)
            else:
                name = f"_tensor_constant{self._constants}"
                self._constants += 1
                setattr(self.root, name, a)
                node = self.graph.get_attr(name)
            self.track(a, node)
        return node

    def _refuse_captured_writes(self, func, args: tuple, kwargs: dict) -> None:
        """A write the trace cannot turn into a graph's: into a tensor the traced code captured
        (functionalization passes a write into a tensor it did not wrap through as it is)."""
        for arg, value in zip(func._schema.arguments, args):
            if arg.alias_info is not None and arg.alias_info.is_write and isinstance(
                    value, torch.Tensor) and self.node_of(value) is None:
                raise CapturedWriteError(f"{func} writes into a tensor the traced code captured "
                                         f"(shape {tuple(value.shape)}), not an argument")
        for name, value in kwargs.items():
            arg = next((a for a in func._schema.arguments if a.name == name), None)
            if arg is not None and arg.alias_info is not None and arg.alias_info.is_write and \
                    isinstance(value, torch.Tensor) and self.node_of(value) is None:
                raise CapturedWriteError(f"{func} writes into a tensor the traced code captured "
                                         f"(shape {tuple(value.shape)}), not an argument")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = data_dependence(func, args)
        if why is not None:
            raise DataDependentError(f"data-dependent: {why}")
        if self.capture and func._schema.is_mutable:
            self._refuse_captured_writes(func, args, kwargs)
        lifted = func in _LIFTS
        node_args, node_kwargs = pytree.tree_map(lambda a: self.node_for(a, lifted),
                                                 (args, kwargs))
        if self.fake_mode is not None:
            with self.fake_mode:
                out = func(*args, **kwargs)
        else:
            try:
                out = func(*args, **kwargs)
            except Exception as refused:  # noqa: BLE001 - a kernel refusing the zeros: use meta
                try:
                    out = _on_meta(func, args, kwargs)
                except Exception:  # noqa: BLE001 - not a value problem: the op's own error
                    raise refused from None
        leaves = pytree.tree_leaves(out)
        if not any(isinstance(o, torch.Tensor) for o in leaves) and not func._schema.is_mutable:
            return out  # sizes, flags: functions of the signature, as make_fx bakes them
        node = self.graph.create_node("call_function", func, node_args, node_kwargs,
                                      name=func.overloadpacket.__name__)  # make_fx's names
        if self.detach_no_grad and not torch.is_grad_enabled() and not func._schema.is_mutable:
            return self._detached(out, node)
        if isinstance(out, torch.Tensor):
            self.track(out, node)
        else:
            node.meta["val"] = pytree.tree_map(
                lambda o: o.detach() if isinstance(o, torch.Tensor) else o, out)
            if isinstance(out, (tuple, list)):
                for i, o in enumerate(out):
                    if isinstance(o, torch.Tensor):
                        self.track(o, self.graph.call_function(operator.getitem, (node, i)))
        return out


    def _detached(self, out: Any, node: torch.fx.Node) -> Any:
        """The outputs of an op run with grad disabled, each through a ``detach`` node."""
        if isinstance(out, torch.Tensor):
            self.track(out, self._no_grad_detach(node))
            return out
        node.meta["val"] = pytree.tree_map(
            lambda o: o.detach() if isinstance(o, torch.Tensor) else o, out)
        if isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    self.track(o, self._no_grad_detach(item))
        return out

    def _no_grad_detach(self, node: torch.fx.Node) -> torch.fx.Node:
        """``detach(node)`` standing for no_grad (``meta["no_grad"]``): reverse mode's answer;
        forward mode ignores no_grad, which the graph cannot (see :mod:`funcbwd.decorator`)."""
        out = self.graph.call_function(aten.detach.default, (node,))
        out.meta["no_grad"] = True
        return out


def trace(fn: Callable[..., Any], specs: Sequence[TensorSpec], *, fake: bool = False,
          capture: bool = False, grad_mode: bool | None = None) -> torch.fx.GraphModule:
    """The graph of ``fn(*tensors)`` for tensors of ``specs``: inputs ``arg0, arg1, ...``.

    Run it outside every functorch transform (the caller clears them). Raises
    :class:`DataDependentError` for value-dependent code, and what ``fn`` raises. ``fake``: on
    fake tensors (the cost of a trace is then independent of the sizes; the caller's captured
    tensors are never written; the first fake trace in a process imports torch's fake tensors,
    about a second, once). ``capture``: captured tensors become inputs ``cap0, ...`` after
    the arguments, listed in ``gm.captured`` (:class:`Recorder`). ``grad_mode``: run ``fn`` with
    grad enabled or not (None: as the caller has it) and detach what no-grad ops compute."""
    rec = Recorder(fake=fake, capture=capture, detach_no_grad=grad_mode is not None)
    if fake:
        with rec.fake_mode:
            inputs = [torch.empty_strided(s[0], s[1], dtype=s[2], device=s[3]) for s in specs]
    else:
        inputs = [blank(s) for s in specs]
    for i, t in enumerate(inputs):
        rec.input(t, f"arg{i}")
    grad = torch.is_grad_enabled() if grad_mode is None else grad_mode
    with internals.rng_forked(), torch.set_grad_enabled(grad), rec:
        out = fn(*inputs)
    rec.graph.output(pytree.tree_map(rec.node_for, out))
    gm = torch.fx.GraphModule(rec.root, rec.graph)
    gm.captured = rec.captured
    return gm


def shed_values(gm: torch.fx.GraphModule) -> None:
    """Replace each node's ``meta["val"]`` by a meta tensor of its layout (frees the trace's
    tensors; strides, shapes and dtypes stay readable)."""
    def meta(t):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=_META)
        return t

    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta["val"] = pytree.tree_map(meta, node.meta["val"])
