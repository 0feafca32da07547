"""The caller's state: its objects (snapshot, restore, compare) and every device's random state.

:func:`snapshot` records the objects a caller passes (tensors, modules, dicts, lists, tuples,
``torch.Generator``\\ s, nested) by identity and value; :meth:`Snapshot.restore` puts back the
same objects with the recorded values (a dict's entries, a list's items and a module's
parameters, buffers and plain attributes rebound to the objects they held, every tensor's
contents copied back in place); :meth:`Snapshot.difference` says where two snapshots of the same
objects differ ("" when they agree: tensors within :func:`funcbwd.tolerances.tolerance`, other
values equal).

:func:`random_state` is every random generator the process has started: the CPU generator and
each initialized accelerator's (one entry per :data:`RANDOM_SOURCES` source that is active),
and :func:`set_random_state` puts them back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import torch

from funcbwd.compare import ToleranceFor, compare


# ------------------------------------------------------------------------------ random state
@dataclasses.dataclass(frozen=True)
class RandomSource:
    """One device's generators: ``active()`` (started in this process), ``get()``, ``put()``."""

    name: str
    active: Callable[[], bool]
    get: Callable[[], Any]
    put: Callable[[Any], None]


def _accelerator(name: str) -> RandomSource:
    def module():
        return getattr(torch, name)

    def active() -> bool:
        mod = getattr(torch, name, None)
        if mod is None:
            return False
        if hasattr(mod, "is_initialized"):
            return bool(mod.is_initialized())
        return name == "mps" and torch.backends.mps.is_available()

    def get() -> Any:
        m = module()
        return m.get_rng_state_all() if hasattr(m, "get_rng_state_all") else [m.get_rng_state()]

    def put(states: Any) -> None:
        m = module()
        if hasattr(m, "set_rng_state_all"):
            m.set_rng_state_all(states)
        else:
            m.set_rng_state(states[0])

    return RandomSource(name, active, get, put)


#: the generators :func:`random_state` covers (a test may add a source of its own)
RANDOM_SOURCES: list[RandomSource] = [
    RandomSource("cpu", lambda: True, torch.get_rng_state, torch.set_rng_state),
    *(_accelerator(n) for n in ("cuda", "xpu", "mtia", "mps")),
]


def random_state() -> dict[str, Any]:
    """Every active source's state, by name."""
    return {s.name: s.get() for s in RANDOM_SOURCES if s.active()}


def set_random_state(state: Mapping[str, Any]) -> None:
    by_name = {s.name: s for s in RANDOM_SOURCES}
    for name, value in state.items():
        by_name[name].put(value)


def _same_bytes(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
            and all(_same_bytes(x, y) for x, y in zip(a, b)))


def random_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """The devices whose random state differs between ``a`` and ``b`` ("" when none)."""
    names = sorted(set(a) | set(b))
    bad = [n for n in names if n not in a or n not in b or not _same_bytes(a[n], b[n])]
    return f"random state of {', '.join(bad)}" if bad else ""


# ------------------------------------------------------------------------------ objects
@dataclasses.dataclass
class _Node:
    kind: str  # tensor, escaped tensor, generator, dict, list, tuple, module, attrs, value
    obj: Any
    value: Any  # a tensor's clone, a generator's state, children, or the value itself


def _plain(key: str, value: Any) -> bool:
    """A module attribute the caller's state includes: public, data (not a method or module)."""
    return not key.startswith("_") and isinstance(value, (torch.Tensor, int, float, bool, str,
                                                          type(None), dict, list, tuple))


def _snap(obj: Any) -> _Node:
    if isinstance(obj, torch.Tensor):
        try:
            return _Node("tensor", obj, obj.detach().clone())
        except RuntimeError:  # a transform's tensor kept after it ended: no value to read
            return _Node("escaped tensor", obj, None)
    if isinstance(obj, torch.Generator):
        return _Node("generator", obj, obj.get_state())
    if isinstance(obj, torch.nn.Module):
        return _Node("module", obj, {name: _Node("attrs", m, {
            **{f"param {k}": _snap(v) for k, v in m._parameters.items()},
            **{f"buffer {k}": _snap(v) for k, v in m._buffers.items()},
            **{k: _snap(v) for k, v in vars(m).items() if _plain(k, v)}})
            for name, m in obj.named_modules()})
    if isinstance(obj, dict):
        return _Node("dict", obj, {k: _snap(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return _Node(type(obj).__name__, obj, [_snap(v) for v in obj])
    return _Node("value", obj, obj)


def _restore(node: _Node) -> None:
    kind, obj, value = node.kind, node.obj, node.value
    if kind == "escaped tensor":
        return
    if kind == "tensor":
        with torch.inference_mode() if obj.is_inference() else torch.no_grad():
            if obj.shape != value.shape or obj.dtype != value.dtype:
                obj.set_(value.clone())
            else:
                obj.copy_(value)
    elif kind == "generator":
        obj.set_state(value)
    elif kind == "dict":
        obj.clear()
        obj.update({k: v.obj for k, v in value.items()})
    elif kind == "list":
        obj[:] = [v.obj for v in value]
    elif kind == "attrs":
        for k in [k for k, v in vars(obj).items() if _plain(k, v) and k not in value]:
            del obj.__dict__[k]  # an attribute the call added
        for k, v in value.items():
            if k.startswith("param "):
                obj._parameters[k[6:]] = v.obj
            elif k.startswith("buffer "):
                obj._buffers[k[7:]] = v.obj
            else:
                obj.__dict__[k] = v.obj
    for child in (value.values() if kind in ("dict", "attrs", "module") else
                  value if kind in ("list", "tuple") else ()):
        _restore(child)


def _values_differ(a: Any, b: Any, tol: ToleranceFor | None) -> str:
    if isinstance(a, float) and isinstance(b, (float, int)):  # a float read out of a tensor
        c = compare([torch.tensor(float(b))], [torch.tensor(a)], tol)
        return "" if c.ok else f"{b!r} != {a!r}"
    return "" if type(a) is type(b) and a == b else f"{b!r} != {a!r}"


def _a(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _diff(a: _Node, b: _Node, where: str, tol: ToleranceFor | None) -> str:
    """Where ``b`` (actual) differs from ``a`` (expected), first difference only."""
    if a.kind != b.kind:
        return f"{where}: holds {_a(b.kind)} where the loop leaves {_a(a.kind)}"
    if a.kind == "tensor":
        c = compare([b.value], [a.value], tol)
        return "" if c.ok else f"{where}: {c.detail.removeprefix('output 0: ')}"
    if a.kind == "escaped tensor":
        return ""  # both escaped: nothing more to compare
    if a.kind == "generator":
        return "" if torch.equal(a.value, b.value) else f"{where}: generator state"
    if a.kind == "value":
        d = _values_differ(a.value, b.value, tol)
        return f"{where}: {d}" if d else ""
    if a.kind in ("dict", "attrs", "module"):
        if set(a.value) != set(b.value):
            return f"{where}: keys {sorted(map(str, b.value))} != {sorted(map(str, a.value))}"
        name = {"dict": lambda k: f"{where}[{k!r}]", "module": lambda k: ".".join(
            p for p in (where, k) if p), "attrs": lambda k: f"{where}.{k.split()[-1]}"}[a.kind]
        pairs = [(name(k), a.value[k], b.value[k]) for k in a.value]
    else:
        if len(a.value) != len(b.value):
            return f"{where}: length {len(b.value)} != {len(a.value)}"
        pairs = [(f"{where}[{i}]", x, y) for i, (x, y) in enumerate(zip(a.value, b.value))]
    return next((d for w, x, y in pairs if (d := _diff(x, y, w, tol))), "")


class Snapshot:
    """Named objects' identities and values at one moment (see the module docstring)."""

    def __init__(self, objects: Mapping[str, Any]):
        self.nodes = {name: _snap(obj) for name, obj in objects.items()}

    def restore(self) -> None:
        for node in self.nodes.values():
            _restore(node)

    def difference(self, actual: "Snapshot", tol: ToleranceFor | None = None) -> str:
        """Where ``actual`` differs from this one, taken as expected ("" when it agrees)."""
        return next((d for name, node in self.nodes.items()
                     if (d := _diff(node, actual.nodes[name], name, tol))), "")


def snapshot(objects: Mapping[str, Any]) -> Snapshot:
    return Snapshot(objects)
