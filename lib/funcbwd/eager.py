"""The grad transforms' last resort: the same result computed with eager ``torch.autograd``.

Some functions torch.func cannot run at all, though eager autograd can: they call
``torch.autograd.grad`` or ``requires_grad_()`` inside (zuko's flows), use an old-style
``autograd.Function`` (``forward(ctx, ...)``, no ``setup_context``) or an op with no forward-mode
formula (``grid_sample``, ``_cdist_forward``). For the grad transforms' implementations the mode
routes (``grad_and_value_impl``; ``_vjp_with_argnums``: vjp, jacrev; ``_jvp_with_argnums``: jvp,
jacfwd), :data:`STAGE` runs after torch's own transform and the other stages failed, and only
where the call is outermost (no functorch level around it, :func:`funcbwd.internals.
stack_depth` 0): there a grad transform's answer *is* eager autograd's.

* vjp: the outputs, and a ``vjp_fn`` built on ``torch.autograd.grad`` (``create_graph`` when
  grad mode is on and the outputs reach a tensor of the caller's graph, so ``hessian =
  jacfwd(jacrev(f))`` differentiates through it). torch's ``jacrev`` vmaps it over basis vectors
  (the vmap is routed too; it falls to the per-sample loop over the basis if batched backward
  cannot run).
* jvp: ``J v`` with reverse mode (the function may have no forward-mode formula): the double-vjp
  trick (``v`` pulled back through ``u -> J^T u``), or, where the backward is not differentiable
  (``once_differentiable``, no double backward), one Jacobian row per output element.
* grad_and_value: ``torch.autograd.grad`` of the scalar output.

Under a vmap (``vmap(jacrev(f))``, jacfwd's vmap over basis vectors) the stage does not apply;
the vmap's own per-sample loop stage then runs the transform once per entry, outermost, where it
does. Inputs are made differentiable as ``torch.autograd.functional`` makes them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from typing import Any, Callable, Iterator

import torch
from funcbwd import internals, scope
from funcbwd.errors import user_line

tree_flatten, tree_unflatten = internals.flatten, internals.unflatten
__all__ = ["STAGE", "NotOutermost", "StepsAside", "eager_stage", "loop_entry", "ordered"]

NAME = "eager autograd"


class StepsAside(RuntimeError):
    """The eager run wrote the caller's state inside an entry of the per-sample loop stage, where
    that write would repeat: the other stages decide."""


class NotOutermost(RuntimeError):
    """The eager stage met a functorch level around the call: its answer would not be the
    transform's there (the enclosing vmap's per-sample loop runs it outermost instead)."""


def eager_stage(func: Any, c: Any, journal: Any) -> Any:
    """The stage: ``c`` (a :class:`funcbwd.ladder.TransformCall`) computed with eager autograd."""
    impl = _IMPLS.get(getattr(c, "name", None))
    if impl is None:
        raise NotOutermost(f"{NAME} runs grad transforms only, not {type(c).__name__}")
    if internals.stack_depth():
        raise NotOutermost(f"{NAME} needs the call outermost; it runs under "
                           f"{internals.format_stack()}")
    if torch.is_inference_mode_enabled():  # autograd records nothing there: no eager answer
        raise NotOutermost(f"{NAME} cannot run under torch.inference_mode()")
    # the grad transforms the function calls (hessian's inner jacrev) run outermost too: eager
    # autograd's answer is theirs, and torch's may fail only later (its vjp_fn under jacrev's
    # vmap: torchdiffeq's custom Function's output view written); a vmap they call pushes a
    # level, and what runs under it goes through the mode's ladder as before
    entry = _LOOP_ENTRY.get()
    if entry is None:
        with internals.transforms_routed(lambda original: original, _outermost_eager), \
                scope.entered(retrying=False):
            return impl(func, *c.args, **c.kwargs)
    before = _live_storages()
    token = _WATCHED.set(journal)
    try:
        with internals.transforms_routed(lambda original: original, _outermost_eager), \
                scope.entered(retrying=False):
            out = impl(func, *c.args, **c.kwargs)
    finally:
        _WATCHED.reset(token)
    policy = scope.current().state_writes
    if _wrote_callers(journal, before) and policy != "discard" and (
            entry == "basis" or policy == "refuse"):
        # the other stages decide (as before this stage existed): their refusals name the cause
        raise StepsAside(
            f"the function writes a tensor the caller owns (at {user_line()}) and runs once per "
            f"{'basis vector' if entry == 'basis' else 'entry'} of a vmap here: "
            + ("eager autograd writes it once, jacfwd/hessian would write it once per basis "
               "vector" if entry == "basis" else "each entry would see the ones before")
            + "; state_writes='discard' gives it back as it was")
    return out


def _live_storages() -> dict:
    """The storages of every tensor alive now: what the caller (or anything) owns before the run.
    A write the watch saves into a storage made during the run (torchdiffeq's ``scratch.data[i]
    = v``: a ``.data`` alias of a tensor the function made) is not the caller's."""
    import gc

    out = {}
    for o in gc.get_objects():
        if issubclass(type(o), torch.Tensor):  # not isinstance: a dead weakref.proxy raises
            try:
                storage = internals.dense(o).untyped_storage()
                ptr = storage.data_ptr()
            except Exception:  # noqa: BLE001 - sparse, meta, fake tensors: no caller storage
                continue
            if ptr:
                # held for the run: a tensor freed meanwhile cannot lend its address to a new one
                out[ptr] = storage
    return out


def _wrote_callers(journal: Any, before: dict) -> bool:
    """True if the run wrote a tensor whose storage was alive before it (the journal's saved
    tensors; any stand-in it lent counts)."""
    if journal.has_stand_ins():
        return True
    for t, _ in journal._saved.values():  # the journal's record of the tensors written
        try:
            if internals.dense(t).untyped_storage().data_ptr() in before:
                return True
        except Exception:  # noqa: BLE001 - no storage to tell by: counted as the caller's
            return True
    return False


#: the journal the function's forward runs watched into, in a loop entry (None: unwatched)
_WATCHED: contextvars.ContextVar = contextvars.ContextVar("funcbwd_eager_watched", default=None)


def _forward(func: Callable, *args: Any, **kwargs: Any) -> Any:
    """The function's forward, watched in a loop entry: the caller's tensors it writes saved in
    the journal (:class:`funcbwd.inplace.InplaceMode`). Only the forward: a Python backward
    writing into the gradients autograd's engine hands it (torchdiffeq's adjoint) writes nothing
    of the caller's, but the watch could not tell those tensors from the caller's."""
    journal = _WATCHED.get()
    if journal is None:
        return func(*args, **kwargs)
    from funcbwd.inplace import InplaceMode

    with InplaceMode(watch=True, journal=journal):
        return func(*args, **kwargs)


#: "basis" / "samples" while an entry of the mode's per-sample loop stage runs (None: none)
_LOOP_ENTRY: contextvars.ContextVar = contextvars.ContextVar("funcbwd_eager_entry", default=None)


@contextlib.contextmanager
def loop_entry(basis: bool) -> Iterator[None]:
    """The block is one entry of the per-sample loop stage (:func:`funcbwd.ladder._loop_stage`)
    over basis vectors (jacrev/jacfwd/hessian's) or samples: an eager run there that writes the
    caller's state steps aside for the other stages (the write would repeat per basis vector, or
    per sample under ``state_writes="refuse"``)."""
    token = _LOOP_ENTRY.set("basis" if basis else "samples")
    try:
        yield
    finally:
        _LOOP_ENTRY.reset(token)


def _outermost_eager(original: Callable, name: str) -> Callable:
    def impl(func, *args, **kwargs):
        if internals.stack_depth():
            return original(func, *args, **kwargs)
        with scope.entered(retrying=False):
            return _IMPLS[name](func, *args, **kwargs)

    return impl


# ------------------------------------------------------------------------------ the inputs
def _positions(argnums: Any, n: int) -> list[int] | None:
    if argnums is None:
        return None
    nums = [argnums] if isinstance(argnums, int) else list(argnums)
    return [a + n if a < 0 else a for a in nums]


def _differentiable(p: Any) -> Any:
    """``p`` as ``torch.autograd.functional`` makes an input differentiable."""
    if not isinstance(p, torch.Tensor):
        raise RuntimeError(f"Thing passed to transform API must be Tensor, got {type(p)}")
    if not (p.is_floating_point() or p.is_complex()):
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    return p.view_as(p) if p.requires_grad else p.detach().requires_grad_()


def _diff_args(args: tuple, argnums: Any, as_tuple: bool) -> tuple[tuple, list, Any]:
    """(args with the differentiated ones made differentiable, their flat leaves, the spec of
    the differentiated part as torch slices it)."""
    pos = _positions(argnums, len(args))
    args = list(args)
    for i in range(len(args)) if pos is None else pos:
        flat, spec = tree_flatten(args[i])
        args[i] = tree_unflatten([_differentiable(p) for p in flat], spec)
    if pos is None:
        diff = tuple(args)
    elif isinstance(argnums, int) and not as_tuple:
        diff = args[pos[0]]
    else:
        diff = tuple(args[i] for i in pos)
    leaves, spec = tree_flatten(diff)
    return tuple(args), leaves, spec


def _keeps_graph(outputs: list, private: list) -> bool:
    """True when grad mode is on and ``outputs`` reach a tensor of the caller's autograd graph
    (not only the leaves this stage made): a caller may differentiate the result (hessian)."""
    if not torch.is_grad_enabled():
        return False
    mine = {id(t) for t in private}
    seen, todo = set(), []
    for o in outputs:
        if isinstance(o, torch.Tensor) and o.requires_grad:
            if o.grad_fn is None and id(o) not in mine:
                return True  # a leaf of the caller's
            todo.append(o.grad_fn)
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)  # an AccumulateGrad: a leaf's
        if variable is not None and id(variable) not in mine:
            return True
        todo.extend(n for n, _ in node.next_functions)
    return False


def _grad(outputs: list, inputs: list, cotangents: list | None, *, create_graph: bool,
          retain_graph: bool | None = None) -> list:
    """``torch.autograd.grad`` over the outputs that require grad; zeros for unused inputs."""
    if cotangents is None:
        pairs = [(o, None) for o in outputs if o.requires_grad]
    else:
        pairs = [(o, ct) for o, ct in zip(outputs, cotangents) if o.requires_grad]
    if not pairs:
        return [torch.zeros_like(i) for i in inputs]
    outs = [o for o, _ in pairs]
    cts = None if cotangents is None else [ct for _, ct in pairs]
    got = torch.autograd.grad(outs, inputs, cts, retain_graph=retain_graph,
                              create_graph=create_graph, allow_unused=True)
    return [torch.zeros_like(i) if g is None else g for g, i in zip(got, inputs)]


def _detached(tree: Any, keep: bool) -> Any:
    if keep:
        return tree
    flat, spec = tree_flatten(tree)
    return tree_unflatten([t.detach() if isinstance(t, torch.Tensor) else t for t in flat], spec)


def _split_aux(out: Any, has_aux: bool, api: str) -> tuple[Any, Any]:
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{api}: output of function f should be a tuple: (output, aux) "
                           "if has_aux is True")
    return out


# ------------------------------------------------------------------------------ vjp
def _vjp(func: Callable, *primals: Any, argnums: Any = None, has_aux: bool = False) -> Any:
    with torch.enable_grad():
        args, leaves, primals_spec = _diff_args(primals, argnums, as_tuple=False)
        out, aux = _split_aux(_forward(func, *args), has_aux, "vjp(f, *primals)")
    flat_out, out_spec = tree_flatten(out)
    if not flat_out or not all(isinstance(o, torch.Tensor) for o in flat_out):
        raise RuntimeError("vjp(f, *primals): Expected f to be a function that has non-empty "
                           "output and whose outputs are Tensors")
    keep = _keeps_graph(flat_out, leaves)

    def vjp_fn(cotangents: Any, retain_graph: bool = True, create_graph: bool | None = None):
        if create_graph is None:
            create_graph = torch.is_grad_enabled()
        create_graph = create_graph and keep
        flat_cts, cts_spec = tree_flatten(cotangents)
        if cts_spec != out_spec:
            raise RuntimeError("Expected pytree structure of cotangents to be the same as "
                               "pytree structure of outputs to the function")
        try:
            with torch.enable_grad():
                got = _grad(flat_out, leaves, flat_cts, create_graph=create_graph,
                            retain_graph=retain_graph)
        except Exception as e:
            if internals.stack_depth():
                # batched cotangents (jacrev's vmap over basis vectors): a backward that cannot
                # run batched (a Function's Python backward calling torch.autograd.grad) runs
                # one cotangent at a time in the vmap's per-sample loop, outermost
                e.funcbwd_per_entry = True
            raise
        return tree_unflatten(_detached(got, create_graph), primals_spec)

    vjp_fn.funcbwd_basis = True  # jacrev vmaps it over basis vectors, not samples
    results = _detached(out, keep)
    if has_aux:
        return results, vjp_fn, _detached(aux, keep)
    return results, vjp_fn


# ------------------------------------------------------------------------------ jvp
def _jvp(func: Callable, primals: Any, tangents: Any, argnums: Any = None, *,
         strict: bool = False, has_aux: bool = False) -> Any:
    if not isinstance(primals, tuple):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals to be a tuple")
    flat_tangents, _ = tree_flatten(tangents)
    with torch.enable_grad():
        args, leaves, _ = _diff_args(primals, argnums, as_tuple=True)
        out, aux = _split_aux(_forward(func, *args), has_aux, "jvp(f, primals, tangents)")
    flat_out, out_spec = tree_flatten(out)
    if not flat_out or not all(isinstance(o, torch.Tensor) for o in flat_out):
        raise RuntimeError("jvp(f, primals, tangents): Expected f to be a function that has "
                           "non-empty output and whose outputs are Tensors")
    if len(flat_tangents) != len(leaves):
        raise RuntimeError("jvp(f, primals, tangents): Expected primals and tangents to have "
                           "the same python structure")
    keep = _keeps_graph(flat_out + flat_tangents, leaves)
    with torch.enable_grad():
        try:
            jv = _jv_double_vjp(flat_out, leaves, flat_tangents, keep)
        except _NotTwice:
            jv = _jv_rows(flat_out, leaves, flat_tangents, keep)
    primals_out = _detached(out, keep)
    tangents_out = tree_unflatten(_detached(jv, keep), out_spec)
    if has_aux:
        return primals_out, tangents_out, _detached(aux, keep)
    return primals_out, tangents_out


class _NotTwice(Exception):
    """The backward is not differentiable: ``J v`` by rows instead."""


def _jv_double_vjp(outs: list, xs: list, vs: list, keep: bool) -> list:
    """``J v`` as the derivative of ``u -> J^T u`` (linear in ``u``) along ``v``."""
    diff = [o for o in outs if o.requires_grad]
    if not diff:
        return [torch.zeros_like(o) for o in outs]
    us = [torch.zeros_like(o, requires_grad=True) for o in diff]
    try:
        gs = torch.autograd.grad(diff, xs, us, create_graph=True, allow_unused=True)
        pairs = [(g, v) for g, v in zip(gs, vs) if g is not None]
        # every gradient must be a recorded function of u, else the backward is not differentiable
        if any(g.grad_fn is None for g, _ in pairs):
            raise _NotTwice()
        if not pairs:
            jv = [None] * len(us)
        else:
            jv = torch.autograd.grad([g for g, _ in pairs], us, [v for _, v in pairs],
                                     create_graph=keep, allow_unused=True)
    except RuntimeError as e:
        raise _NotTwice() from e
    jv = [torch.zeros_like(u) if j is None else j for j, u in zip(jv, us)]
    if not _certified(diff, xs, vs, jv):
        raise _NotTwice()
    jv = iter(jv)
    out = []
    for o in outs:
        if o.requires_grad:
            out.append(next(jv))
        else:
            out.append(torch.zeros_like(o))
    return out


def _certified(outs: list, xs: list, vs: list, jv: list) -> bool:
    """``r . (J v) == (J^T r) . v`` for a random ``r`` (one ordinary backward): the double-vjp
    is silently wrong where part of the backward is not recorded as a function of ``u``
    (``once_differentiable`` detaches its outputs; a Python backward may ``.detach()``), and that
    part then drops out of ``J v`` but not out of ``J^T r``. A mismatch beyond rounding: rows.
    ``r`` comes from a generator of its own (the caller's random state is not drawn from)."""
    if any(o.is_complex() for o in outs):
        return False
    gen = torch.Generator(device=outs[0].device).manual_seed(0)
    rs = [torch.randn(o.shape, generator=gen, dtype=o.dtype, device=o.device) for o in outs]
    jtr = torch.autograd.grad(outs, xs, rs, retain_graph=True, allow_unused=True)
    with torch.no_grad():
        left = [(r * w.detach()).sum() for r, w in zip(rs, jv)]
        right = [(j * v.detach()).sum() for j, v in zip(jtr, vs) if j is not None]
        lhs, rhs = sum(left, torch.zeros(())), sum(right, torch.zeros(()))
        scale = sum((t.abs() for t in left + right), torch.zeros(()))
        tol = torch.finfo(outs[0].dtype).eps ** 0.5
        return bool(torch.isfinite(lhs) & torch.isfinite(rhs)) and \
            float((lhs - rhs).abs()) <= tol * (float(scale) + 1e-30)


def _jv_rows(outs: list, xs: list, vs: list, keep: bool) -> list:
    """``J v`` one Jacobian row (one output element's gradient) at a time."""
    out = []
    for o in outs:
        if not o.requires_grad:
            out.append(torch.zeros_like(o))
            continue
        flat = o.reshape(-1)
        entries = []
        for k in range(flat.numel()):
            row = torch.autograd.grad(flat[k], xs, retain_graph=True, create_graph=keep,
                                      allow_unused=True)
            terms = [(r * v).sum() for r, v in zip(row, vs) if r is not None]
            entries.append(sum(terms) if terms else flat.new_zeros(()))
        out.append(torch.stack(entries).reshape(o.shape) if entries else torch.zeros_like(o))
    return out


# ------------------------------------------------------------------------------ grad
def _grad_and_value(func: Callable, argnums: Any, has_aux: bool, args: tuple,
                    kwargs: dict) -> Any:
    with torch.enable_grad():
        args, leaves, spec = _diff_args(args, argnums, as_tuple=False)
        output, aux = _split_aux(_forward(func, *args, **kwargs), has_aux,
                                 "grad_and_value(f)(*args)")
        if not isinstance(output, torch.Tensor):
            raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a Tensor, "
                               f"got {type(output)}")
        if output.dim() != 0:
            raise RuntimeError("grad_and_value(f)(*args): Expected f(*args) to return a scalar "
                               f"Tensor, got tensor with {output.dim()} dims")
        keep = _keeps_graph([output], leaves)
        grads = _grad([output], leaves, None, create_graph=keep)
    grad_input = tree_unflatten(_detached(grads, keep), spec)
    output = _detached(output, keep)
    if has_aux:
        return grad_input, (output, _detached(aux, keep))
    return grad_input, output


_IMPLS = {"_vjp_with_argnums": _vjp, "_jvp_with_argnums": _jvp,
          "grad_and_value_impl": _grad_and_value}


@dataclasses.dataclass(frozen=True)
class _Stage:  # the fields of funcbwd.ladder.Stage (ladder imports this module)
    name: str
    run: Callable[[Any, Any, Any], Any]
    doc: str


#: tried for a grad transform's call after torch's own failed (funcbwd.ladder._attempts)
STAGE = _Stage(NAME, eager_stage, "the grad transform with eager torch.autograd (outermost)")


def ordered(stages: tuple) -> tuple:
    """The stages for a grad transform's call: :data:`STAGE` first where the call is outermost
    (the other stages may answer yet hand back a ``vjp_fn`` that fails later under jacrev's vmap:
    zuko's ``GaussLegendre``), last otherwise and in an entry of a loop over basis vectors (an
    eager run there wrote a module's queue once per basis vector: tests/test_tool_contract_mode)."""
    first = not internals.stack_depth() and _LOOP_ENTRY.get() != "basis"
    return (STAGE, *stages) if first else (*stages, STAGE)
