"""Boolean masks in a decorated function: ``x[mask]`` and ``t[mask] = v`` have a data-dependent
shape no trace records, so the function is traced again with every boolean mask index as
``where`` (the in-place mode's mask rules, :mod:`funcbwd.masks`, with ``dense_masks``: ``x[mask]``
carried densely through elementwise ops into ``t[mask] = ...``). That graph is kept only if it
computes what the function as written computes on seeded inputs (values exact, NaN-equal; shapes,
dtypes, strides): the mask rules' ``where`` is checked against the eager boolean index."""

from __future__ import annotations

from typing import Any, Callable

import torch

from funcbwd import internals
from funcbwd.audit import Audit
from funcbwd.errors import first_line
from funcbwd.fx.formula_graphs import build, check_inputs, compare_outputs, tensor_positions
from funcbwd.inplace import InplaceMode
from funcbwd.journal import Journal


def with_dense_masks(formula: Callable[..., Any], args: tuple, name: str, untraceable: Any) -> Any:
    """The checked graph of ``formula`` with masks as ``where``, or ``untraceable`` with both
    reasons (its type keeps the caller's)."""
    def dense(*a: Any) -> Any:
        # the audit inside the mask rules' mode: that mode runs torch's C functions with torch
        # functions disabled, so an audit outside it would see none of the formula's reads
        # (``requires_grad``) and writes (under no_grad, through ``.data``)
        with InplaceMode(dense_masks=True), Audit(a):
            return formula(*a)

    try:
        entry = build(dense, args, name=f"{name} (masks as where)", optimize=True, fake=True,
                      capture=True, grad_mode=torch.is_grad_enabled())
        why = differs_as_written(entry, formula, args)
    except Exception as e:  # noqa: BLE001 - still untraceable (a selection reached a reduction)
        why = f"{type(e).__name__}: {first_line(str(e), 120)}"
    if why:
        return type(untraceable)(f"{untraceable.reason}; with masks as where: {why}")
    return entry


def differs_as_written(entry: Any, formula: Callable[..., Any], args: tuple) -> str:
    """'' if ``entry``'s graph and ``formula`` as written agree on seeded inputs of ``args``'
    signature, outside every transform, else the difference. The code as written runs on the
    caller's captured tensors: whatever it writes of them is put back."""
    journal = Journal()
    try:
        with internals.cleared_functorch_state(), torch.no_grad():
            positions = tensor_positions(args)
            seeded = check_inputs([args[p] for p in positions] + list(entry.captured_tensors),
                                  seed=1)
            full = list(args)
            for p, t in zip(positions, seeded):
                full[p] = t
            with internals.rng_forked(1), InplaceMode(watch=True, journal=journal):
                want = formula(*[a.clone() if isinstance(a, torch.Tensor) else a for a in full])
            graph_args = tuple(full) + tuple(entry.captured_tensors)
            with internals.rng_forked(1):
                got = entry.run(tuple(a.clone() if isinstance(a, torch.Tensor) else a
                                      for a in graph_args))
    finally:
        journal.restore()
    return compare_outputs(want, got)
