"""Check corpus cases as their author would before committing one.

``python -m funcbwd_lab.studies.yourcode.check [NAME ...]`` checks, for each case (default: all):

1. **faithful**: the code as written and the out-of-place rewrite agree without transforms on
   three samples: outputs, and the gradient of ``(out * c).sum()`` with respect to the
   differentiated argument (where eager autograd accepts the code as written);
2. **plain**: what plain ``torch.func`` does under each transform, against the per-sample loop
   of torch's autograd on the rewrite (ok, wrong with its error, or the error it raises).

Exit 1 if a case is not faithful.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, Callable

import torch

from funcbwd import StateWriteError
from funcbwd.errors import first_line
from funcbwd.compare import compare
from funcbwd_lab.studies.yourcode import transforms as T
from funcbwd_lab.studies.yourcode.case import TRANSFORMS, Case, identity

#: corpus tolerance: the rewrite runs other ops in another order than the code as written
ATOL = RTOL = 1e-4


def _tol(dtype: torch.dtype):
    from funcbwd.tolerances import Tolerance
    if not (dtype.is_floating_point or dtype.is_complex):
        return Tolerance(0.0, 0.0, "exact: integer/bool output")
    return Tolerance(ATOL, RTOL, "corpus: upstream's float32 composition tolerance (1e-4)")


def close(got: Any, want: Any) -> str:
    """'' when ``got`` matches ``want`` within the corpus tolerance, else what differs."""
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    c = compare(got, want, _tol)
    return "" if c.ok else c.detail


def faithful(case: Case) -> list[str]:
    """What differs between the code as written and the rewrite, eagerly (empty: faithful)."""
    problems = []
    for seed in range(3):
        T._reseed(case)
        a = case.sample(seed)
        fn = case.fn(identity)
        with torch.no_grad():
            T._reseed(case)
            want = case.rewrite(*a)
            T._reseed(case)
            got = fn(*case.sample(seed))
        diff = close(got, want)
        if diff:
            problems.append(f"seed {seed} output: {diff}")
            continue
        ct = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed + 7))
        grads = []
        for f in (case.rewrite, case.fn(identity)):
            args = list(case.sample(seed))
            x = args[case.diff].detach().requires_grad_(True)
            args[case.diff] = x
            try:
                T._reseed(case)
                (g,) = torch.autograd.grad((f(*args) * ct).sum(), x, allow_unused=True)
                grads.append(torch.zeros_like(x) if g is None else g)
            except Exception as e:  # noqa: BLE001 - eager autograd refuses the code as written
                grads.append(f"{type(e).__name__}: {first_line(str(e), 100)}")
        if isinstance(grads[0], str):
            problems.append(f"seed {seed}: the rewrite's gradient raised {grads[0]}")
        elif not isinstance(grads[1], str):
            diff = close(grads[1], grads[0])
            if diff:
                problems.append(f"seed {seed} gradient: {diff}")
    return problems


def run_cell(name: str, f: Callable[..., Any], case: Case, vmap=None,
             within: Callable[[], Any] = contextlib.nullcontext) -> tuple[str, str]:
    """(verdict, detail) of ``f`` under transform ``name`` against the loop over the rewrite:
    ``ok``, ``wrong`` (with the difference), ``fail`` (with the error), ``refused`` (the tool's
    :class:`funcbwd.StateWriteError`: a write into the caller's state no batched run reproduces,
    refused by its contract), ``unknown`` (the truth itself raised). The transformed call (not the truth) runs inside ``within()``."""
    args = T.args_for(name, case)
    cts = T.cotangents(case, T.output_of(case, case.rewrite))
    try:
        want = T.loop(name, case.rewrite, case, args, cts)
    except Exception as e:  # noqa: BLE001 - no truth: the cell is unknown
        return "unknown", f"truth raised {type(e).__name__}: {first_line(str(e), 120)}"
    try:
        with within():
            got = T.transformed(name, f, case, args, cts, vmap=vmap)
    except StateWriteError as e:  # the tool's contract: no per-sample answer, refused (why)
        return "refused", f"{type(e).__name__}: {first_line(str(e), 140)}"
    except Exception as e:  # noqa: BLE001 - the failure is the finding
        return "fail", f"{type(e).__name__}: {first_line(str(e), 140)}"
    diff = close(got, want)
    return ("wrong", diff) if diff else ("ok", "")


def main(argv: list[str] | None = None) -> int:
    from funcbwd_lab.studies.yourcode.cases import CASES

    p = argparse.ArgumentParser(prog="python -m funcbwd_lab.studies.yourcode.check",
                                description="Check corpus cases: faithful rewrite, plain verdicts.")
    p.add_argument("names", nargs="*", help="case names (default: all)")
    ns = p.parse_args(argv)
    unknown = [n for n in ns.names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    bad = 0
    for name in ns.names or list(CASES):
        case = CASES[name]
        problems = faithful(case)
        bad += bool(problems)
        print(f"{name}: {'FAITHFUL' if not problems else 'NOT FAITHFUL'}")
        for pr in problems:
            print(f"    {pr}")
        for t in TRANSFORMS:
            if t in case.undefined:
                print(f"    {t:12s} undefined: {case.undefined[t]}")
                continue
            verdict, detail = run_cell(t, case.fn(identity), case)
            print(f"    {t:12s} plain {verdict:7s} {detail[:70]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
