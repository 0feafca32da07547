"""Formula graphs: a legacy backward formula as FX graphs, once per signature, checked.

The machinery the ``traced`` strategy runs and the graph views (:mod:`funcbwd_lab.studies.graphs.graphs`)
show, in one place:

* **signatures** (:func:`positional_key`, :func:`flatten_args`): what identifies one graph: every
  tensor arg's logical shape, strides, dtype and device, and every other arg's type and value
  (non-tensor args are baked into the graph). :func:`positional_key` is the per-call fast path
  for formulas whose args are tensors, scalars and flat lists of scalars (every catalog formula);
  anything nested goes through a pytree flatten;
* **tracing** (:func:`trace_formula`): ``torch.func.functionalize(formula)`` recorded by
  :mod:`funcbwd.fx.tracer` (the graph ``make_fx`` records, without its one-second first-call
  import of ``torch._dynamo``) on tensors of the signature's logical shapes and strides, outside
  any transform (the caller may be a backward running under vmap). Data-dependent formulas
  (``.item()``, ``nonzero``) raise :class:`DataDependentError`;
* **the graph pair** (:func:`build`): the functionalized graph (its ``select_scatter`` rewritten
  as ``slice_scatter``, whose batched gradient is right: :mod:`funcbwd.fx.select_scatter`; the
  rewrite checked against the trace like the elision below) and a copy with
  :func:`funcbwd.fx.elide.elide_copies` applied, and :func:`check_elision` comparing the two once
  on seeded random inputs of the signature: output values (NaN-equal, exact), shapes, dtypes and
  strides. A pair that differs (or an elided graph that raises) keeps the un-elided graph, with
  the reason in :attr:`FormulaGraph.refusal`. With ``optimize`` (the decorator's graphs) the
  elided graph then goes through :mod:`funcbwd.fx.passes`, each pass checked the same way. The
  chosen graph is compiled once into a plain function (:func:`funcbwd.fx.codegen.compile_graph`).

Check inputs: floating tensors are random normal; integer and bool tensors (indices, masks) must
stay valid for the formula, so they take the real arg's values when it is a plain tensor and zeros
when it is wrapped by a transform (a batched index under ``vmap_all_args``): zeros are valid
indices and masks, but a weaker test of index handling. One seeded draw, not a proof: the graphs'
layout decisions are made on the signature's metadata, so one draw per signature exercises them.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Sequence

import torch
import torch.fx
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd.fx import codegen, elide, passes, tracer
from funcbwd.fx.mask_write import rewrite_mask_writes
from funcbwd.fx.select_scatter import rewrite_select_scatter
from funcbwd.fx.slice_bounds import clamp_slice_ends, detach_random_fills
from funcbwd.fx.tracer import DataDependentError, blank  # noqa: F401 - re-exported

#: (shape, strides, dtype, device) of one tensor arg
TensorSpec = tuple

_SCALARS = frozenset({int, bool, str, type(None), complex, torch.dtype, torch.device,
                      torch.memory_format, torch.layout})
_LIST_ITEMS = _SCALARS | {float}
_INTS = frozenset({int})


def tensor_spec(t: torch.Tensor) -> TensorSpec:
    return (tuple(t.shape), t.stride(), t.dtype, t.device)


# ------------------------------------------------------------------------------ signatures
def _scalar_key(v: Any) -> Any:
    # float by its bits: nan matches nan and -0.0 is not 0.0 (both are baked into the graph)
    return v.hex() if type(v) is float else v


def positional_key(args: Sequence[Any]) -> tuple | None:
    """Signature key of flat positional args (tensors, scalars, flat lists of scalars), or None
    when an arg is anything else (then use :func:`flatten_args`). The type is part of the key:
    ``True``, ``1`` and ``1.0`` hash alike but trace differently. Runs on every call: no pytree."""
    key = []
    for a in args:
        t = type(a)
        if t is torch.Tensor:
            key.append((a.shape, a.stride(), a.dtype, a.device))
        elif t in _SCALARS:
            key.append((t, a))
        elif t is list or t is tuple or t is torch.Size:
            types = frozenset(map(type, a))
            if types <= _INTS:  # sizes, dims: the common case
                key.append((t, tuple(a)))
            elif types <= _LIST_ITEMS:
                key.append((t, tuple(map(type, a)), tuple(map(_scalar_key, a))))
            else:
                return None
        elif t is float:
            key.append((t, a.hex()))
        elif isinstance(a, torch.Tensor):
            key.append((a.shape, a.stride(), a.dtype, a.device))
        else:
            return None
    return tuple(key)


def tensor_positions(args: Sequence[Any]) -> list[int]:
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


@dataclasses.dataclass(frozen=True)
class FlatArgs:
    """A formula's args split into tensor leaves (graph inputs) and everything else (baked in)."""

    tensors: tuple[torch.Tensor, ...]
    key: tuple
    rebuild: Callable[[tuple], tuple]


def _const_key(v: Any) -> tuple:
    try:
        hash(v)
    except TypeError:
        return (type(v).__name__, repr(v))
    return (type(v).__name__, _scalar_key(v))


def flatten_args(args: tuple) -> FlatArgs:
    """Split ``args`` (any pytree); the key identifies one traced graph (as :func:`positional_key`)."""
    leaves, spec = pytree.tree_flatten(args)
    tpos = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    key = (str(spec),) + tuple(
        ("T",) + tensor_spec(leaf) if isinstance(leaf, torch.Tensor) else _const_key(leaf)
        for leaf in leaves)

    def rebuild(tensors: tuple) -> tuple:
        full = list(leaves)
        for p, t in zip(tpos, tensors):
            full[p] = t
        return pytree.tree_unflatten(full, spec)

    return FlatArgs(tuple(leaves[i] for i in tpos), key, rebuild)


# ------------------------------------------------------------------------------ tracing
def trace_formula(formula: Callable[..., Any], args: tuple, *, functionalize: bool = True,
                  elide_copies: bool = False, rewrite_scatters: bool | None = None,
                  fake: bool = False, capture: bool = False, grad_mode: bool | None = None,
                  audit: Callable[[tuple], Any] | None = None) -> torch.fx.GraphModule:
    """Graph of ``formula(*args)`` taking the tensor args (pytree order) as inputs, recorded by
    :func:`funcbwd.fx.tracer.trace` on plain tensors of their logical shapes and strides, outside
    any transform. Raises :class:`DataDependentError` if the formula is data-dependent. ``rewrite_scatters`` (default: ``elide_copies``, i.e. for the graph
    that runs) rewrites ``select_scatter`` as ``slice_scatter``
    (:func:`funcbwd.fx.select_scatter.rewrite_select_scatter`: torch's batched select_scatter has a
    wrong gradient). ``fake``, ``capture``, ``grad_mode``: :func:`funcbwd.fx.tracer.trace`'s;
    ``audit(inputs)``: a mode entered around the formula, inside functionalization."""
    flat = flatten_args(args)
    specs = [tensor_spec(t) for t in flat.tensors]  # logical, read before leaving the transforms

    def flat_formula(*tensors: torch.Tensor) -> Any:
        if audit is None:
            return formula(*flat.rebuild(tensors))
        with audit(tensors):
            return formula(*flat.rebuild(tensors))

    fn = torch.func.functionalize(flat_formula) if functionalize else flat_formula
    with internals.cleared_functorch_state():
        gm = tracer.trace(fn, specs, fake=fake, capture=capture, grad_mode=grad_mode)
    if elide_copies:
        elide.elide_copies(gm)
    if elide_copies if rewrite_scatters is None else rewrite_scatters:
        rewrite_select_scatter(gm)  # after the elision, which sees select_scatter's src as values
    return gm


# ------------------------------------------------------------------------------ the elision check
@dataclasses.dataclass(frozen=True)
class ElisionCheck:
    """The once-per-signature comparison of the elided graph with the un-elided one."""

    ok: bool
    detail: str


def check_inputs(tensors: Sequence[torch.Tensor], seed: int = 0) -> list[torch.Tensor]:
    """Plain inputs of ``tensors``' signature (see the module docstring for the values)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in tensors:
        spec = tensor_spec(t)
        if t.is_floating_point() or t.is_complex():
            out.append(blank(spec, gen))
            continue
        real = t.detach().clone() if internals.is_plain_tensor(t) else None
        out.append(real if real is not None and real.stride() == spec[1] else blank(spec))
    return out


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor{tuple(value.shape)} {value.dtype} strides {value.stride()}"
    return type(value).__name__


def compare_outputs(want: Any, got: Any) -> str:
    """'' if ``got`` equals ``want`` in structure, shapes, dtypes, strides and values (exact,
    NaN-equal), else the first difference."""
    wl, ws = pytree.tree_flatten(want)
    gl, gs = pytree.tree_flatten(got)
    if ws != gs:
        return f"output structure {gs} != {ws}"
    for i, (w, g) in enumerate(zip(wl, gl)):
        if isinstance(w, torch.Tensor) != isinstance(g, torch.Tensor):
            return f"output {i}: {_describe(g)} != {_describe(w)}"
        if not isinstance(w, torch.Tensor):
            if w != g:
                return f"output {i}: {g!r} != {w!r}"
            continue
        if (w.shape, w.dtype, w.stride()) != (g.shape, g.dtype, g.stride()):
            return f"output {i}: {_describe(g)} != {_describe(w)}"
        if not values_equal(w, g):
            return f"output {i}: values differ ({_mismatch(w, g)})"
    return ""


def values_equal(want: torch.Tensor, got: torch.Tensor) -> bool:
    """Exact equality, NaN equal to NaN (``torch.testing.assert_close(rtol=0, atol=0,
    equal_nan=True)``, whose first call imports ``torch.distributed.tensor``: ~2 s)."""
    if torch.equal(want, got):
        return True
    if not (want.is_floating_point() or want.is_complex()):
        return False
    return bool(((want == got) | (want.isnan() & got.isnan())).all())


def _mismatch(want: torch.Tensor, got: torch.Tensor) -> str:
    bad = ~((want == got) | ((want.isnan() & got.isnan()) if want.is_floating_point()
                             or want.is_complex() else torch.zeros_like(want, dtype=torch.bool)))
    n = int(bad.sum())
    if want.is_floating_point() or want.is_complex():
        diff = float((want.double() - got.double()).abs().nan_to_num(float("inf"))[bad].max())
        return f"{n} of {want.numel()} elements, greatest difference {diff:.3g}"
    return f"{n} of {want.numel()} elements"


def _seeded(seed: int):
    """Random ops draw the same numbers in both graphs of a check; the caller's streams (every
    device's) are kept."""
    return internals.rng_forked(seed)


def check_elision(unelided: Callable[..., Any], elided: Callable[..., Any],
                  tensors: Sequence[torch.Tensor], seed: int = 0) -> ElisionCheck:
    """Run both graphs on :func:`check_inputs` of ``tensors`` (outside any transform), each from
    the same random seed (a graph with random ops draws the same numbers in both runs)."""
    with internals.cleared_functorch_state(), torch.no_grad():
        inputs = check_inputs(tensors, seed)
        try:
            with _seeded(seed):
                want = unelided(*inputs)
        except Exception as e:  # noqa: BLE001 - cannot compare: refuse rather than trust
            return ElisionCheck(False, f"inconclusive: the un-elided graph raised "
                                       f"{type(e).__name__}: {first_line(str(e))}")
        try:
            with _seeded(seed):
                got = elided(*inputs)
        except Exception as e:  # noqa: BLE001 - the elision broke the graph
            return ElisionCheck(False, f"the elided graph raised {type(e).__name__}: "
                                       f"{first_line(str(e))}")
        diff = compare_outputs(want, got)
    return ElisionCheck(not diff, diff or f"elided graph matches on seeded inputs (seed {seed})")


# ------------------------------------------------------------------------------ the graph pair
@dataclasses.dataclass
class FormulaGraph:
    """One signature of one formula: both graphs, what elision did, and what runs.

    ``run(args)`` takes the formula's args tuple (positional) and computes ``graph``."""

    functionalized: torch.fx.GraphModule
    elided: torch.fx.GraphModule
    report: elide.ElisionReport
    check: ElisionCheck
    run: Callable[[Sequence[Any]], Any]
    label: str
    #: True if ``run`` calls the ops' public bindings (verified equivalent), False: the overloads
    bindings: bool = False
    #: ``select_scatter`` nodes rewritten as ``slice_scatter`` (in both graphs; checked against the
    #: trace): :mod:`funcbwd.fx.select_scatter`
    scatter_rewrites: int = 0
    #: boolean-mask writes (``index_put``) rewritten as ``where`` in the elided graph (checked):
    #: :mod:`funcbwd.fx.mask_write`
    mask_rewrites: int = 0
    #: the checked graph passes run on the elided graph (``build(optimize=True)``), else None:
    #: :mod:`funcbwd.fx.passes`
    pass_report: passes.PassReport | None = None
    #: the layouts of the tensors the formula captured (``build(capture=True)``): graph inputs
    #: after the arguments; ``run`` takes ``args + captured``
    captured: tuple = ()
    #: the captured tensors themselves, for the caller to locate them (then dropped: a cached
    #: graph never keeps a caller's tensor alive), and where the caller found them
    captured_tensors: tuple = ()
    paths: Any = ()
    #: the graph draws random numbers (vmap's ``randomness="same"`` refuses it on batched inputs)
    random: bool = False
    #: the trace detached what ran under no_grad (forward-mode AD would not: see the decorator)
    no_grad: bool = False

    @property
    def refusal(self) -> str | None:
        """Why the elided graph was refused (the un-elided one runs), or None."""
        return None if self.check.ok else self.check.detail

    @property
    def graph(self) -> torch.fx.GraphModule:
        """The graph ``run`` computes."""
        return self.elided if self.check.ok else self.functionalized


def graph_signature(gm: torch.fx.GraphModule) -> list[tuple]:
    """The graph's calls in order, (kind, target, args with nodes as indices): equal for two
    graphs that run the same ops on the same arguments, whatever their nodes are named."""
    index: dict[torch.fx.Node, int] = {}
    out = []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = i
        args = pytree.tree_map(lambda a: ("node", index[a]) if isinstance(a, torch.fx.Node) else a,
                               (tuple(node.args), dict(node.kwargs)))
        out.append((node.op, None if node.op in ("placeholder", "get_attr") else node.target, args))
    return out


def bindings_equivalent(gm: torch.fx.GraphModule, specs: Sequence[TensorSpec],
                        fake: bool = False) -> bool:
    """Does ``gm`` compiled with public bindings call exactly ``gm``'s ops (overloads, arguments,
    order)? The bindings variant is re-traced on inputs of ``specs`` and its
    :func:`graph_signature` compared with ``gm``'s (re-traced by :func:`funcbwd.fx.tracer.trace`)."""
    if not codegen.has_bindings(gm):
        return False
    run = codegen.compile_graph(gm, range(len(specs)), bindings=True)
    try:
        with internals.cleared_functorch_state():
            traced = tracer.trace(lambda *ts: run(ts), specs, fake=fake)
    except Exception:  # noqa: BLE001 - a binding that cannot even be traced is not equivalent
        return False
    return graph_signature(traced) == graph_signature(gm)


def _runner(gm: torch.fx.GraphModule, args: Sequence[Any], specs: Sequence[TensorSpec], name: str,
            captured: int = 0, fake: bool = False) -> tuple[Callable, bool]:
    """The compiled graph as ``run(args + captured)``."""
    bindings = bindings_equivalent(gm, specs, fake)
    n = len(args)
    if positional_key(args) is not None:
        positions = tensor_positions(args) + list(range(n, n + captured))
        return codegen.compile_graph(gm, positions, name, bindings), bindings
    inner = codegen.compile_graph(gm, range(len(specs)), name, bindings)
    return (lambda a: inner(flatten_args(tuple(a[:n])).tensors + tuple(a[n:]))), bindings


def build(formula: Callable[..., Any], args: Sequence[Any], *, name: str = "formula",
          check: bool = True, optimize: bool = False, **trace: Any) -> FormulaGraph:
    """Trace ``formula`` for ``args``' signature, elide its copies on a copy of the graph,
    rewrite both graphs' ``select_scatter`` (checked against the trace as traced), check the pair
    (unless nothing was elided or ``check`` is False), run the checked graph passes
    (:mod:`funcbwd.fx.passes`) if ``optimize`` (and ``check``) and compile the chosen graph.
    Raises what tracing raises (a data-dependent formula), and :class:`RuntimeError` if the
    rewritten graph differs from the trace (the caller must run neither: the trace's batched
    gradient is wrong). ``trace``: :func:`trace_formula`'s ``fake``, ``capture``, ``grad_mode``,
    ``audit``."""
    with internals.fx_sources_dropped():  # torch.fx would keep every graph's source forever
        return _build(formula, tuple(args), name, check, optimize, trace)


def _build(formula: Callable[..., Any], args: tuple, name: str, check: bool, optimize: bool,
           trace: dict) -> FormulaGraph:
    functionalized = trace_formula(formula, args, **trace)
    # the rest outside every transform: a tensor copied or made here (the graph's deepcopy clones
    # its constants, a pass's index buffer) under a grad transform would be wrapped at that
    # transform's level, dead once this call returns (torch's INTERNAL ASSERT
    # ``level.has_value()`` on the cached graph's next call)
    with internals.cleared_functorch_state():
        captured = tuple(getattr(functionalized, "captured", ()))
        functionalized.captured = ()  # not copied with the graph, not kept by the cache
        tensors = flatten_args(args).tensors + captured
        clamp_slice_ends(functionalized)  # same values; torch's batched slice_scatter needs it
        detach_random_fills(functionalized)  # same values; torch lacks some of their derivatives
        elided = copy.deepcopy(functionalized)
        # first: it sees select_scatter's src as read for values
        report = elide.elide_copies(elided)
        masks = rewrite_mask_writes(elided)  # t[mask] = v as where: checked with the elision
        rewrites = 0
        if elide.count_targets(functionalized, (torch.ops.aten.select_scatter.default,)):
            traced = functionalized
            functionalized = copy.deepcopy(traced)
            rewrites = rewrite_select_scatter(functionalized)
            same = check_elision(traced, functionalized, tensors)
            if not same.ok:
                raise RuntimeError("select_scatter rewritten as slice_scatter differs from the "
                                   f"trace: {same.detail}")
        if not report.count and not masks:
            result = ElisionCheck(True, "nothing elided")
        elif not check:
            result = ElisionCheck(True, "not checked")
        else:
            result = check_elision(functionalized, elided, tensors)
        pass_report = None
        if optimize and check and result.ok:
            elided, pass_report = passes.apply_checked(
                elided, lambda gm: check_elision(functionalized, gm, tensors))
        if rewrites:
            # after the passes, which rebuild writes into fresh zeros
            rewrite_select_scatter(elided)
        chosen = elided if result.ok else functionalized
        label = f"{name}{signature_text(args)}{'' if result.ok else ' un-elided'}"
        run, bindings = _runner(chosen, args, [tensor_spec(t) for t in tensors], label,
                                len(captured), trace.get("fake", False))
        for gm in (functionalized, elided):
            tracer.shed_values(gm)  # the trace's tensors: a cached graph keeps only their layouts
        no_grad = any(n.meta.get("no_grad") for n in functionalized.graph.nodes)
        random = any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                     and torch.Tag.nondeterministic_seeded in n.target.tags
                     for n in chosen.graph.nodes)
        return FormulaGraph(functionalized, elided, report, result, run, label, bindings, rewrites,
                            masks, pass_report, captured=tuple(tensor_spec(t) for t in captured),
                            captured_tensors=captured, random=random, no_grad=no_grad)


def signature_text(args: Sequence[Any], limit: int = 80) -> str:
    """Short text of a signature: tensors by shape and dtype, other args by value, e.g.
    ``[(3,)f32, [3, 5], 1]`` (strides are part of the key, not of this label)."""
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            dtype = str(a.dtype).removeprefix("torch.").replace("float", "f").replace("int", "i")
            parts.append(f"{str(tuple(a.shape)).replace(' ', '')}{dtype}")
        else:
            parts.append(repr(a))
    text = ", ".join(parts)
    return " [" + (text if len(text) <= limit else text[:limit - 3] + "...") + "]"


def formula_args_for(op, sample, grads: tuple | None = None) -> tuple:
    """The args of ``op``'s formula (an OpSpec) for ``sample``: the forward's outputs and (by
    default) ones cotangents; ones tangents of the differentiable args for a jvp-kind op (its
    formula is a forward-mode rule, which takes tangents)."""
    with torch.no_grad():
        outs = op.outputs_tuple(op.torch_op(*sample.args))
    if grads is None and op.kind == "jvp":
        grads = tuple(torch.ones_like(sample.args[p]) for p in sample.diff)
    if grads is None:
        grads = tuple(torch.ones_like(outs[i]) for i in op.diff_outputs)
    return op.formula_args(sample.args, outs, grads)
