"""``hooks``: the discussion's approach 2, "autograd hooks" (functorch#241).

Every node of a backward graph gets a pre-hook and a post-hook. When the node runs under a vmap
level, the pre-hook pushes a Functionalize interpreter and wraps the incoming grads as functional
tensors, so the node's formula (ours or one of torch's own C++ formulas) runs functionalized; the
post-hook syncs and unwraps the grads the node produced and pops the level. With no vmap level
the pre-hook returns at once and the node runs as written.

The thread's requirement "(2) unconditionally disabled after it, even if the backward raises" is
met by the autograd engine, not by us: post-hooks do not run when a node raises, but the engine
restores the functorch interpreter stack and dispatch TLS around every node, so a level pushed by
a pre-hook never outlives its node. The hooks keep no registry of their own: the pre-hook marks the
grads it wraps with the level it pushed, the post-hook pops only that level, and the mark dies
with the grads, so nothing can go stale. Each node is hooked at most once (checked on the node's
own hook dict), and a node already running under a caller's ``functionalize`` is left alone.

Provenance (:mod:`funcbwd_lab.strategies.provenance`): the pre-hook records "hooks pushed
Functionalize under vmap" (ran=True) when it pushes a level, and says why when it does not.

Known limit: hooks only see grads. Tensors a formula builds from *saved* tensors are not
functional, and mutating one with a functional tensor asserts inside functionalization.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
import torch.func

from funcbwd import internals
from funcbwd_lab.strategies import provenance
from funcbwd_lab.strategies.base import Strategy

#: attribute the pre-hook sets on the grads it wraps: how the post-hook knows the top level is ours
_MARK = "_funcbwd_hooks_level"
_SKIPPED_NODES = ("AccumulateGrad",)  # leaves: no formula, and grads w.r.t. inputs are captured there


# ------------------------------------------------------------------------------ the two hooks
def _functional_level(grads: Sequence[Any]) -> int | None:
    """The functional level of the first functional grad, or None."""
    for g in grads:
        level = internals.functional_level(g) if isinstance(g, torch.Tensor) else None
        if level is not None:
            return level
    return None


def _pushed_level(grads: Sequence[Any]) -> int | None:
    """The level our pre-hook pushed for this node, read from the mark it left on the grads."""
    for g in grads:
        level = getattr(g, _MARK, None)
        if level is not None:
            return level
    return None


def functionalize_prehook(grad_outputs: tuple) -> tuple | None:
    """Before a node: under vmap, push a Functionalize level and wrap the grads at it."""
    if not internals.vmap_active():
        # the cost when vmap is off: one interpreter-stack query (and a no-op provenance record)
        provenance.record("hooks", "node ran as written (no vmap level)", False)
        return None
    if not any(isinstance(g, torch.Tensor) for g in grad_outputs):
        return None
    seen = _functional_level(grad_outputs)
    if seen is not None and internals.top_is_functionalize(seen):
        provenance.record("hooks", "node already functionalized by the caller", False)
        return None  # already functionalized (the caller's own functionalize): nothing to add
    level = internals.push_functionalize()
    provenance.record("hooks", "hooks pushed Functionalize under vmap", True)
    wrapped = tuple(internals.wrap_functional(g, level) if isinstance(g, torch.Tensor) else g
                    for g in grad_outputs)
    for g in wrapped:
        if isinstance(g, torch.Tensor):
            setattr(g, _MARK, level)  # dies with the grads, even if the node raises
    return wrapped


def unfunctionalize_posthook(grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
    """After a node: if our pre-hook pushed the top level (``grad_outputs`` are the grads it
    returned, marked), sync and unwrap the produced grads and pop that level."""
    level = _pushed_level(grad_outputs)
    if level is None or not internals.top_is_functionalize(level):
        return None
    try:
        return tuple(internals.unwrap_functional(g)
                     if isinstance(g, torch.Tensor) and internals.functional_level(g) == level else g
                     for g in grad_inputs)
    finally:
        internals.pop_functionalize()


# ------------------------------------------------------------------------------ installing them
def graph_nodes(roots: Iterable[Any], stop_at: Iterable[Any] = ()) -> Iterator[Any]:
    """Each autograd node reachable from ``roots`` once, not descending past ``stop_at`` nodes."""
    stop_nodes = [n for n in stop_at if n is not None]
    stop = {id(n) for n in stop_nodes}
    # Python wrappers of C++ nodes are cached only while alive: keep every visited one alive so
    # an id can never be reused by another node's wrapper during the walk.
    visited: list[Any] = []
    seen: set[int] = set()
    todo = [n for n in roots if n is not None]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        visited.append(node)
        yield node
        if id(node) in stop:
            continue
        todo.extend(nxt for nxt, _ in node.next_functions if nxt is not None)


class HookSet:
    """The hooks installed on one graph; ``remove()`` (or leaving a ``with`` block) takes them off.

    Without removal they live as long as the graph (e.g. as long as a ``vjp_fn``)."""

    def __init__(self, handles: list) -> None:
        self.handles = handles

    @property
    def node_count(self) -> int:
        return len(self.handles) // 2

    def live_hooks(self) -> int:
        """How many of our hooks are still registered (0 after ``remove``)."""
        count = 0
        for h in self.handles:
            d = h.hooks_dict_ref()
            count += d is not None and h.id in d
        return count

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def __enter__(self) -> "HookSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _tensors(tree: Any) -> list[torch.Tensor]:
    leaves = torch.utils._pytree.tree_leaves(tree)
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def install_hooks(outputs: Any, stop_at: Any = ()) -> HookSet:
    """Hook every node of the backward graph of ``outputs`` (tensors or a pytree of them),
    not descending below the grad_fns of the ``stop_at`` tensors (a function's inputs)."""
    roots = [t.grad_fn for t in _tensors(outputs)]
    boundary = [t.grad_fn for t in _tensors(stop_at)]
    handles = []
    for node in graph_nodes(roots, boundary):
        if node in boundary or type(node).__name__ in _SKIPPED_NODES:
            continue
        pre = node.register_prehook(functionalize_prehook)
        if _registered_twice(pre, functionalize_prehook):
            pre.remove()  # already hooked (by an earlier install): each node at most once
            continue
        handles += [pre, node.register_hook(unfunctionalize_posthook)]
    return HookSet(handles)


def _registered_twice(handle: Any, fn: Callable) -> bool:
    """True if ``fn`` was on the node before ``handle`` added it again. The handle's dict is the
    node's own dict of Python hooks, so the check needs no registry of ours."""
    hooks = handle.hooks_dict_ref()
    return hooks is not None and sum(h is fn for h in hooks.values()) > 1


def functionalize_backward(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: ``fn'`` calls ``fn`` and hooks the backward graph between its outputs and its
    inputs, so that graph's nodes run functionalized whenever they run under vmap."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        install_hooks(out, stop_at=(args, kwargs))
        return out

    wrapper.__wrapped_backward__ = fn  # type: ignore[attr-defined]
    return wrapper


# ------------------------------------------------------------------------------ the strategy
class Hooks(Strategy):
    """Hooks on every node of the graphs the scenarios build. Because they sit on the graph, any
    torch.func API that runs the backward reaches them (torch's own vjp, grad, jacrev, hessian);
    ``vjp``/``grad``/``jacrev`` here only hook the graph ``fn`` builds, including the nodes a
    first backward creates (double backward)."""

    name = "hooks"
    summary = "autograd pre/post hooks functionalize each backward node iff vmap is active"
    formula_kinds = ("backward",)
    formula_kinds_reason = ("hooks sit on backward nodes; a forward-mode formula runs in the "
                            "forward pass, where no backward hook sees it")
    acts_on_builtin_nodes = True
    backward_only = True

    def function(self, op) -> Callable[..., Any]:
        return functionalize_backward(Strategy.function(self, op))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Any callable (e.g. a builtin torch op) with its backward graph hooked."""
        return functionalize_backward(fn)

    def vjp(self, fn: Callable, *primals: Any, inputs: Sequence[Any] = ()):
        out, vjp_fn = super().vjp(functionalize_backward(fn), *primals, inputs=inputs)
        return out, self.scoped_backward(vjp_fn)

    def grad(self, fn: Callable, argnums: Any = 0) -> Callable:
        return torch.func.grad(functionalize_backward(fn), argnums=argnums)

    def jacrev(self, fn: Callable, argnums: Any = 0) -> Callable:
        return torch.func.jacrev(functionalize_backward(fn), argnums=argnums)

    def bookkeeping(self) -> Any:
        """No state of its own; report the Functionalize levels on the stack (none should outlive
        a backward)."""
        return {"functionalize_levels": [lvl for k, lvl in internals.interpreter_stack()
                                         if k == "Functionalize"]}
