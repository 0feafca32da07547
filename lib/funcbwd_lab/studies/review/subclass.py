"""Objection 2 of the review (issue 28): the hand-written ``isTensorSubclassLike`` branches also
serve tensors that are not functorch's: Python-key wrapper subclasses, meta tensors, fake tensors
under a dispatch mode. What do the re-created legacy formulas (their in-place fast path) and the
modern out-of-place ones do on those, eagerly, outside every transform (composite-compliance
style)?

For every op with a formula (the default ops and the live sites of today's core), on its first
sample with ones cotangents (:func:`funcbwd.fx.formula_graphs.formula_args_for`), each formula
runs on:

* ``two_tensor``: every floating-point tensor argument wrapped as
  ``torch.testing._internal.two_tensor.TwoTensor(t, t.clone())`` (a wrapper subclass whose
  ``__torch_dispatch__`` runs each op on both halves); correct means the result is a TwoTensor
  whose two halves equal the plain result;
* ``meta``: every tensor argument on the meta device; correct means meta results of the plain
  result's shapes and dtypes;
* ``fake``: every tensor argument converted under ``FakeTensorMode`` and the formula run in it;
  correct means FakeTensors of the plain result's shapes and dtypes;
* ``mode``: plain tensors, the formula run under a pass-through ``TorchDispatchMode`` (what a
  profiler or a user's mode sees); correct means plain tensors equal to the plain result. The
  cell also records how many in-place ATen calls the mode saw (``inplace_seen``).

Each cell records the result's type, whether it is correct, or the error. ``python -m
funcbwd_lab.studies.review.subclass --out data/review-subclass.json`` writes the table.
"""

from __future__ import annotations

from funcbwd_lab.studies.review import saved

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch

SCHEMA = "funcbwd-review-subclass/1"
FILE = "review-subclass.json"
KINDS = ("two_tensor", "meta", "fake", "mode")
FORMULAS = ("legacy", "modern")


def _tensors(x: Any) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for e in x for t in _tensors(e)]
    return []


def _map(x: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (tuple, list)):
        return type(x)(_map(e, fn) for e in x)
    return x


def _two(t: torch.Tensor) -> torch.Tensor:
    from torch.testing._internal.two_tensor import TwoTensor

    return TwoTensor(t, t.clone()) if t.is_floating_point() or t.is_complex() else t


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and got.dtype == want.dtype and bool(
        torch.allclose(got, want, equal_nan=True)) if got.device == want.device else False


def _check(kind: str, out: Any, plain: Any) -> tuple[str, bool]:
    """(the result's type names, correct?) of one formula's result against its plain result."""
    got, want = _tensors(out), _tensors(plain)
    types = ",".join(sorted({type(t).__name__ for t in got})) or type(out).__name__
    if len(got) != len(want):
        return types, False
    if kind == "two_tensor":
        from torch.testing._internal.two_tensor import TwoTensor

        ok = all(isinstance(g, TwoTensor) and _same(g.a, w) and _same(g.b, w)
                 if w.is_floating_point() or w.is_complex() else _same(g, w)
                 for g, w in zip(got, want))
    elif kind == "mode":
        ok = all(type(g) is torch.Tensor and _same(g, w) for g, w in zip(got, want))
    elif kind == "meta":
        ok = all(g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype
                 for g, w in zip(got, want))
    else:
        from torch._subclasses.fake_tensor import FakeTensor

        ok = all(isinstance(g, FakeTensor) and g.shape == w.shape and g.dtype == w.dtype
                 for g, w in zip(got, want))
    return types, ok


class _Seen:
    """A pass-through dispatch mode counting in-place ATen calls (names ending in ``_``)."""

    def __enter__(self) -> "_Seen":
        from torch.utils._python_dispatch import TorchDispatchMode

        seen = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func._schema.name.split("::")[-1]
                seen.inplace += name.endswith("_") and not name.startswith("_")
                return func(*args, **(kwargs or {}))

        self.inplace = 0
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


def run_cell(formula: Callable[..., Any], args: tuple, plain: Any, kind: str) -> dict[str, Any]:
    """One formula on one kind of tensor: ``{"type", "correct"}`` or ``{"error"}``."""
    from funcbwd.errors import first_line

    try:
        if kind == "two_tensor":
            out = formula(*_map(args, _two))
        elif kind == "meta":
            out = formula(*_map(args, lambda t: t.to("meta")))
        elif kind == "mode":
            with _Seen() as seen:
                out = formula(*args)
            types, ok = _check(kind, out, plain)
            return {"type": types, "correct": ok, "inplace_seen": seen.inplace}
        else:
            from torch._subclasses.fake_tensor import FakeTensorMode

            with FakeTensorMode(allow_non_fake_inputs=False) as mode:
                out = formula(*_map(args, mode.from_tensor))
    except Exception as e:  # noqa: BLE001 - the cell's outcome
        return {"error": f"{type(e).__name__}: {first_line(str(e), 160)}", "correct": False}
    types, ok = _check(kind, out, plain)
    return {"type": types, "correct": ok}


def run(ops: list | None = None) -> dict[str, Any]:
    """The table: one row per op with a formula (see the module docstring)."""
    import funcbwd_lab.ops as O
    from funcbwd.fx.formula_graphs import formula_args_for

    rows = []
    for op in ops if ops is not None else O.all_ops(include_opt_in=True):
        if op.formula is None:
            continue
        sample = op.sample()
        args = formula_args_for(op, sample)
        row: dict[str, Any] = {"op": op.name, "group": op.group, "kind": op.kind,
                               "sample": sample.name}
        for which, formula in (("legacy", op.formula), ("modern", op.handfixed)):
            if formula is None:
                continue
            try:
                plain = formula(*args)
            except Exception as e:  # noqa: BLE001 - a control whose plain call fails
                row[which] = {"plain_error": f"{type(e).__name__}: {str(e)[:120]}"}
                continue
            row[which] = {k: run_cell(formula, args, plain, k) for k in KINDS}
        rows.append(row)
    return {"schema": SCHEMA, "torch": torch.__version__, "rows": rows, "summary": summarize(rows)}


def outcome(cell: dict[str, Any]) -> str:
    """``correct``, ``plain Tensor`` (a result that escaped the subclass: the wrong type), ``wrong``
    (the right type, a wrong value or shape) or ``error``."""
    if cell.get("correct"):
        return "correct"
    if "error" in cell:
        return "error"
    return "plain Tensor" if cell.get("type") == "Tensor" else "wrong"


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """formula -> kind -> outcome -> count, over the rows that ran that formula."""
    out: dict[str, dict[str, Counter]] = {}
    for r in rows:
        for which in FORMULAS:
            cells = r.get(which)
            if not cells or "plain_error" in cells:
                continue
            for kind in KINDS:
                if kind in cells:
                    out.setdefault(which, {}).setdefault(kind, Counter())[outcome(cells[kind])] += 1
    return {w: {k: dict(sorted(c.items())) for k, c in per.items()} for w, per in out.items()}


def load(data_dir: str | Path) -> dict[str, Any] | None:
    return saved.load(data_dir, FILE, schema=SCHEMA)


def main(argv: list[str] | None = None) -> int:
    return saved.main(__name__, __doc__, FILE, lambda a: run(), argv,
                      summary=lambda doc: json.dumps(doc["summary"]))


if __name__ == "__main__":
    raise SystemExit(main())
