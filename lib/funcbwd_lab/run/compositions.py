"""functorch's transform compositions over one OpInfo sample, as pure builders for a cell engine.

PyTorch's ``test/functorch/test_ops.py`` (pytorch/pytorch @ 28a580b0, helpers in
``test/functorch/common_utils.py`` @ 1ed400c2; see ``funcbwd_lab.studies.coverage.upstream.SOURCE``)
checks five compositions of transforms on every OpInfo sample. Each builder here returns what that
test vmaps, built the way upstream builds it (same flattening, same primals, same order of random
cotangents/tangents, drawn from the caller's seeded ``torch.Generator`` instead of the global
RNG); ``docs/compositions.md`` says what each computes and how upstream checks it.

An engine calls: ``c = BUILDERS[name](op, sample, generator, name=opinfo.name)``; then for each
``in_dims in c.in_dims()`` (every choice upstream's generator makes, no cap:
:func:`exhaustive_in_dims`), ``actual, expected = c.run(in_dims, entries, vjp=strategy.vjp)``
(plus, for the vmap-outside ones, ``c.nested(...)``: the vmap-of-vmap check) and compares them.
``entries[k]`` is the list of batch entries of ``c.tensors()[k]``: the engine makes them
(``funcbwd_lab.run.entries.distinct_entries`` for distinct values, :func:`copies` for upstream's way).

Where funcbwd differs from upstream: ``expected`` is a real per-sample loop over the entries
(upstream's entries are copies, so it expands the one unbatched result); every call works on fresh
clones of the sample's tensors and kwargs (an op updating one in place, e.g. batch norm's running
stats, cannot leak into the next call); values are detached (which args are primals still follows
the sample's ``requires_grad``); ``vjpvmap`` draws its cotangent once, not once per choice.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from torch.utils import _pytree as pytree

from funcbwd.errors import BadInputError
from funcbwd_lab.run.entries import stacked
from funcbwd_lab.run.vmap_inputs import (BATCH_NORM_OPS, UPSTREAM_BATCH, bdim_choices,  # noqa: F401
                                     copies, exhaustive_in_dims, is_batch_norm_training,
                                     vmap_of_vmap)



# ------------------------------------------------------------------------------ building blocks
def _fresh(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, tree)


def _randn_like(tree: Any, g: torch.Generator) -> Any:
    """torch.randn_like over a pytree, from ``g``, drawn in logical (row-major) order: the values
    must not depend on the layout, or a vmapped output (batch dim moved to the front, a permuted
    layout) and the per-sample loop's stacked one would get different cotangents."""
    return pytree.tree_map(lambda x: torch.randn(x.shape, generator=g, dtype=x.dtype), tree)


def _primal_positions(flat: Sequence[Any], by: str) -> list[int]:
    """test_ops.diff_arg over flat leaves: ``requires_grad`` ones, or (``by="dtype"``, for the
    jvp tests' ``requires_grad=False``) floating and complex tensors."""
    return [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor) and (
        a.requires_grad if by == "requires_grad" else a.is_floating_point() or a.is_complex())]


def _normalized(op: Callable, flat: Sequence[Any], spec: Any, kwargs: dict, process: Callable | None,
                primal_at: Sequence[int]) -> Callable:
    """test_ops.normalize_op_input_output{,2,3}: ``f(*primals)`` puts the primals back at
    ``primal_at`` among the flat leaves, calls ``op(*args, **kwargs)``, applies the sample's
    ``output_process_fn_grad`` and keeps the floating outputs of a tuple result."""
    def f(*primals: Any) -> Any:
        leaves = list(flat)
        for i, p in zip(primal_at, primals):
            leaves[i] = p
        out = op(*pytree.tree_unflatten(leaves, spec), **_fresh(kwargs))
        if process is not None:
            out = process(out)
        if isinstance(out, tuple):
            out = tuple(r for r in out if torch.is_floating_point(r) or torch.is_complex(r))
            if not out:
                raise BadInputError("the op returned no floating-point output")
        return out
    return f


_leaves = pytree.tree_leaves


def closure_vjp(fn: Callable, *primals: Any, inputs: Sequence[Any] = ()) -> tuple:
    """``torch.func.vjp`` of ``fn(*primals, *inputs)`` w.r.t. ``primals`` (``inputs`` fixed): the
    signature every strategy's ``vjp`` has, for the references."""
    inputs = tuple(inputs)
    return torch.func.vjp(lambda *p: fn(*p, *inputs), *primals)


# ------------------------------------------------------------------------------ the built object
@dataclasses.dataclass(frozen=True)
class Composition:
    """What one composition vmaps for one sample. ``args``: the flat args (sample values,
    detached; non-tensors included where upstream passes them); ``roles[i]``: "primal", "input"
    (a tensor not differentiated, e.g. an index), "constant" (not a tensor), "cotangent",
    "cotangent2", "tangent", "primal_tangent" or "cotangent_tangent"; ``make(vjp, jvp)`` returns
    ``f(*args) -> tuple of tensors``; ``top_level``: the test's unflattened args (batch-norm rule)."""

    name: str
    args: tuple
    roles: tuple[str, ...]
    make: Callable[[Callable, Callable], Callable]
    batch_norm_and_training: bool = False
    top_level: tuple | None = None

    def function(self, vjp: Callable | None = None, jvp: Callable = torch.func.jvp) -> Callable:
        if vjp is None or vjp is torch.func.vjp:  # the plain one takes no ``inputs``
            vjp = closure_vjp
        return self.make(vjp, jvp)

    def tensor_positions(self) -> list[int]:
        return [i for i, a in enumerate(self.args) if isinstance(a, torch.Tensor)]

    def tensors(self) -> list[torch.Tensor]:
        """The values the engine makes batch entries of (``entries[k]`` for ``tensors()[k]``)."""
        return [self.args[i] for i in self.tensor_positions()]

    def in_dims(self) -> list[tuple]:
        return exhaustive_in_dims(self.args, batch_norm_and_training=self.batch_norm_and_training,
                                  top_level=self.top_level)

    def entry_args(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]], b: int) -> list:
        """The unbatched args of entry ``b`` (an unbatched arg is the sample's value), fresh."""
        out = list(self.args)
        for k, i in enumerate(self.tensor_positions()):
            out[i] = (entries[k][b] if in_dims[i] is not None else self.args[i]).detach().clone()
        return out

    def batched(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]]) -> list:
        """The vmap args for ``in_dims``: entries stacked at their dim, fresh clones elsewhere."""
        out = list(self.args)
        for k, i in enumerate(self.tensor_positions()):
            out[i] = stacked(entries[k], in_dims[i]) if in_dims[i] is not None else self.args[i].clone()
        return out

    def run(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]], *,
            vjp: Callable | None = None, jvp: Callable = torch.func.jvp,
            vmap: Callable = torch.func.vmap, transform: Callable = lambda c: c) -> tuple[tuple, tuple]:
        """(actual, expected): ``vmap(function(vjp, jvp), in_dims)`` of the batched args (through
        ``transform``, a strategy's hook), and the per-sample loop of torch.func's composition."""
        f = self.function(vjp, jvp)
        actual = transform(lambda *a: vmap(f, in_dims=tuple(in_dims), out_dims=0)(*a))(
            *self.batched(in_dims, entries))
        return tuple(_leaves(actual)), self.expected(in_dims, entries)

    def actual(self, in_dims: Sequence, batched: Sequence[Any], *, vjp: Callable | None = None,
               jvp: Callable = torch.func.jvp, transform: Callable = lambda c: c) -> tuple:
        """The vmapped composition of :meth:`batched` args, through ``transform`` (a strategy's
        hook), as flat output leaves."""
        f = self.function(vjp, jvp)
        return tuple(_leaves(transform(lambda *a: torch.func.vmap(f, in_dims=tuple(in_dims),
                                                                  out_dims=0)(*a))(*batched)))

    def nested_actual(self, in_dims: Sequence, batched: Sequence[Any], batch: int, *,
                      vjp: Callable | None = None, jvp: Callable = torch.func.jvp,
                      transform: Callable = lambda c: c) -> tuple:
        """The vmap-of-vmap call of :func:`vmap_of_vmap` on :meth:`batched` args (it must equal
        the per-sample loop with a size-1 dim inserted at 1)."""
        f = self.function(vjp, jvp)
        inner = torch.func.vmap(lambda dummy, *a: f(*a), in_dims=(0,) + (None,) * len(in_dims))
        outer = torch.func.vmap(inner, in_dims=(0,) + tuple(in_dims))
        return tuple(_leaves(transform(outer)(torch.ones(batch, 1), *batched)))

    def expected(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]]) -> tuple:
        ref = self.function()
        batch = len(entries[0]) if entries else 1
        rows = [_leaves(ref(*self.entry_args(in_dims, entries, b))) for b in range(batch)]
        return tuple(torch.stack(col) for col in zip(*rows))

    def nested(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]], *,
               vjp: Callable | None = None, jvp: Callable = torch.func.jvp,
               vmap: Callable = torch.func.vmap) -> tuple[tuple, tuple]:
        """(actual, expected) of :func:`vmap_of_vmap` for this choice."""
        nested, expected = vmap_of_vmap(self.function(vjp, jvp), in_dims,
                                        self.batched(in_dims, entries), len(entries[0]), vmap=vmap)
        return tuple(_leaves(nested)), tuple(_leaves(expected))


def _flat_sample(sample: Any, by: str = "requires_grad") -> tuple[list, Any, dict, list[int]]:
    """(flat leaves of ``(input, *args)``, detached; their spec; kwargs; primal positions)."""
    flat, spec = pytree.tree_flatten((sample.input, *sample.args))
    at = _primal_positions(flat, by)
    return [a.detach() if isinstance(a, torch.Tensor) else a for a in flat], spec, dict(sample.kwargs), at


def _roles(flat: Sequence[Any], at: Sequence[int]) -> tuple[str, ...]:
    return tuple("primal" if i in at else "input" if isinstance(a, torch.Tensor) else "constant"
                 for i, a in enumerate(flat))


# ------------------------------------------------------------------------------ the builders
def vmapvjp(op: Callable, sample: Any, g: torch.Generator, *, name: str = "") -> Composition:
    """test_vmapvjp: ``get_sample_cotangents`` draws one randn cotangent per output of the
    normalized op; ``get_vjp_fn_and_args_with_cotangents`` vmaps ``f(*flat sample args, *flat
    cotangents) = vjp_fn(cotangents)`` of the op in its primals (the ``requires_grad`` leaves of
    the sample). Every tensor leaf is batched: primals, indices, masks and cotangents."""
    flat, spec, kwargs, at = _flat_sample(sample)
    process = sample.output_process_fn_grad
    with torch.no_grad():
        out = _normalized(op, flat, spec, kwargs, process, at)(*[flat[i] for i in at])
    (cts, ct_spec), n = pytree.tree_flatten(_randn_like(out, g)), len(flat)

    other = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor) and i not in at]
    # the non-differentiated tensors (indices, masks: batched too) go to ``vjp`` as ``inputs``,
    # not captured by the function: a strategy may make them graph inputs. Every tensor leaf is
    # an argument, so ``fn`` is built once (the sample's constants only), not per call: a
    # strategy that caches per function (traced_backward) would otherwise re-trace every call
    fn = _normalized(op, flat, spec, kwargs, process, list(at) + other)

    def make(vjp: Callable, jvp: Callable) -> Callable:
        def f(*xs: Any) -> tuple:
            _, vjp_fn = vjp(fn, *[xs[i] for i in at], inputs=[xs[i] for i in other])
            return tuple(vjp_fn(pytree.tree_unflatten(list(xs[n:]), ct_spec)))
        return f

    roles = _roles(flat, at) + ("cotangent",) * len(cts)
    return Composition("vmapvjp", tuple(flat) + tuple(cts), roles, make,
                       is_batch_norm_training(name, kwargs))


def _vjp_full(fn: Callable, k: int, single: bool, vjp: Callable) -> Callable:
    """test_ops._get_vjpfull_variant: ``h(*primals, *cts) = vjp_fn(cts)`` (one cotangent, not a
    tuple, for a single-tensor output)."""
    def h(*a: Any) -> Any:
        _, vjp_fn = vjp(fn, *a[:k])
        return vjp_fn(a[k] if single else tuple(a[k:]))
    return h


def vmapvjpvjp(op: Callable, sample: Any, g: torch.Generator, *, name: str = "") -> Composition:
    """test_vmapvjpvjp: ``get_vjpfull_variant`` makes ``h(*primals, *cts) = vjp_fn(cts)`` (cts:
    randn per output of the normalized op); its result ``grads`` gets randn cotangents ``cts2``; the
    vmapped ``vjp_of_vjp(*primals, *cts, *cts2)`` returns ``(*grads, *vjp of h at cts2)``. Only the
    primals and cotangents are args: an index or mask stays a constant of the op (unbatched)."""
    flat, spec, kwargs, at = _flat_sample(sample)
    fn = _normalized(op, flat, spec, kwargs, sample.output_process_fn_grad, at)
    primals = tuple(flat[i] for i in at)
    with torch.no_grad():
        out = fn(*primals)
    single = isinstance(out, torch.Tensor)
    cts = _randn_like(out, g)
    cts = cts if isinstance(cts, tuple) else (cts,)  # test_ops._as_tuple: a list stays one arg
    top = primals + cts
    flat_top, top_spec = pytree.tree_flatten(top)
    k, n = len(primals), len(flat_top)
    cts2 = tuple(_leaves(_randn_like(_leaves(_vjp_full(fn, k, single, torch.func.vjp)(*top)), g)))

    def make(vjp: Callable, jvp: Callable) -> Callable:
        h = _vjp_full(fn, k, single, vjp)

        def f(*xs: Any) -> tuple:
            grads, vjp_fn = vjp(h, *pytree.tree_unflatten(list(xs[:n]), top_spec))
            return (*_leaves(grads), *_leaves(vjp_fn(tuple(xs[n:]))))
        return f

    roles = ("primal",) * k + ("cotangent",) * (n - k) + ("cotangent2",) * len(cts2)
    return Composition("vmapvjpvjp", tuple(flat_top) + cts2, roles, make,
                       is_batch_norm_training(name, kwargs), top_level=top + cts2)


def vmapjvpvjp(op: Callable, sample: Any, g: torch.Generator, *, name: str = "") -> Composition:
    """test_vmapjvpvjp: randn ``cts`` per output, then ``p_tangents`` per primal, then
    ``ct_tangents`` per cotangent; the vmapped function of the flat
    ``((primals, cts), (p_tangents, ct_tangents))`` is ``jvp(push_vjp, (primals, cts), (p_tangents,
    ct_tangents))`` with ``push_vjp(primals, cts) = vjp_fn(cts)``, returning the flat primal outs
    then the flat tangent outs. Upstream passes the OpInfo (not its name) to
    ``is_batch_norm_training`` here, so the batch-norm rule never applies (reproduced)."""
    flat, spec, kwargs, at = _flat_sample(sample)
    fn = _normalized(op, flat, spec, kwargs, sample.output_process_fn_grad, at)
    primals = tuple(flat[i] for i in at)
    with torch.no_grad():
        out = fn(*primals)
    cts = _randn_like(out, g)
    p_tan = _randn_like(primals, g)  # then a tangent per cotangent: upstream's order of draws
    ct_tan = _randn_like(cts, g)
    args, tree = pytree.tree_flatten(((primals, cts), (p_tan, ct_tan)))

    def make(vjp: Callable, jvp: Callable) -> Callable:
        def push_vjp(p: tuple, c: Any) -> Any:
            return vjp(fn, *p)[1](c)

        def f(*xs: Any) -> tuple:
            prim, tan = pytree.tree_unflatten(list(xs), tree)
            p_out, t_out = jvp(push_vjp, prim, tan)
            return (*_leaves(p_out), *_leaves(t_out))
        return f

    n_p, n_c = len(primals), len(_leaves(cts))
    roles = ("primal",) * n_p + ("cotangent",) * n_c + ("primal_tangent",) * n_p \
        + ("cotangent_tangent",) * n_c
    return Composition("vmapjvpvjp", tuple(args), roles, make, False)


def vmapjvpall(op: Callable, sample: Any, g: torch.Generator, *, name: str = "") -> Composition:
    """test_vmapjvpall (samples made with ``requires_grad=False``):
    ``get_jvp_variant_primals_tangents`` takes every floating/complex tensor leaf as a primal,
    draws a randn tangent per primal and vmaps ``f(*primals, *tangents) = (*outs, *tangent outs)``
    of ``jvp`` (flattened). Non-floating tensors (indices) stay constants of the op."""
    flat, spec, kwargs, at = _flat_sample(sample, "dtype")
    fn = _normalized(op, flat, spec, kwargs, sample.output_process_fn_grad, at)
    primals = tuple(flat[i] for i in at)
    tangents = _randn_like(primals, g)
    k = len(primals)

    def make(vjp: Callable, jvp: Callable) -> Callable:
        def f(*xs: Any) -> tuple:
            p_out, t_out = jvp(fn, tuple(xs[:k]), tuple(xs[k:]))
            return (*_leaves(p_out), *_leaves(t_out))
        return f

    return Composition("vmapjvpall", primals + tangents, ("primal",) * k + ("tangent",) * k, make,
                       is_batch_norm_training(name, kwargs))


def _autograd_vjp(outs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                  cts: Sequence[torch.Tensor]) -> tuple:
    """test_ops._autograd_grad: autograd.grad over outputs that need grad; zeros where unused."""
    pairs = [(o, c) for o, c in zip(outs, cts) if o.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], list(inputs), [c for _, c in pairs],
                                allow_unused=True) if pairs else [None] * len(inputs)
    return tuple(torch.zeros_like(x) if gr is None else gr for gr, x in zip(grads, inputs))


def _looped(op: Callable, in_dims: Sequence, spec: Any, batch: int) -> Callable:
    """common_utils.loop: ``op`` on entry ``b`` of every batched flat arg (``select(dim, b)``),
    each output leaf stacked along 0."""
    def mapped(*args: Any, **kwargs: Any) -> Any:
        flat = pytree.tree_leaves(args)
        outs = [pytree.tree_flatten(op(*pytree.tree_unflatten(
            [a.select(d, b) if d is not None else a for a, d in zip(flat, in_dims)], spec), **kwargs))
            for b in range(batch)]
        cols = [torch.stack(c) if isinstance(c[0], torch.Tensor) else c[0]
                for c in zip(*(o[0] for o in outs))]
        return pytree.tree_unflatten(cols, outs[0][1])
    return mapped


@dataclasses.dataclass(frozen=True)
class VjpOfVmap(Composition):
    """test_vjpvmap: for each in_dims choice, ``vjp`` of ``normalized(vmap(op, in_dims))`` over
    the batched sample args (primals: the sample's ``requires_grad`` leaves), at a randn cotangent
    of the batched output. Upstream's reference is autograd through that same vmap; ``run``'s
    ``expected`` is autograd through the per-sample loop (``common_utils.loop``) instead."""

    op: Callable | None = None
    spec: Any = None
    kwargs: dict = dataclasses.field(default_factory=dict)
    process: Callable | None = None
    primal_at: tuple = ()
    seed: int = 0

    def _cotangents(self, out: Any) -> Any:
        return _randn_like(out, torch.Generator().manual_seed(self.seed))

    def _normalized_at(self, f: Callable, batched: Sequence) -> Callable:
        return _normalized(f, batched, self.spec, self.kwargs, self.process, self.primal_at)

    def run(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]], *,
            vjp: Callable | None = None, jvp: Callable = torch.func.jvp,
            vmap: Callable = torch.func.vmap, transform: Callable = lambda c: c) -> tuple[tuple, tuple]:
        vjp = vjp or closure_vjp
        batched = self.batched(in_dims, entries)
        dims = pytree.tree_unflatten(list(in_dims), self.spec)
        fn = self._normalized_at(vmap(self.op, in_dims=tuple(dims)), batched)
        primals = [batched[i] for i in self.primal_at]
        with torch.no_grad():
            cts = self._cotangents(fn(*primals))

        def composed(*p: torch.Tensor) -> Any:
            return vjp(fn, *p)[1](cts)

        actual = transform(composed)(*primals)
        return tuple(_leaves(actual)), self.expected(in_dims, entries, cts)

    def actual(self, in_dims: Sequence, batched: Sequence[Any], *, vjp: Callable | None = None,
               jvp: Callable = torch.func.jvp, transform: Callable = lambda c: c) -> tuple:
        """``vjp`` of the vmapped op at the batched primals, through ``transform``."""
        vjp = vjp or closure_vjp
        dims = pytree.tree_unflatten(list(in_dims), self.spec)
        fn = self._normalized_at(torch.func.vmap(self.op, in_dims=tuple(dims)), batched)
        primals = [batched[i] for i in self.primal_at]
        with torch.no_grad():
            cts = self._cotangents(fn(*primals))
        return tuple(_leaves(transform(lambda *p: vjp(fn, *p)[1](cts))(*primals)))

    def expected(self, in_dims: Sequence, entries: Sequence[Sequence[torch.Tensor]],
                 cts: Any = None) -> tuple:
        batched = self.batched(in_dims, entries)
        fn = self._normalized_at(_looped(self.op, in_dims, self.spec, len(entries[0])), batched)
        leaves = [batched[i].detach().clone().requires_grad_(True) for i in self.primal_at]
        with torch.enable_grad():
            out = fn(*leaves)
            cts = self._cotangents(out) if cts is None else cts
            return _autograd_vjp(_leaves(out), leaves, _leaves(cts))

    def nested(self, *a: Any, **k: Any) -> None:
        """None: upstream's test_vjpvmap makes no vmap-of-vmap check."""


def vjpvmap(op: Callable, sample: Any, g: torch.Generator, *, name: str = "") -> VjpOfVmap:
    """test_vjpvmap: the batched args are the sample's flat ``(input, *args)``; in_dims choices as
    generate_vmap_inputs makes them (the batch-norm rule reads the unflattened args)."""
    flat, spec, kwargs, at = _flat_sample(sample)
    top = (sample.input, *sample.args)
    seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=g))
    on_flat = lambda vjp, jvp: lambda *a: op(*pytree.tree_unflatten(list(a), spec), **_fresh(kwargs))  # noqa: E731
    return VjpOfVmap("vjpvmap", tuple(flat), _roles(flat, at), on_flat,
                     is_batch_norm_training(name, kwargs), top_level=top, op=op, spec=spec,
                     kwargs=kwargs, process=sample.output_process_fn_grad, primal_at=tuple(at),
                     seed=seed)


#: composition name -> builder(op, sample, generator, *, name) (name: the OpInfo's, for the
#: batch-norm rule)
BUILDERS: dict[str, Callable[..., Composition]] = {
    "vmapvjp": vmapvjp, "vmapvjpvjp": vmapvjpvjp, "vmapjvpvjp": vmapjvpvjp,
    "vmapjvpall": vmapjvpall, "vjpvmap": vjpvmap,
}