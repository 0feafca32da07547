"""torch's op database as cells of the one engine: an OpInfo sample becomes an :class:`OpSpec`
without a legacy formula (torch's own op and backward) and a :class:`Sample`.

Following PyTorch's ``test/functorch/test_ops.py`` (docs/compositions.md): CPU samples of
``op_db`` at the sweep's dtype; the sample's ``(input, *args)`` flattened, every tensor in it
(input, index, mask, weight...) an argument vmap may batch; the differentiable args are the
floating (or complex) tensors that require grad; ``kwargs`` and non-tensor args fixed; the
outputs are the floating and complex leaves of ``output_process_fn_grad(op(...))``.

Ops whose sample cannot be a cell say why (:func:`case_for` returns the reason): no
differentiable input, no floating output, a forward that raises, a random op (two unbatched
vjps under different seeds differ).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable

import torch
from torch.utils import _pytree as pytree

from funcbwd import internals
from funcbwd.errors import BadInputError, FuncbwdError, UnknownNameError, first_line, listing
from funcbwd_lab.ops.registry import OpSpec, Sample

GROUP = "opinfo"
_DB: list | None = None
_BY_ID: dict[str, Any] | None = None


# ------------------------------------------------------------------------------ the database
def op_db() -> list:
    """torch's OpInfo list, loaded once per process (importing it needs ``expecttest`` and takes
    a few seconds: a Dask worker does it in its warmup)."""
    global _DB, _BY_ID
    if _DB is None:
        try:
            _DB = internals.opinfo_database()
        except ImportError as e:  # pragma: no cover - environment problem
            raise BadInputError(f"cannot import torch's op_db ({e}); install expecttest "
                                "(pip install 'funcbwd[sweep]')") from e
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
    if not chosen:  # "--ops ," names nothing: an empty sweep would look like a clean one
        raise FuncbwdError("no OpInfo op given\n" + listing("valid OpInfo ops", {"": ids}))
    return chosen


def not_sweepable(op: Any, dtype: torch.dtype = torch.float32) -> str | None:
    """Why no sample of ``op`` can be swept at ``dtype``, or None."""
    if not op.supports_autograd:
        return "op does not support autograd"
    if dtype not in op.supported_dtypes("cpu"):
        return f"no {str(dtype).removeprefix('torch.')} on CPU"
    return None


def samples(op: Any, dtype: torch.dtype = torch.float32, limit: int | None = None) -> list:
    """The op's CPU samples at ``dtype`` (every one, or the first ``limit``)."""
    it = op.sample_inputs("cpu", dtype, requires_grad=True)
    return list(it if limit is None else itertools.islice(it, limit))


# ------------------------------------------------------------------------------ one sample
def _detach(x: Any) -> Any:
    return x.detach() if isinstance(x, torch.Tensor) else x


def _differentiable(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())


def torch_function(op: Any, tree: Any, kwargs: dict, process: Callable | None) -> Callable:
    """f(*flat) -> the floating/complex output leaves of ``op(*unflatten(flat), **kwargs)``."""

    def f(*flat: Any) -> tuple:
        args = pytree.tree_unflatten(list(flat), tree)
        out = op.op(*args, **kwargs)
        if process is not None:
            out = process(out)
        return tuple(t for t in pytree.tree_leaves(out)
                     if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()))

    return f


def case_for(op: Any, sample: Any, name: str) -> tuple[OpSpec, Sample] | str:
    """``(spec, sample)`` for one OpInfo sample (``name``: its index), or why it cannot be a cell."""
    flat, tree = pytree.tree_flatten((sample.input, *sample.args))
    diff = tuple(i for i, a in enumerate(flat) if _differentiable(a))
    if not diff:
        return "no differentiable tensor input"
    flat = [_detach(a) for a in flat]
    kwargs = pytree.tree_map(_detach, dict(sample.kwargs))
    f = torch_function(op, tree, kwargs, sample.output_process_fn_grad)
    try:
        with torch.no_grad():
            outs = f(*flat)
    except Exception as e:  # noqa: BLE001
        return f"forward fails: {type(e).__name__}: {first_line(str(e), 160)}"
    if not outs:
        return "no floating-point output"
    smp = Sample(name, tuple(flat), diff)
    spec = OpSpec(name=op_id(op), torch_op=f, formula=None, formula_args=None, grad_positions=diff,
                  source="torch's own op (OpInfo)", fixed_by="", make_samples=lambda: [smp],
                  schema="", diff_outputs=tuple(range(len(outs))), group=GROUP)
    why = nondeterministic(spec, smp)
    return why or (spec, smp)


def nondeterministic(spec: OpSpec, smp: Sample) -> str | None:
    """Run the unbatched vjp twice under different seeds: a random op is not swept."""
    prim = [smp.args[p] for p in smp.diff]

    def once(seed: int) -> tuple:
        torch.manual_seed(seed)

        def g(*xs: torch.Tensor) -> tuple:
            full = list(smp.args)
            for p, x in zip(smp.diff, xs):
                full[p] = x
            return spec.torch_op(*full)

        out, vjp_fn = torch.func.vjp(g, *prim)
        return tuple(out) + tuple(vjp_fn(tuple(torch.ones_like(o) for o in out)))

    try:
        first, second = once(0), once(1)
    except Exception as e:  # noqa: BLE001
        return f"unbatched vjp fails: {type(e).__name__}: {first_line(str(e), 160)}"
    same = all(a.shape == b.shape and torch.allclose(a, b, equal_nan=True)
               for a, b in zip(first, second) if isinstance(a, torch.Tensor))
    return None if same else "nondeterministic (random op)"
