"""The OpInfo side of the coverage sweep: torch's op database, op selection, samples, and a sample
prepared for ``vmap(vjp)`` with distinct batch entries and its per-sample reference.

PyTorch's test_vmapvjp methodology (docs/methodology.md): float32 CPU samples of ``op_db``; the
sample's ``(input, *args)`` flattened, every tensor in it (input, index, mask, weight...) and every
cotangent batched; in_dims ``(0,)*n`` then each ``(-1, None)`` combination except all-None
(:func:`funcbwd.run.scenarios.in_dims_choices`, capped).

Batching follows the matrix (:func:`funcbwd.run.entries.distinct_entries`): every batch entry is its
own valid value (entry 0 is the sample itself), so a result that silently used entry 0 for every
entry cannot pass. The expected result is the per-sample loop: for each entry ``b``, torch's own
unbatched ``vjp`` on entry ``b`` of every batched arg (entry 0 of an unbatched one). Where the
distinct entries are not valid inputs for the op (the loop raises on them, e.g. a permuted
positive-definite matrix), the sample falls back to copies of itself (``entries="copies"``, the
older methodology) and the record says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils import _pytree as pytree

from funcbwd import batching, internals
from funcbwd.errors import BadInputError, UnknownNameError, first_line, parse_names
from funcbwd.run import scenarios
from funcbwd.run.entries import distinct_entries, stacked
from funcbwd.strategies import STRATEGY_NAMES, available, get_strategy, provenance

SWEEP_STRATEGIES = ("builtin", "whole", "hooks")
BATCH = scenarios.BATCH
DEFAULT_MAX_IN_DIMS = 8
#: in_dims choices whose reference loop :func:`prepare` runs up front (the rest run lazily; a
#: later one that raises ends that record's choices, see coverage_sweep.run_strategy)
EAGER_CHOICES = 8
_DB: list | None = None
_BY_ID: dict[str, Any] | None = None


# ------------------------------------------------------------------------------ the op database
def op_db() -> list:
    """torch's OpInfo list, loaded once per process (importing it needs ``expecttest`` and takes
    a few seconds: a Dask worker does it in its warmup)."""
    global _DB, _BY_ID
    if _DB is None:
        try:
            _DB = internals.opinfo_database()
        except ImportError as e:  # pragma: no cover - environment problem
            raise BadInputError(f"cannot import torch's op_db ({e}); install expecttest") from e
        _BY_ID = {op_id(o): o for o in _DB}
    return _DB


def op_id(op: Any) -> str:
    """``name`` or ``name.variant`` (unique over op_db)."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def op_by_id(name: str) -> Any:
    """The OpInfo whose :func:`op_id` is ``name`` (what a Dask worker receives: OpInfos hold
    lambdas and are not picklable)."""
    op_db()
    assert _BY_ID is not None
    if name not in _BY_ID:
        raise UnknownNameError("OpInfo op", name, list(_BY_ID))
    return _BY_ID[name]


def select_ops(names: str | Iterable[str] | None = None) -> list[str]:
    """OpInfo ids; a bare name selects all its variants. Unknown names raise, listing the ids."""
    db = op_db()
    ids = [op_id(o) for o in db]
    if names is None or names == "all":
        return ids
    wanted = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    chosen: list[str] = []
    for name in (n for n in wanted if n):
        hits = [i for o, i in zip(db, ids) if i == name or o.name == name]
        if not hits:
            raise UnknownNameError("OpInfo op", name, ids)
        chosen.extend(h for h in hits if h not in chosen)
    return chosen


def sweep_strategies(names: str | Iterable[str] | None) -> list[str]:
    """Validate strategy names: only strategies that act on torch's C++ backward nodes qualify. A
    known one whose module is missing is kept (its records say so: not_applicable)."""
    names = list(SWEEP_STRATEGIES) if names is None else names
    chosen = parse_names("strategy", names, list(STRATEGY_NAMES) + _extra_strategies())
    for n in chosen:
        if strategy_available(n) and not resolve_strategy(n).acts_on_builtin_nodes:
            valid = [s for s in available() if get_strategy(s).acts_on_builtin_nodes]
            raise BadInputError(f"strategy {n!r} only changes funcbwd's legacy formulas, not "
                                f"torch's own backward nodes; valid for coverage: {', '.join(valid)}")
    return chosen


#: strategies only the coverage sweep runs (they act on torch's nodes, not on the legacy
#: formulas the matrix is about): name -> (module, class)
COVERAGE_ONLY = {"traced_backward": ("funcbwd.strategies.traced_backward", "TracedBackward")}
_COVERAGE_ONLY_INSTANCES: dict[str, Any] = {}


def _extra_strategies() -> list[str]:
    """Strategies beyond the canonical list: registered ones and :data:`COVERAGE_ONLY`."""
    return [n for n in available() if n not in STRATEGY_NAMES] + list(COVERAGE_ONLY)


def strategy_available(name: str) -> bool:
    return name in available() or name in COVERAGE_ONLY


def resolve_strategy(name: Any) -> Any:
    """A strategy instance by name (registered, or one of :data:`COVERAGE_ONLY`), or ``name``
    itself when it is already an instance."""
    if isinstance(name, str) and name in COVERAGE_ONLY and name not in available():
        if name not in _COVERAGE_ONLY_INSTANCES:
            import importlib

            module, cls = COVERAGE_ONLY[name]
            _COVERAGE_ONLY_INSTANCES[name] = getattr(importlib.import_module(module), cls)()
        return _COVERAGE_ONLY_INSTANCES[name]
    return get_strategy(name)


def samples(op: Any, all_samples: bool) -> list:
    """The op's float32 CPU samples (every one, or the first)."""
    it = op.sample_inputs("cpu", torch.float32, requires_grad=True)
    return list(it if all_samples else itertools.islice(it, 1))


def not_sweepable(op: Any) -> str | None:
    """Why no sample of ``op`` can be swept, or None."""
    if not op.supports_autograd:
        return "op does not support autograd"
    if torch.float32 not in op.supported_dtypes("cpu"):
        return "no float32 on CPU"
    return None


# ------------------------------------------------------------------------------ one sample
def _detach(x: Any) -> Any:
    return x.detach() if isinstance(x, torch.Tensor) else x


def _zeros_for_none(grads: Sequence[Any], like: Sequence[torch.Tensor]) -> tuple:
    return tuple(torch.zeros_like(l) if g is None else g for g, l in zip(grads, like))


@dataclasses.dataclass
class Prepared:
    """One OpInfo sample flattened like PyTorch's get_vjp_fn_and_args_with_cotangents, with its
    batch ``entries`` (``entries[i][b]``: entry ``b`` of tensor ``i`` of :meth:`tensors`)."""

    op: Any
    flat: list  # flattened (input, *args), detached
    spec: Any
    kwargs: dict
    diff: list[int]  # flat positions of differentiable tensors (requires_grad in the sample)
    tpos: list[int]  # flat positions of all tensors (each batched by vmap)
    cts: list[torch.Tensor]
    process: Callable | None
    batch: int = BATCH
    entries: list = dataclasses.field(default_factory=list)
    entries_kind: str = "distinct"
    choices: list = dataclasses.field(default_factory=list)  # the in_dims choices to run
    in_dims_total: int = 0  # how many exist (before the cap)
    _expected: dict = dataclasses.field(default_factory=dict)

    def call(self, flat: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        args = pytree.tree_unflatten(list(flat), self.spec)
        out = self.op.op(*args, **self.kwargs)
        if self.process is not None:
            out = self.process(out)
        return tuple(t for t in pytree.tree_leaves(out)
                     if isinstance(t, torch.Tensor) and t.is_floating_point())

    def tensors(self) -> list[torch.Tensor]:
        return [self.flat[p] for p in self.tpos] + list(self.cts)

    def vjp_function(self, strategy: Any, rules: bool = False) -> Callable[..., tuple]:
        """h(*tensors, *cotangents) -> grads of the diff args under ``strategy``: what vmap
        batches (and, unbatched, the loop body with ``builtin``). ``rules``: the ``vjp_fn`` call,
        i.e. the backward only (never the op's forward), runs inside
        :func:`funcbwd.batching.scoped_rules`. A strategy with ``takes_inputs`` (traced_backward)
        gets one function of (diff args, other tensors) per ``h`` and the other tensors as its
        ``inputs``, so its graph cache can key on that function."""
        n = len(self.tpos)
        name = getattr(strategy, "name", "")
        scope = batching.scoped_rules if rules else contextlib.nullcontext
        others = [p for p in self.tpos if p not in self.diff]

        def f(*args: torch.Tensor) -> tuple:  # the diff args, then the other tensors
            inner = list(self.flat)
            for p, v in zip(self.diff + others, args):
                inner[p] = v
            if name == "builtin":  # as Builtin.function records for registry ops
                provenance.record(name, "torch's op and built-in backward ran", True)
            return self.call(inner)

        def h(*xs: torch.Tensor) -> tuple:
            full = list(self.flat)
            for p, x in zip(self.tpos, xs[:n]):
                full[p] = x
            prims, rest = [full[p] for p in self.diff], [full[p] for p in others]
            if getattr(strategy, "takes_inputs", False):
                _, vjp_fn = strategy.vjp(f, *prims, inputs=rest)
            else:
                _, vjp_fn = strategy.vjp(lambda *ps: f(*ps, *rest), *prims)
            with scope():
                return tuple(vjp_fn(tuple(xs[n:])))

        return h

    # --- batching and the reference ----------------------------------------------------------
    def cotangent_choices(self) -> list[tuple]:
        """The in_dims choices that batch the cotangents only (for a strategy that cannot batch
        primals): all at dim 0, then all at dim -1."""
        n, k = len(self.tpos), len(self.cts)
        return [(None,) * n + (0,) * k, (None,) * n + (-1,) * k]

    def batched(self, in_dims: Sequence[int | None]) -> list[torch.Tensor]:
        """The vmap arguments for one in_dims choice (an unbatched arg is the sample's value)."""
        return [t if d is None else stacked(e, d)
                for t, e, d in zip(self.tensors(), self.entries, in_dims)]

    def expected(self, in_dims: Sequence[int | None]) -> tuple[torch.Tensor, ...]:
        """The per-sample loop of torch's unbatched vjp for ``in_dims`` (cached by which args are
        batched: the loop only depends on that)."""
        key = tuple(d is None for d in in_dims)
        if key not in self._expected:
            h = self.vjp_function(get_strategy("builtin"))
            like = [self.flat[p] for p in self.diff]
            loop = []
            for b in range(self.batch):
                xs = [e[0] if none else e[b] for e, none in zip(self.entries, key)]
                loop.append(tuple(g.detach() for g in _zeros_for_none(h(*xs), like)))
            self._expected[key] = tuple(torch.stack(parts) for parts in zip(*loop))
        return self._expected[key]


def prepare(op: Any, sample: Any, max_in_dims: int | None = DEFAULT_MAX_IN_DIMS, seed: int = 0,
            batch: int = BATCH) -> Prepared | str:
    """A :class:`Prepared` sample whose reference loop ran for its first :data:`EAGER_CHOICES`
    in_dims choices (of at most ``max_in_dims``; None = all), or the
    reason it cannot be swept (no differentiable input, no float output, forward or unbatched
    vjp raising, a random op)."""
    flat, spec = pytree.tree_flatten((sample.input, *sample.args))
    diff = [i for i, a in enumerate(flat)
            if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point()]
    if not diff:
        return "no differentiable tensor input"
    flat = [_detach(a) for a in flat]
    kwargs = pytree.tree_map(_detach, dict(sample.kwargs))
    p = Prepared(op, flat, spec, kwargs, diff,
                 [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)], [],
                 sample.output_process_fn_grad, batch)
    try:
        with torch.no_grad():
            outs = p.call(flat)
    except Exception as e:  # noqa: BLE001
        return f"forward fails: {type(e).__name__}: {first_line(str(e), 160)}"
    if not outs:
        return "no floating-point output"
    g = torch.Generator().manual_seed(seed)
    p.cts = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
    why = _nondeterministic(p)
    if why:
        return why
    p.choices, p.in_dims_total = in_dims_choices(len(p.tensors()), max_in_dims)
    p.entries = distinct_entries(p.tensors(), batch, seed)
    try:
        for in_dims in p.choices[:EAGER_CHOICES]:
            p.expected(in_dims)
    except Exception as e:  # noqa: BLE001 - distinct entries are not valid inputs for this op
        p.entries_kind = f"copies (distinct entries invalid: {type(e).__name__}: {first_line(str(e), 100)})"
        p.entries = [[t.detach().clone() for _ in range(batch)] for t in p.tensors()]
        p._expected.clear()
        try:
            for in_dims in p.choices[:EAGER_CHOICES]:
                p.expected(in_dims)
        except Exception as e2:  # noqa: BLE001
            return f"unbatched vjp fails: {type(e2).__name__}: {first_line(str(e2), 160)}"
    return p


def _nondeterministic(p: Prepared) -> str | None:
    """Run the unbatched vjp twice under different seeds: a random op is not swept."""
    h = p.vjp_function(get_strategy("builtin"))
    like = [p.flat[d] for d in p.diff]
    try:
        torch.manual_seed(0)
        first = _zeros_for_none(h(*p.tensors()), like)
        torch.manual_seed(1)
        second = _zeros_for_none(h(*p.tensors()), like)
    except Exception as e:  # noqa: BLE001
        return f"unbatched vjp fails: {type(e).__name__}: {first_line(str(e), 160)}"
    if any(not torch.allclose(a, b, equal_nan=True) for a, b in zip(first, second)):
        return "nondeterministic (random op)"
    return None


def in_dims_choices(n: int, cap: int | None = DEFAULT_MAX_IN_DIMS) -> tuple[list, int]:
    """(choices, total) of :func:`funcbwd.run.scenarios.in_dims_choices` (PyTorch's test_vmapvjp)."""
    return scenarios.in_dims_choices(n, cap), 2 ** n  # (0,)*n plus 2**n - 1 (-1, None) combos
