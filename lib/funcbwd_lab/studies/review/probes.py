"""The design review's live probes: runs that answer one question each about a strategy.

* :func:`error_safety`: does a backward that raises (an Exception or a KeyboardInterrupt, at four
  points of the formula) leave torch's transform state or the strategy's bookkeeping changed?
* :func:`new_operators` / :func:`operator_growth`: which operators does the dispatcher learn while
  a strategy runs the corpus (the FC/BC surface an approach adds)?
* :func:`needs_per_op_input`: does the strategy stop working when a formula's hand-written schema
  is blanked (what must be written by hand for each new formula)?

Each returns data (numbers, names, messages); :mod:`funcbwd_lab.studies.review.review` turns them into
evidence and :mod:`funcbwd_lab.views` shows them. Every probe restores the state it found.
"""

from __future__ import annotations

import dataclasses as dc
import itertools
import warnings
from typing import Any, Callable, Iterable, Sequence

from funcbwd import internals
from funcbwd_lab.ops import inject, registry
from funcbwd_lab.run import runner
from funcbwd_lab.run.scenarios import BACKWARD_NAMES, SCENARIOS, Case
from funcbwd_lab.strategies import get_strategy

#: the groups whose legacy formulas make up the corpus the operator count runs over
CORPUS_GROUPS = ("test", "extended")
#: the scenarios the error-safety probe raises in (one vmap over the vjp, one grad inside vmap)
SAFETY_SCENARIOS = ("vmap_cotangents", "grad_inside_vmap")


def error_safety(strategy: str, scenarios: Sequence[str] = SAFETY_SCENARIOS,
                 base_exception: Sequence[bool] = (False, True)) -> dict[str, Any]:
    """Run formulas that raise (``funcbwd_lab.ops.inject``: before the first op, mid-formula, inside
    the last op, after it; an Exception and a KeyboardInterrupt) under ``strategy`` and compare
    torch's transform state and the strategy's own bookkeeping before and after.

    Returns ``{"checked": n, "leaks": [one line per leaking case], "error_safe": 1 or 0}``. The
    scenario runs directly (not through the cell runner, whose cleanup would hide a leak); a leak
    found is cleaned up here so the caller's process stays usable."""
    st = get_strategy(strategy)
    checked, leaks = 0, []
    for sc in scenarios:
        for point in inject.POINTS:
            for base in base_exception:
                spec = inject.raising_op(point, base_exception=base)
                before = (internals.dispatch_state(), st.bookkeeping())
                try:
                    with warnings.catch_warnings():  # vmap's slow-fallback notice: not what is probed
                        warnings.filterwarnings("ignore", message=".*performance drop because we have not")
                        SCENARIOS[sc].run(Case(spec, inject.non_square_sample(), st))
                except BaseException:  # noqa: BLE001 - the point is to raise, including interrupts
                    pass
                after = (internals.dispatch_state(), st.bookkeeping())
                checked += 1
                if before != after:
                    leaks.append(f"{sc}/{point}{'/interrupt' if base else ''}: "
                                 + before[0].describe_difference(after[0]))
                    internals.restore_stack_depth(before[0].depth)
    return {"checked": checked, "leaks": leaks, "error_safe": 0 if leaks else 1}


def new_operators(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """Run ``fn``; return its result and the operators the dispatcher learned meanwhile.

    torch registers some of its own operators lazily (prims, c10d_functional...) on first use of
    make_fx, functionalize and friends: run :func:`warm_up_strategies` first so the count is the
    strategy's own library growth."""
    before = internals.dispatcher_all_op_names()
    out = fn()
    return out, sorted(internals.dispatcher_all_op_names() - before)


def warm_up_strategies(strategies: Iterable[str], ops: Sequence[str] = ("diag", "prod")) -> None:
    """Run every scenario once per strategy on throwaway copies of ``ops`` (their own names, so
    strategies that register or cache per op do so for the copies, not for the measured ops).
    diag covers the functionalize/make_fx paths; prod the data-dependent one (a failed trace
    loads more of torch's lazily registered operators)."""
    for op in ops:
        spec = registry.get_op(op)
        copy = dc.replace(spec, name=f"{op}_warmup")
        for st in strategies:
            for sc in BACKWARD_NAMES:
                runner.run(copy, sc, st, spec.sample())


def corpus_ops(groups: Sequence[str] = CORPUS_GROUPS) -> list[str]:
    """The registered ops of ``groups`` (default: the 8 test ops and the extended corpus)."""
    return [op for g in groups for op in registry.op_names(g)]


_GROWTH_RUNS = itertools.count(1)


def operator_growth(strategies: Sequence[str], ops: Sequence[str] | None = None,
                    scenario: str = "vmap_cotangents") -> dict[str, list[str]]:
    """strategy -> the operators the dispatcher learns while the strategy runs ``ops`` (first
    sample, ``scenario``), after a warm-up of every strategy.

    The ops run as renamed copies (a fresh suffix per call), so a strategy that registers one
    operator per formula registers it here even if the same formulas ran earlier in the process:
    the count does not depend on what ran before."""
    ops = list(ops) if ops is not None else corpus_ops()
    warm_up_strategies(strategies)
    suffix = f"_growth{next(_GROWTH_RUNS)}"
    copies = [dc.replace(registry.get_op(op), name=op + suffix) for op in ops]
    out = {}
    for st in strategies:
        _, out[st] = new_operators(lambda: [runner.run(c, scenario, st, c.sample()) for c in copies])
    return out


def needs_per_op_input(strategy: str, op: str = "diag", field: str = "schema") -> int:
    """1 if ``strategy`` stops working when ``op``'s hand-written ``field`` is blanked, else 0:
    a measured answer to "what must be written by hand for each new formula?"."""
    spec = registry.get_op(op)
    blank = dc.replace(spec, name=f"{op}_without_{field}", **{field: ""})
    sample = next(s for s in spec.samples()
                  if runner.run(spec, "vmap_cotangents", "plain", s).status == "fail")
    with_field = runner.run(spec, "vmap_cotangents", strategy, sample).status
    without = runner.run(blank, "vmap_cotangents", strategy, sample).status
    return int(with_field == "pass" and without != "pass")
