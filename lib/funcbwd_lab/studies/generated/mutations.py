"""Mutations: each re-breaks one behaviour the issue found broken; the seeded subset must fail.

A :class:`Mutation` is a context manager factory that changes what a user gets from one of the
tool's public names (``funcbwd.functionalized``, ``funcbwd.vmap``) so that one class of bug of
issue 37 comes back, whatever the tool's insides look like: the decorator runs the function
with grad-mode switches ignored, with what it captures frozen at the first call, under a lock
that is not re-entrant, with ``detach``/``.data`` followed, with ``requires_grad`` read as at
trace time, with the random state reseeded; ``funcbwd.vmap`` discards per-sample writes into
the caller's state by default, or keeps the writes of torch's failed attempt before its retry.
``feature`` is the grammar feature whose programs must then fail, ``entry`` the entry point
whose cells must. Where a behaviour lives inside the tool and no public name reaches it, the
mutation is data: ``patch`` is None and ``hook`` says what the tool should expose.

:func:`reference_tool` is the control: a correct tool by construction for the vmap entry (a
per-sample loop) and for the transforms without vmap (the function as written), on which a
mutation must turn a passing cell into a failing one (``tests/test_generated_mutations.py``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import sys
import threading
import types
from typing import Any, Callable, ContextManager, Iterator

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

import funcbwd
from funcbwd.harness import Snapshot, random_state, set_random_state


#: where each public name the mutations replace is defined (read before any is replaced)
_HOMES = {n: getattr(funcbwd, n).__module__ for n in ("vmap", "functionalized")}


@contextlib.contextmanager
def _public(name: str, value: Any) -> Iterator[None]:
    """``funcbwd.<name>`` replaced, in the package and in the module that defines it."""
    home = sys.modules[_HOMES[name]]
    old_home, had = getattr(home, name), name in vars(funcbwd)
    setattr(home, name, value)
    setattr(funcbwd, name, value)
    try:
        yield
    finally:
        setattr(home, name, old_home)
        if had:
            setattr(funcbwd, name, old_home)
        else:
            delattr(funcbwd, name)


#: (id(owner), name) -> [blocks patching it now, the attribute as it was (or _ABSENT)]
_PATCHED: dict[tuple, list] = {}
_PATCH_LOCK = threading.Lock()
_ABSENT = object()


@contextlib.contextmanager
def _attrs(owner: Any, **values: Any) -> Iterator[None]:
    """Attributes of ``owner`` replaced for the block (class attributes shadowed, then removed).
    Blocks in several threads at once (the ``threads`` programs call a mutated function from two
    threads) share one patch: the first saves what was there, the last puts it back (a save per
    block left the mutation in place for the rest of the process when two blocks interleaved)."""
    with _PATCH_LOCK:
        for k, v in values.items():
            entry = _PATCHED.setdefault((id(owner), k), [0, owner.__dict__.get(k, _ABSENT)])
            if entry[0] == 0:
                setattr(owner, k, v)
            entry[0] += 1
    try:
        yield
    finally:
        with _PATCH_LOCK:
            for k in values:
                entry = _PATCHED[(id(owner), k)]
                entry[0] -= 1
                if entry[0] == 0:
                    del _PATCHED[(id(owner), k)]
                    if entry[1] is _ABSENT:
                        delattr(owner, k)
                    else:
                        setattr(owner, k, entry[1])


def _decorator_wrapping(wrap: Callable[[Callable], Callable]) -> Callable[[], ContextManager]:
    """A mutation of ``funcbwd.functionalized``: it decorates ``wrap(fn)`` instead of ``fn``."""
    def patch() -> ContextManager:
        original = funcbwd.functionalized

        def mutated(fn=None, **kw):
            if fn is None:
                return functools.partial(mutated, **kw)
            return original(fn if isinstance(fn, type) else wrap(fn), **kw)
        return _public("functionalized", mutated)
    return patch


def _running_under(context: Callable[[], ContextManager]) -> Callable[[Callable], Callable]:
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with context():
                return fn(*args, **kwargs)
        return run
    return wrap


# ------------------------------------------------------------------------------ the bugs, again
def _grad_mode_ignored() -> ContextManager:
    null = contextlib.nullcontext
    return _attrs(torch, no_grad=null, enable_grad=null, set_grad_enabled=null,
                  inference_mode=null)


def _frozen(fn: Callable) -> Callable:
    """``fn`` with the globals and closure values it reads copied at its first call."""
    done: list[Callable] = []
    data = (torch.Tensor, int, float, bool, dict, list)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not done:
            g = fn.__globals__
            frozen = {n: copy.deepcopy(g[n]) for n in fn.__code__.co_names
                      if n in g and isinstance(g[n], data)}
            cells = tuple(types.CellType(copy.deepcopy(c.cell_contents)
                                         if isinstance(c.cell_contents, data) else c.cell_contents)
                          for c in fn.__closure__ or ())
            done.append(types.FunctionType(fn.__code__, {**g, **frozen}, fn.__name__,
                                           fn.__defaults__, cells or None))
        return done[0](*args, **kwargs)
    return run


_LOCK = threading.Lock()


def _detach_followed() -> ContextManager:
    return _attrs(torch.Tensor, detach=lambda t: t.view_as(t), detach_=lambda t: t,
                  data=property(lambda t: t.view_as(t)))


def _requires_grad_as_traced() -> ContextManager:
    return _attrs(torch.Tensor, requires_grad=property(lambda t: False))


@contextlib.contextmanager
def _reseeded() -> Iterator[None]:
    torch.manual_seed(0)
    yield


def _vmap_replaced(make: Callable[[Callable], Callable]) -> Callable[[], ContextManager]:
    def patch() -> ContextManager:
        return _public("vmap", make(funcbwd.vmap))
    return patch


def _discard_by_default(original: Callable) -> Callable:
    def vmap(func, *args, **kwargs):
        return original(func, *args, **{"state_writes": "discard", **kwargs})
    return vmap


def _retry_keeps_writes(original: Callable) -> Callable:
    def vmap(func, *args, **kwargs):
        plain, retry = torch.func.vmap(func, *args, **kwargs), original(func, *args, **kwargs)

        def call(*a, **k):
            try:
                return plain(*a, **k)
            except Exception:  # noqa: BLE001 - the retry, without undoing the attempt
                return retry(*a, **k)
        return call
    return vmap


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    bug: str  # issue 37's class, in its words
    feature: str  # the grammar feature whose programs must fail
    entry: str  # the entry point whose cells must fail
    patch: Callable[[], ContextManager] | None = None
    hook: str = ""  # for a mutation not written yet: what the tool should expose


MUTATIONS = {m.name: m for m in [
    Mutation("grad_mode_ignored", "torch.no_grad() inside a decorated function is dropped",
             "grad_mode", "functionalized",
             _decorator_wrapping(_running_under(_grad_mode_ignored))),
    Mutation("captured_frozen", "captured tensors, Python scalars and dict entries are baked "
             "into the cached graph", "captured", "functionalized", _decorator_wrapping(_frozen)),
    Mutation("lock_not_reentrant", "a decorated function calling another decorated function "
             "hangs", "nested", "functionalized",
             _decorator_wrapping(_running_under(lambda: _LOCK))),
    Mutation("detach_followed", "the decorator differentiates writes made through .data, "
             ".detach() and after detach_()", "detach", "functionalized",
             _decorator_wrapping(_running_under(_detach_followed))),
    Mutation("requires_grad_as_traced", "`if y.requires_grad:` is fixed at trace time",
             "requires_grad_read", "functionalized",
             _decorator_wrapping(_running_under(_requires_grad_as_traced))),
    Mutation("random_reseeded", "tracing reseeds the global generator", "random",
             "functionalized", _decorator_wrapping(_running_under(_reseeded))),
    Mutation("state_discarded", "per-sample writes into caller-owned state are silently "
             "discarded (warning-and-go)", "buffer", "vmap", _vmap_replaced(_discard_by_default)),
    Mutation("retry_repeats_writes", "a retry repeats side effects torch's failed attempt "
             "already made", "buffer", "vmap", _vmap_replaced(_retry_keeps_writes)),
    Mutation("memo_by_id", "what worked is remembered by id() of closure objects", "closure",
             "vmap", hook="the key funcbwd.vmap remembers what worked under (a function to "
             "replace with one keyed by id() of the closure's objects)"),
    Mutation("function_unconverted", "a setup_context-style Function with an in-place backward "
             "fails with torch's 'does not have vmap support'", "function_new", "vmap",
             hook="the conversion of autograd.Function classes the tool applies (a function "
             "to replace with the identity)"),
    Mutation("inference_view_writes", "under inference_mode the mode loses writes made "
             "through a view", "around", "vmap", hook="the in-place mode's rule for a write "
             "through a view (a rule table entry to replace)"),
    Mutation("device_random_state", "a call changes the caller's accelerator generators",
             "random", "functionalized", hook="the helper that saves and restores every "
             "device's generator (to replace with one that saves the CPU's only); observable "
             "only with an accelerator, or a fake one in funcbwd.harness.state.RANDOM_SOURCES "
             "if the tool's helper reads the same list"),
]}


@contextlib.contextmanager
def applied(name: str | None) -> Iterator[None]:
    """The named mutation (``reference`` alone: the control; ``reference+NAME``: both)."""
    names = [n for n in (name or "").split("+") if n]
    with contextlib.ExitStack() as stack:
        for n in names:
            if n == "reference":
                stack.enter_context(reference_tool())
            elif n not in MUTATIONS or MUTATIONS[n].patch is None:
                raise funcbwd.BadInputError(f"no mutation {n!r} to apply; written: "
                                            f"{', '.join(written())}")
            else:
                stack.enter_context(MUTATIONS[n].patch())
        yield


def written() -> list[str]:
    return [n for n, m in MUTATIONS.items() if m.patch is not None]


# ------------------------------------------------------------------------------ the control
def loop_vmap(func: Callable, in_dims: Any = 0, out_dims: Any = 0, randomness: str = "error",
              *, chunk_size: int | None = None, state_writes: str | None = None) -> Callable:
    """vmap as its definition: ``func`` once per batch entry, in order, outputs stacked at 0
    (``randomness="same"``: each entry from the same random state; ``state_writes="discard"``:
    each entry from the caller's objects ``func`` reaches as they were, put back after)."""
    def call(*args):
        dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
        size = next(tree_flatten(a)[0][0].shape[d] for a, d in zip(args, dims) if d is not None)
        rng, outs = random_state(), []
        before = Snapshot(_reachable(func)) if state_writes == "discard" else None
        for i in range(size):
            if randomness == "same":
                set_random_state(rng)
            if before is not None:
                before.restore()
            outs.append(func(*[a if d is None else tree_map(lambda t: t.select(d, i), a)
                               for a, d in zip(args, dims)]))
        if before is not None:
            before.restore()
        flat = [tree_flatten(o) for o in outs]
        return tree_unflatten([torch.stack(c) for c in zip(*(f for f, _ in flat))], flat[0][1])
    return call


def _reachable(func: Any, seen: set | None = None) -> dict[str, Any]:
    """The tensors, modules and dicts ``func``'s globals and closures hold (through wrappers)."""
    seen = set() if seen is None else seen
    out: dict[str, Any] = {}
    if id(func) in seen:
        return out
    seen.add(id(func))
    cells = [c.cell_contents for c in getattr(func, "__closure__", None) or ()]
    names = getattr(getattr(func, "__code__", None), "co_names", ())
    g = getattr(func, "__globals__", {})
    for i, v in enumerate([*cells, *(g[n] for n in names if n in g)]):
        if isinstance(v, (torch.Tensor, torch.nn.Module, dict)):
            out[f"{id(v)}"] = v
        elif callable(v) and not isinstance(v, type):
            out.update(_reachable(v, seen))
    return out


@contextlib.contextmanager
def reference_tool() -> Iterator[None]:
    """A tool right by construction where it acts: ``funcbwd.vmap`` is :func:`loop_vmap`,
    ``funcbwd.functionalized`` returns the function as written."""
    with _public("vmap", loop_vmap), _public("functionalized",
                                             lambda fn=None, **kw: fn or (lambda f: f)):
        yield
