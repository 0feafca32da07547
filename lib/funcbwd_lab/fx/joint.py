"""The joint function of a vjp and its graph: ``torch.func.vjp(fn, *primals)[1](cotangents)`` as a
function of flat leaves (:func:`joint_function`; :func:`joint_with_outputs` returns the forward's
outputs too), traced once per signature into a functionalized make_fx graph
(:func:`trace_joint`), and what keys that graph (:func:`function_key`). [traced_backward]
"""

from __future__ import annotations

import dataclasses
import functools
import types
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.fx import elide
from funcbwd_lab.fx import fallback_free
from funcbwd.errors import first_line
from funcbwd.fx.formula_graphs import blank, tensor_spec


# ------------------------------------------------------------------------------ the joint function
def joint_function(fn: Callable, primal_spec: Any, n_primals: int, input_spec: Any,
                   n_inputs: int, cotangent_spec: Any) -> Callable[..., tuple]:
    """``joint(*flat) -> grads (flat)``: ``torch.func.vjp(fn, *primals)[1](cotangents)`` with
    ``fn(*primals, *inputs)``, where ``flat`` is the primals' leaves, the inputs' leaves and the
    cotangents' leaves (rebuilt with the given pytree specs)."""

    def joint(*flat: Any) -> tuple:
        primals = pytree.tree_unflatten(list(flat[:n_primals]), primal_spec)
        inputs = pytree.tree_unflatten(list(flat[n_primals:n_primals + n_inputs]), input_spec)
        cts = pytree.tree_unflatten(list(flat[n_primals + n_inputs:]), cotangent_spec)
        _, vjp_fn = torch.func.vjp(lambda *p: fn(*p, *inputs), *primals)
        return tuple(pytree.tree_leaves(vjp_fn(cts)))

    return joint


def joint_with_outputs(fn: Callable, primal_spec: Any, n_primals: int, input_spec: Any,
                       n_inputs: int, cotangent_spec: Any) -> Callable[..., tuple]:
    """:func:`joint_function` that also returns the forward's tensor outputs, first:
    ``joint(*flat) -> (*outputs, *grads)`` (what is traced; the outputs are then cut out of the
    graph and become its inputs: :func:`funcbwd_lab.fx.fallback_free.forward_outputs_as_inputs`)."""

    def joint(*flat: Any) -> tuple:
        primals = pytree.tree_unflatten(list(flat[:n_primals]), primal_spec)
        inputs = pytree.tree_unflatten(list(flat[n_primals:n_primals + n_inputs]), input_spec)
        cts = pytree.tree_unflatten(list(flat[n_primals + n_inputs:]), cotangent_spec)
        out, vjp_fn = torch.func.vjp(lambda *p: fn(*p, *inputs), *primals)
        return (*tensor_leaves(out), *pytree.tree_leaves(vjp_fn(cts)))

    return joint


def forward_function(fn: Callable, primal_spec: Any, n_primals: int, input_spec: Any,
                     n_inputs: int) -> Callable[..., list]:
    """``forward(*flat) -> the tensor outputs of fn(*primals, *inputs)`` (no grad), for the
    check: the graph takes them as inputs."""

    def forward(*flat: Any) -> list:
        primals = pytree.tree_unflatten(list(flat[:n_primals]), primal_spec)
        inputs = pytree.tree_unflatten(list(flat[n_primals:n_primals + n_inputs]), input_spec)
        with torch.no_grad():
            return tensor_leaves(fn(*primals, *inputs))

    return forward


def tensor_leaves(tree: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


#: id(fn) -> (fn, its key): the function kept alive with its entry, so the id is not reused
_KEYS: dict[int, tuple[Any, Any]] = {}
#: functions whose keys are kept (the oldest half dropped beyond it)
KEYS_KEPT = 512


def function_key(fn: Any) -> Any:
    """:func:`key_of` ``fn``, computed once per function object (a function's key is read when
    it is first seen: rebinding a cell it closes over later is not seen, as with a key by
    identity). Per call: one dict lookup."""
    hit = _KEYS.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    key = _Key(key_of(fn))
    if len(_KEYS) >= KEYS_KEPT:
        for k in list(_KEYS)[: KEYS_KEPT // 2]:
            del _KEYS[k]
    _KEYS[id(fn)] = (fn, key)
    return key


def key_of(fn: Any, _depth: int = 0) -> Any:
    """What determines ``fn``'s graph, as a cache key: a Python function by its code, globals,
    defaults and the cells it closes over (functions among them keyed the same way, scalars by
    value, every other object by identity: a captured tensor is a graph constant); a
    ``functools.partial`` by its function and arguments; a bound method by its function and
    object; anything else by identity. Two closures made by the same ``lambda`` over the same
    objects share a key (a caller building a fresh closure per call still hits the cache);
    another captured object is another key."""
    if _depth > 4:
        return _Identity(fn)
    d = _depth + 1
    if isinstance(fn, functools.partial):
        return ("partial", key_of(fn.func, d), tuple(_value_key(a, d) for a in fn.args),
                tuple(sorted((k, _value_key(v, d)) for k, v in fn.keywords.items())))
    if isinstance(fn, types.MethodType):
        return ("method", key_of(fn.__func__, d), _value_key(fn.__self__, d))
    if isinstance(fn, types.FunctionType):
        cells = tuple(_value_key(c.cell_contents, d) if _filled(c) else ("empty",)
                      for c in (fn.__closure__ or ()))
        defaults = tuple(_value_key(v, d) for v in (fn.__defaults__ or ()))
        kwdefaults = tuple(sorted((k, _value_key(v, d)) for k, v in (fn.__kwdefaults__ or {}).items()))
        return ("function", fn.__code__, _Identity(fn.__globals__), cells, defaults, kwdefaults)
    return _Identity(fn)


class _Key(tuple):
    """A function's key: its hash computed once (the parts hash by Python methods)."""

    def __new__(cls, key: Any) -> "_Key":
        self = super().__new__(cls, (key,))
        self._hash = hash(key)
        return self

    def __hash__(self) -> int:
        return self._hash


class _Identity:
    """An object in a key by identity (kept alive with the key, so its id is not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj


_VALUE_TYPES = (int, str, bool, type(None), complex, torch.dtype, torch.device, torch.layout,
                torch.memory_format)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _value_key(v: Any, depth: int) -> Any:
    if isinstance(v, (types.FunctionType, functools.partial, types.MethodType)):
        return key_of(v, depth)
    if type(v) is float:
        return ("float", v.hex())
    if type(v) in _VALUE_TYPES:
        return (type(v), v)
    if type(v) in (list, tuple) and depth <= 4:
        return (type(v).__name__, tuple(_value_key(x, depth + 1) for x in v))
    return _Identity(v)


def _tensor_positions(flat: Sequence[Any]) -> list[int]:
    return [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]


def trace_joint(joint: Callable[..., tuple], flat: Sequence[Any]) -> torch.fx.GraphModule:
    """make_fx graph of ``functionalize(joint)`` whose placeholders are the tensors of ``flat``
    (fake tensors of their logical shapes, strides and dtypes; the other leaves are baked in),
    traced outside every transform. Tensors ``joint`` captures become constants. Raises what
    tracing raises (a data-dependent op)."""
    flat = list(flat)
    tpos = _tensor_positions(flat)
    specs = [tensor_spec(flat[p]) for p in tpos]  # logical: read before leaving the transforms

    def of_tensors(*tensors: torch.Tensor) -> tuple:
        full = list(flat)
        for p, t in zip(tpos, tensors):
            full[p] = t
        return joint(*full)

    with internals.cleared_functorch_state():
        return internals.fake_trace(torch.func.functionalize(of_tensors), *[blank(s) for s in specs])


# ------------------------------------------------------------------------------ refusals and the check
def _ops(gm: torch.fx.GraphModule) -> list[torch._ops.OpOverload]:
    return [n.target for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def refusal(gm: torch.fx.GraphModule) -> str | None:
    """Why a traced graph (a joint or a forward graph) cannot stand for the eager code, by its
    ops (a random op would draw anew, a mutating one write the caller's tensors), or None."""
    random = sorted({str(t) for t in _ops(gm) if torch.Tag.nondeterministic_seeded in t.tags})
    if random:
        return (f"random op in the forward ({', '.join(random)}): the graph would recompute it "
                "with new random numbers")
    mutating = sorted({str(t) for t in _ops(gm) if t._schema.is_mutable})
    if mutating:
        return f"the function mutates its inputs ({', '.join(mutating)})"
    return None


CHECK_SEED = 0


def check_inputs(flat: Sequence[Any], seed: int = CHECK_SEED, random: bool = True) -> list:
    """Plain leaves of ``flat``'s signature: floating tensors random normal (``random``) or the
    call's per-sample values, other tensors the call's per-sample values (indices, masks stay
    valid), non-tensors as they are."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for a in flat:
        if not isinstance(a, torch.Tensor):
            out.append(a)
            continue
        spec = tensor_spec(a)
        if random and (a.is_floating_point() or a.is_complex()):
            out.append(blank(spec, gen))
            continue
        value, fresh = internals.one_sample(a), blank(spec)  # zeros in the traced layout
        try:
            out.append(fresh.copy_(value))
        except RuntimeError:  # an overlapping layout (stride 0) cannot be written: keep the view
            out.append(value)
    return out


def compare(got: Sequence[Any], want: Sequence[Any]) -> str:
    """'' if ``got`` matches ``want`` (count, shapes, dtypes, values at the dtype's tolerance,
    NaN equal), else the first difference."""
    if len(got) != len(want):
        return f"{len(got)} grads != {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if (tuple(g.shape), g.dtype) != (tuple(w.shape), w.dtype):
            return f"grad {i}: {tuple(g.shape)} {g.dtype} != {tuple(w.shape)} {w.dtype}"
        try:
            torch.testing.assert_close(g, w, equal_nan=True)
        except AssertionError as e:
            return f"grad {i}: values differ ({first_line(str(e), 120)})"
    return ""


def check_graph(run: Callable[[Sequence[Any]], Any], joint: Callable[..., tuple],
                flat: Sequence[Any]) -> tuple[bool, str]:
    """(ok, detail): ``run`` against the eager ``joint`` on :func:`check_inputs` of ``flat``
    (random values; the call's own where the eager vjp raises on them), outside every transform."""
    why = ""
    for random in (True, False):
        where = f"seeded inputs (seed {CHECK_SEED})" if random else "the call's per-sample values"
        with internals.cleared_functorch_state():
            inputs = check_inputs(flat, random=random)
            try:
                want = [w.detach() for w in joint(*inputs)]
            except Exception as e:  # noqa: BLE001 - the eager vjp rejects these values
                why = f"the eager vjp raised on {where}: {type(e).__name__}: {first_line(str(e), 100)}"
                continue
            try:
                with torch.no_grad():
                    got = list(run(inputs))
            except Exception as e:  # noqa: BLE001 - the graph breaks where eager runs
                return False, f"the graph raised on {where}: {type(e).__name__}: {first_line(str(e), 100)}"
        diff = compare(got, want)
        return (not diff), (f"differs from the eager vjp on {where}: {diff}" if diff
                            else f"matches the eager vjp on {where}")
    return False, f"check inconclusive: {why}"


def reshape_views(gm: torch.fx.GraphModule) -> int:
    """Every ``aten.view.default`` of ``gm`` as ``aten.reshape.default``, in place; returns how
    many. make_fx records a ``reshape`` (a C++ formula's, a decomposition's) as the ``view`` it
    took on the trace's unbatched fake tensors, a choice made on their strides. Under vmap an
    intermediate's per-sample strides follow the batched physical tensor (an elementwise op
    keeps a cotangent's batch dim in the middle), so the recorded view can fail where eager's
    reshape copies ("view size is not compatible", stft's backward with in_dims -1). The graph is
    functional (mutating graphs are refused), so a copy instead of a view changes no value, and
    where the view is possible reshape returns that same view."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
            count += 1
    if count:
        gm.recompile()
    return count


# ------------------------------------------------------------------------------ per call
def flatten(tree: Any) -> tuple[list, Any]:
    """(leaves, structure key): a tuple of plain tensors (the common case) keyed by its length
    (an int) without a pytree walk; anything else by its pytree spec's text."""
    if type(tree) is tuple:
        for t in tree:
            if type(t) is not torch.Tensor:
                break
        else:
            return list(tree), len(tree)
    if type(tree) is torch.Tensor:
        return [tree], "tensor"
    leaves, spec = pytree.tree_flatten(tree)
    return leaves, str(spec)


def reduced_to(grad: Any, primal: Any) -> Any:
    """``grad`` summed to ``primal``'s shape where that shape broadcasts to it, else as it is:
    what the autograd engine does to every node's grads (``validate_outputs``), which the graph
    bypasses. The trace's shapes already match; under vmap a batch rule may return a grad of
    another rank than its unbatched op (torch 2.13's ``_cdist_backward`` rule pads an empty
    cdist's grad to ``x1``'s shape with a leading 1), which eager's engine reduces silently."""
    if not (isinstance(grad, torch.Tensor) and isinstance(primal, torch.Tensor)) \
            or grad.shape == primal.shape:
        return grad
    try:
        expandable = torch.broadcast_shapes(primal.shape, grad.shape) == grad.shape
    except RuntimeError:
        return grad
    return grad.sum_to_size(primal.shape) if expandable else grad


def trace_backward(vjp_fn: Callable[[tuple], Any], cotangents: tuple
                   ) -> tuple[torch.fx.GraphModule, elide.ElisionReport]:
    """(graph, elision report) of ONE vjp's backward, traced in real mode on plain
    ``cotangents``: the saved tensors are graph constants, so the graph belongs to those primal
    values. Not what the strategy runs (that is :func:`trace_joint`); kept as the counter-example
    its check must catch (a graph baking the saved tensors) and for the layout tests."""
    def backward(*cts: torch.Tensor) -> Any:
        return vjp_fn(cts)

    with internals.cleared_functorch_state():
        gm = make_fx(torch.func.functionalize(backward, remove="mutations_and_views"),
                     tracing_mode="real")(*cotangents)
    return gm, elide.elide_copies(gm)


# ------------------------------------------------------------------------------ what a signature caches
@dataclasses.dataclass(frozen=True)
class JointGraph:
    """The graph that runs for one signature: ``run(flat) -> grads (flat)``, ``flat`` the
    primals', inputs' and cotangents' leaves, then the forward's tensor outputs."""

    graph: torch.fx.GraphModule
    run: Callable[[Sequence[Any]], Any]
    #: the provenance text: :data:`GRAPH`, or :data:`UNELIDED` when the elided graph was refused
    mechanism: str
    detail: str
    #: what :func:`funcbwd_lab.fx.fallback_free.decompose_fallbacks` did (decomposed, left, probe)
    fallbacks: fallback_free.FallbackReport = fallback_free.FallbackReport()
    #: the graph calls an op of :data:`funcbwd_lab.batching.RULES` (the strategy's scoped rules are
    #: entered around it only then: entering them registers kernels, per call)
    needs_rules: bool = False


@dataclasses.dataclass(frozen=True)
class Refused:
    """A cached negative result: no graph for this signature, and why."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Passthrough:
    """A cached decision not to install a graph: torch's backward, run once under vmap with the
    per-sample fallback disabled, neither fell back nor raised for this signature."""

    reason: str = "torch's backward takes no per-sample fallback here"


@dataclasses.dataclass(frozen=True)
class JointCall:
    """What one signature's graph is built from: ``traced`` (:func:`joint_with_outputs`) is
    traced on ``flat`` (primals', inputs', cotangents' leaves); ``joint`` (grads only) and
    ``forward`` (the outputs) are the eager references of the check; ``outputs``: the call's
    forward outputs (graph inputs); ``batched``: which tensors of ``flat`` + ``outputs`` the call
    batches (the fallback probe batches the same)."""

    traced: Callable[..., tuple]
    joint: Callable[..., tuple]
    forward: Callable[..., list]
    flat: tuple
    outputs: tuple = ()
    batched: tuple = ()
