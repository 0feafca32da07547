"""Compile an FX graph of aten ops into one plain Python function, once.

Calling a ``GraphModule`` costs more than its ops: ``nn.Module.__call__`` (hooks, forward
lookup), an attribute chain ``torch.ops.aten.<op>.default`` per op and ``OpOverload.__call__``'s
Python frame per op. :func:`compile_graph` writes the graph out as source whose globals are the
ops' C++ callables (resolved once, :func:`funcbwd.internals.overload_kernel`) and whose inputs are
read straight from the caller's argument tuple, so a call is the ops and nothing else. The
function computes exactly what the graph computes: the same ops with the same arguments in the
same order (``tests/test_elide.py`` compares the two on every catalog op's samples).

With ``bindings=True`` each aten op is called through its public Python binding instead
(``torch.zeros``, ``torch.Tensor.expand``: :func:`funcbwd.internals.overload_binding`), whose
argument parsing is a few microseconds faster per op than an ``OpOverload``'s JIT-schema path. A
binding chooses among the op's overloads by the arguments, so that variant is only equivalent if
it binds the same overloads: :func:`funcbwd.fx.formula_graphs.build` verifies that by re-tracing
both variants and comparing the graphs, and uses the overload calls otherwise.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Sequence

import torch.fx

from funcbwd import internals

_LITERAL_TYPES = (bool, int, str, type(None))


class _Writer:
    def __init__(self) -> None:
        self.globals: dict[str, Any] = {}
        self.names: dict[torch.fx.Node, str] = {}

    def constant(self, value: Any) -> str:
        if isinstance(value, _LITERAL_TYPES) or (isinstance(value, float) and math.isfinite(value)):
            return repr(value)
        name = f"c{len(self.globals)}"
        self.globals[name] = value
        return name

    def expr(self, a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            return self.names[a]
        if isinstance(a, tuple):
            return "(" + "".join(self.expr(x) + ", " for x in a) + ")"
        if isinstance(a, list):  # a fresh list per call, as the graph's own code builds it
            return "[" + ", ".join(self.expr(x) for x in a) + "]"
        if isinstance(a, (dict, slice)):
            raise NotImplementedError(f"graph argument of type {type(a).__name__}")
        return self.constant(a)

    def callee(self, target: Any, bindings: bool) -> str:
        name = f"k{len(self.globals)}"
        binding = internals.overload_binding(target) if bindings else None
        self.globals[name] = binding if binding is not None else internals.overload_kernel(target)
        return name


def _attr(gm: torch.nn.Module, path: str) -> Any:
    obj = gm
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def graph_source(gm: torch.fx.GraphModule, positions: Sequence[int], bindings: bool = False
                 ) -> tuple[str, dict[str, Any]]:
    """(source of ``def run(args)``, its globals): placeholder ``i`` is ``args[positions[i]]``."""
    w = _Writer()
    lines = ["def run(args):"]
    placeholders = 0
    for i, node in enumerate(gm.graph.nodes):
        name = w.names[node] = f"v{i}"
        if node.op == "placeholder":
            lines.append(f"    {name} = args[{positions[placeholders]}]")
            placeholders += 1
        elif node.op == "get_attr":
            lines.append(f"    {name} = {w.constant(_attr(gm, node.target))}")
        elif node.op == "call_function" and node.target is operator.getitem:
            lines.append(f"    {name} = {w.expr(node.args[0])}[{w.expr(node.args[1])}]")
        elif node.op == "call_function":
            parts = [w.expr(a) for a in node.args] + [f"{k}={w.expr(v)}" for k, v in node.kwargs.items()]
            lines.append(f"    {name} = {w.callee(node.target, bindings)}({', '.join(parts)})")
        elif node.op == "output":
            lines.append(f"    return {w.expr(node.args[0])}")
        else:
            raise NotImplementedError(f"graph node {node.name}: op {node.op!r}")
    if placeholders != len(positions):
        raise ValueError(f"graph has {placeholders} inputs, {len(positions)} positions given")
    return "\n".join(lines) + "\n", w.globals


def compile_graph(gm: torch.fx.GraphModule, positions: Sequence[int], name: str = "graph",
                  bindings: bool = False) -> Callable[[Sequence[Any]], Any]:
    """A function ``run(args)`` computing ``gm(*(args[p] for p in positions))``.

    ``positions`` are the indices of the graph's inputs in the tuple the caller passes (a
    formula's positional args: its tensors are read in place, its other args are baked into the
    graph). ``bindings``: call the public bindings (see the module docstring). ``run.source``
    holds the generated code."""
    source, env = graph_source(gm, list(positions), bindings)
    code = compile(source, f"<funcbwd compiled {name}>", "exec")
    exec(code, env)  # noqa: S102 - our own generated source, from the graph's nodes only
    run = env["run"]
    run.source = source
    return run


def has_bindings(gm: torch.fx.GraphModule) -> bool:
    """True if some op of ``gm`` has a public binding (the ``bindings`` variant differs)."""
    return any(n.op == "call_function" and internals.overload_binding(n.target) is not None
               for n in gm.graph.nodes)
