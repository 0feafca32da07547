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

aten = torch.ops.aten
_META = torch.device("meta")

#: (shape, strides, dtype, device) of one tensor input
TensorSpec = tuple


class DataDependentError(RuntimeError):
    """``fn`` reads a tensor's values or produces a value-dependent shape: no graph can stand for
    every call of the signature."""


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


class Recorder(TorchDispatchMode):
    """Records each aten call as an FX node (see the module docstring)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo, whose
        # first call imports torch._dynamo (the second the tracer exists to avoid); nothing here
        # is compiled, so there is nothing for dynamo to skip.
        return False

    def __init__(self) -> None:
        super().__init__()
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
        self.track(t, self.graph.placeholder(name))

    def node_for(self, a: Any) -> Any:
        """The graph value of ``a``: its node for a tensor (a new constant if untracked)."""
        if not isinstance(a, torch.Tensor):
            return a
        node = self.node_of(a)
        if node is None:
            name = f"_tensor_constant{self._constants}"
            self._constants += 1
            setattr(self.root, name, a)
            node = self.graph.get_attr(name)
            self.track(a, node)
        return node

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = data_dependence(func, args)
        if why is not None:
            raise DataDependentError(f"data-dependent: {why}")
        node_args, node_kwargs = pytree.tree_map(self.node_for, (args, kwargs))
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


def trace(fn: Callable[..., Any], specs: Sequence[TensorSpec]) -> torch.fx.GraphModule:
    """The graph of ``fn(*tensors)`` for tensors of ``specs``: inputs ``arg0, arg1, ...``.

    Run it outside every functorch transform (the caller clears them). Raises
    :class:`DataDependentError` for value-dependent code, and what ``fn`` raises."""
    rec = Recorder()
    inputs = [blank(s) for s in specs]
    for i, t in enumerate(inputs):
        rec.input(t, f"arg{i}")
    with torch.random.fork_rng(devices=[]), rec:
        out = fn(*inputs)
    rec.graph.output(pytree.tree_map(rec.node_for, out))
    return torch.fx.GraphModule(rec.root, rec.graph)


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
