"""What a traced graph depends on besides its arguments, and how a later call checks it.

A graph of ``fn`` bakes in whatever ``fn`` reads that is not an argument: tensors it captures (a
closure, a global, a module's weight) and Python values (``alpha = 0.5``, ``cfg["p"]``,
``self.training``). Rebound between two calls, either would make a cached graph wrong. So:

* :func:`environment` walks what ``fn``'s code can name (its closure cells, the globals and
  attribute/item names its code and the code of the functions it calls mention, its defaults,
  its non-tensor arguments), to a small depth, and records every Python scalar and every tensor
  on the way, each by its *path* (``("global", "cfg"), ("item", "p")``).
* The Python values are part of the cache key (:meth:`Env.values`): a rebound one traces anew.
* A tensor the trace captured becomes a graph *input*, fed at every call from its path
  (:meth:`Env.captured`): a rebound global gives the graph the new tensor. A tensor reachable by
  several paths must be one object at all of them (else the call traces anew). A captured tensor
  the walk does not find is refused: the graph is not kept (:class:`NotLocated`).

The walk follows only names the code mentions (so ``torch.nn.functional`` is not walked), to
:data:`DEPTH` steps, at most :data:`BUDGET` objects.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Iterable

import torch

DEPTH = 4
BUDGET = 2000
_SCALARS = (int, float, bool, str, complex, type(None))
_SKIP_MODULES = ("torch", "numpy", "math", "builtins", "functools", "typing", "funcbwd")


class NotLocated(Exception):
    """A tensor the trace captured that no path of :func:`environment` reaches."""


def code_names(fn: Any) -> tuple[set[str], set[Any]]:
    """The attribute/global names and the constants ``fn``'s code (and nested code) mentions."""
    names: set[str] = set()
    consts: set[Any] = set()
    code = getattr(fn, "__code__", None)
    stack = [code] if code is not None else []
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        names.update(c.co_freevars)
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                stack.append(k)
            elif isinstance(k, (str, int)) and not isinstance(k, bool):
                consts.add(k)
    return names, consts


@dataclasses.dataclass
class Env:
    """Paths to the scalars and tensors ``fn`` can reach (see the module docstring)."""

    scalars: list[tuple[tuple, Any]]
    tensors: dict[int, list[tuple]]  # id(tensor at walk time) -> paths

    def values(self, fn: Any, args: tuple) -> tuple:
        """The scalars' values now (a key part)."""
        return tuple(_value(resolve(fn, args, p)) for p, _ in self.scalars)

    def locate(self, captured: Iterable[torch.Tensor]) -> list[list[tuple]]:
        """The paths of each captured tensor; :class:`NotLocated` if one has none."""
        out = []
        for t in captured:
            paths = self.tensors.get(id(t))
            if not paths:
                raise NotLocated(f"a captured tensor of shape {tuple(t.shape)} is reached by no "
                                 "name funcbwd can follow")
            out.append(paths)
        return out


def _value(v: Any) -> Any:
    return (type(v), v.hex() if type(v) is float else v) if isinstance(v, _SCALARS) else (
        "object", id(v))


_MISSING = object()


def resolve(fn: Any, args: tuple, path: tuple) -> Any:
    """The object at ``path`` now (a sentinel when a step is missing)."""
    obj: Any = _MISSING
    for step in path:
        kind, key = step
        try:
            if kind == "cell":
                obj = fn.__closure__[key].cell_contents
            elif kind == "global":
                obj = (fn if obj is _MISSING else obj).__globals__[key]
            elif kind == "default":
                obj = fn.__defaults__[key]
            elif kind == "arg":
                obj = args[key]
            elif kind == "attr":
                obj = getattr(obj, key)
            elif kind == "item":
                obj = obj[key]
            elif kind == "fncell":
                obj = obj.__closure__[key].cell_contents
            else:
                return _MISSING
        except Exception:  # noqa: BLE001 - gone, renamed, rebound to another kind: a miss
            return _MISSING
    return obj


def environment(fn: Any, args: tuple) -> Env:
    """Walk what ``fn`` can reach (module docstring)."""
    walker = _Walker(fn)
    names, consts = walker.names, walker.consts
    for i, cell in enumerate(getattr(fn, "__closure__", None) or ()):
        try:
            walker.walk(cell.cell_contents, (("cell", i),), 1)
        except ValueError:
            pass
    glob = getattr(fn, "__globals__", {})
    for n in sorted(names):
        if n in glob:
            walker.walk(glob[n], (("global", n),), 1)
    for i, d in enumerate(getattr(fn, "__defaults__", None) or ()):
        walker.walk(d, (("default", i),), 1)
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            walker.walk(a, (("arg", i),), 1, scalar=False)
    del consts
    return Env(walker.scalars, walker.tensors)


class _Walker:
    def __init__(self, fn: Any) -> None:
        self.names, self.consts = code_names(fn)
        self.scalars: list[tuple[tuple, Any]] = []
        self.tensors: dict[int, list[tuple]] = {}
        self.seen: dict[int, int] = {}
        self.budget = BUDGET

    def walk(self, v: Any, path: tuple, depth: int, scalar: bool = True) -> None:
        self.budget -= 1
        if self.budget < 0:
            return
        if isinstance(v, torch.Tensor):
            self.tensors.setdefault(id(v), []).append(path)
            return
        if isinstance(v, _SCALARS):
            if scalar:
                self.scalars.append((path, v))
            return
        if depth >= DEPTH or self.seen.get(id(v), DEPTH + 1) <= depth:
            return
        self.seen[id(v)] = depth
        for step, child in self._children(v):
            self.walk(child, path + (step,), depth + 1)

    def _children(self, v: Any) -> Iterable[tuple[tuple, Any]]:
        if isinstance(v, types.ModuleType):
            if v.__name__.split(".")[0] in _SKIP_MODULES:
                return
            for n in sorted(self.names):
                child = getattr(v, n, _MISSING)
                if child is not _MISSING:
                    yield ("attr", n), child
            return
        if isinstance(v, types.FunctionType):
            self._learn(v)
            for i, cell in enumerate(v.__closure__ or ()):
                try:
                    yield ("fncell", i), cell.cell_contents
                except ValueError:
                    pass
            for n in sorted(code_names(v)[0]):
                if n in v.__globals__:
                    yield ("global", n), v.__globals__[n]
            return
        if isinstance(v, types.MethodType):
            yield ("attr", "__self__"), v.__self__
            yield ("attr", "__func__"), v.__func__
            return
        if isinstance(v, dict):
            for k in list(v)[:64]:
                if k in self.consts or k in self.names or isinstance(k, int):
                    yield ("item", k), v[k]
            return
        if isinstance(v, (list, tuple)):
            for i, child in enumerate(v[:64]):
                yield ("item", i), child
            return
        if isinstance(v, type) or callable(v) and not hasattr(v, "__dict__"):
            return
        if isinstance(v, torch.nn.Module):
            self._learn(type(v).forward)
        attrs = getattr(v, "__dict__", None)
        if attrs is None:
            return
        for n in sorted(self.names):
            if n in attrs or isinstance(v, torch.nn.Module):
                child = getattr(v, n, _MISSING) if not n.startswith("__") else _MISSING
                if child is not _MISSING and not isinstance(child, types.MethodType):
                    yield ("attr", n), child

    def _learn(self, fn: Callable[..., Any]) -> None:
        """The names a function the code may call mentions: followed from here on too."""
        names, consts = code_names(fn)
        self.names |= names
        self.consts |= consts


# ------------------------------------------------------------------------------ stores
# A traced call that stores a tensor it computes where the caller can reach it
# (``cache["last"] = y``): the decorator finds it after the trace and puts the old object back.

class StoresTensor(Exception):
    """The traced call stored a tensor it computes at ``path``."""

    def __init__(self, path: tuple) -> None:
        super().__init__(f"it stores a tensor it computes at {path_text(path)} (a Python "
                         "object of the caller's, which a graph cannot write)")
        self.path = path


def path_text(path: tuple) -> str:
    return "".join(f"[{key!r}]" if kind == "item" else f".{key}" if kind == "attr" else
                   str(key) if kind == "global" else f"<{kind} {key}>" for kind, key in path)


GONE = object()  # a path that held nothing before the call


def put(fn: Any, args: tuple, path: tuple, value: Any) -> None:
    """Put ``value`` back at ``path`` (an item, attribute or global; ``GONE``: remove it)."""
    kind, key = path[-1]
    parent = resolve(fn, args, path[:-1]) if len(path) > 1 else None
    if kind == "global":
        space = (parent if parent is not None else fn).__globals__
        space.pop(key, None) if value is GONE else space.__setitem__(key, value)
    elif kind == "item":
        parent.pop(key, None) if value is GONE else parent.__setitem__(key, value)
    elif kind == "attr":
        delattr(parent, key) if value is GONE else setattr(parent, key, value)


def reachable(fn: Any, args: tuple) -> dict:
    """Every tensor ``fn`` can reach now, by path."""
    env = environment(fn, args)
    return {p: resolve(fn, args, p) for paths in env.tensors.values() for p in paths}


def trace_tensors_stored(fn: Any, args: tuple) -> list:
    """The paths of tensors of the trace (fake, functional, or wrapped at a level) the traced
    call stored where ``fn`` can reach them (``cache["last"] = y``)."""
    from funcbwd import internals
    from funcbwd.fx.tracer import is_fake

    out = []
    for path, t in reachable(fn, args).items():
        if isinstance(t, torch.Tensor) and (is_fake(t) or internals.is_functional(t)
                                            or internals.dense(t) is not t):
            out.append(path)
    return out


def changed(fn: Any, args: tuple, pre: dict) -> dict:
    """The reachable tensors now at a path that held another object (or none) in ``pre``; a
    computed attribute (a property of the object's class: gpytorch's ``kernel.lengthscale``,
    a new tensor per read) is no store of the call's, and putting it back would run its setter."""
    return {p: t for p, t in reachable(fn, args).items()
            if pre.get(p, GONE) is not t and not _computed(fn, args, p)}


def _computed(fn: Any, args: tuple, path: tuple) -> bool:
    kind, key = path[-1]
    if kind != "attr" or len(path) < 2:
        return False
    descriptor = getattr(type(resolve(fn, args, path[:-1])), key, None)
    return hasattr(descriptor, "__get__") and (hasattr(descriptor, "__set__")
                                               or hasattr(descriptor, "__delete__"))


def put_back(fn: Any, args: tuple, pre: dict) -> None:
    """Every reachable path back to what it held in ``pre`` (:func:`reachable`)."""
    for path in changed(fn, args, pre):
        put(fn, args, path, pre.get(path, GONE))
