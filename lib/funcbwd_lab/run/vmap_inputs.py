"""What upstream vmaps over: every in_dims choice its generator makes, the batch-norm rule, the
vmap-of-vmap check, and upstream's batch entries (copies).

From PyTorch's ``test/functorch/common_utils.py`` (``generate_vmap_inputs``, ``get_bdim_choices``,
``get_bdim_choices_batch_norm``, ``is_batch_norm_training``, ``_compute_quantities_for_vmap_test``;
see ``funcbwd_lab.studies.coverage.upstream.SOURCE`` for the commit); docs/compositions.md. Used by the
composition builders (:mod:`funcbwd_lab.run.compositions`).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch
from torch.utils import _pytree as pytree

from funcbwd.errors import BadInputError

BATCH_NORM_OPS = ("nn.functional.batch_norm", "nn.functional.instance_norm")
UPSTREAM_BATCH = 2  # common_utils.generate_vmap_inputs / get_fallback_and_vmap_exhaustive


def is_batch_norm_training(op_name: str, kwargs: dict) -> bool:
    """common_utils.is_batch_norm_training: True for ``nn.functional.batch_norm`` /
    ``instance_norm`` in training mode (the one bool among the kwargs; instance norm defaults to
    training, batch norm does not); False for every other op name."""
    if op_name not in BATCH_NORM_OPS:
        return False
    flags = [v for v in kwargs.values() if isinstance(v, bool)]
    if len(flags) > 1:
        raise BadInputError(f"{op_name}: more than one bool kwarg ({flags}); upstream asserts one")
    return flags[0] if flags else op_name == "nn.functional.instance_norm"


def bdim_choices(n: int, batch_norm: tuple[bool, bool] | None = None) -> list[tuple]:
    """The batch dims (0, -1 or None) per tensor, in upstream's order (common_utils.get_bdim_choices
    and get_bdim_choices_batch_norm): all 0, then every (-1, None) combination but all-None.

    ``batch_norm = (stats_given, ...)``: the batch-norm-and-training rule. If running_mean or
    running_var is missing (``stats_given`` False), the first tensor is never batched: ``(None, 0,
    ..., 0)`` then ``(None, c)`` for every combination ``c`` of the others. Otherwise the first three
    tensors are taken as input, running_mean, running_var, and a choice that batches the input
    (-1) with either stat unbatched is dropped (batch norm writes batched stats into unbatched
    ones in place, which vmap refuses)."""
    if batch_norm is not None and not batch_norm[0]:
        rest = [(None,) + c for c in itertools.product((-1, None), repeat=n - 1)]
        return [(None,) + (0,) * (n - 1)] + rest[:-1]
    choices = [(0,) * n]
    for c in itertools.product((-1, None), repeat=n):
        if batch_norm is not None and c[0] is not None and (c[1] is None or c[2] is None):
            continue
        choices.append(c)
    return choices[:-1]  # the last product is all-None


def exhaustive_in_dims(args: Sequence[Any], *, batch_norm_and_training: bool = False,
                       top_level: Sequence[Any] | None = None) -> list[tuple]:
    """Every in_dims choice common_utils.generate_vmap_inputs makes for the flat ``args`` (None for
    a non-tensor): ``2 ** n`` for ``n`` tensors, no cap. With ``batch_norm_and_training``, the
    batch-norm rule of :func:`bdim_choices`, reading running_mean/var at positions 1 and 2 of
    ``top_level`` (the test's unflattened args; default ``args``); none at all if only one tensor."""
    is_tensor = [isinstance(a, torch.Tensor) for a in args]
    n = sum(is_tensor)
    if batch_norm_and_training and n == 1:
        return []
    bn = None
    if batch_norm_and_training:
        top = list(top_level if top_level is not None else args) + [None, None]
        bn = (top[1] is not None and top[2] is not None, True)
    out = []
    for choice in bdim_choices(n, bn):
        it = iter(choice)
        out.append(tuple(next(it) if t else None for t in is_tensor))
    return out


def copies(values: Sequence[torch.Tensor], batch: int = UPSTREAM_BATCH) -> list[list[torch.Tensor]]:
    """Upstream's batch entries: ``batch`` copies of each value (common_utils.add_batch_dim repeats
    or expands the sample)."""
    return [[v.detach().clone() for _ in range(batch)] for v in values]


def vmap_of_vmap(function: Callable, in_dims: Sequence, batched_args: Sequence, batch: int, *,
                 vmap: Callable = torch.func.vmap) -> tuple[Any, Any]:
    """(nested output, what it must equal): common_utils._compute_quantities_for_vmap_test's check
    that a batching rule also works when its inputs carry no batch dim at the inner level.
    ``vmap(vmap(f', (0, None, ...)), (0, *in_dims))(dummy, *args)`` with ``dummy = ones(batch, 1)``
    and ``f'(dummy, *a) = function(*a)`` must equal the single ``vmap(function, in_dims)`` output
    with a size-1 dim inserted at 1."""
    single = vmap(function, in_dims=tuple(in_dims), out_dims=0)(*batched_args)

    def ignore_dummy(dummy: torch.Tensor, *a: Any) -> Any:
        return function(*a)

    inner = vmap(ignore_dummy, in_dims=(0,) + (None,) * len(in_dims), out_dims=0)
    nested = vmap(inner, in_dims=(0,) + tuple(in_dims), out_dims=0)(torch.ones(batch, 1), *batched_args)
    expected = pytree.tree_map(lambda x: x.unsqueeze(1) if isinstance(x, torch.Tensor) else x, single)
    return nested, expected
