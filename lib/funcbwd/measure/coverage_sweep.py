"""The coverage sweep: ``vmap(vjp)`` of every OpInfo sample under each strategy that acts on torch's
own backward nodes (``builtin``, ``whole``, ``hooks``; ``traced_backward`` on request), compared
with the per-sample loop (:mod:`funcbwd.measure.coverage_ops`: distinct batch entries).

Scenario ``vmap_all_args`` (PyTorch's test_vmapvjp: every tensor arg and cotangent batched, each
in_dims choice). A strategy that cannot batch primals (``batches_primals = False``; none of
today's) runs ``vmap_cotangents`` instead (only the cotangents batched), and ``builtin`` then gets
a ``vmap_cotangents`` record too, as its baseline.

One record per (op, sample, strategy), in the matrix's vocabulary (:data:`RECORD_KEYS`): ``status``
pass / fail / mismatch / not_applicable (:data:`funcbwd.run.outcomes.STATUSES`); a failure's
``reason`` from :func:`funcbwd.run.outcomes.classify` (refined by :func:`classify_sweep` for two
OpInfo-only causes) or, when the op's worker died or hung, ``crash`` / ``timeout`` / ``error``; the
comparison and tolerance of :func:`funcbwd.run.compare.check_close`; ``fallback_ops`` from
:func:`funcbwd.run.outcomes.fallback_ops`; ``mechanism`` / ``mechanism_ran`` from the strategy's
provenance events (:func:`funcbwd.run.runner.mechanism_of`). The leak policy is the runner's: a
strategy that leaves functorch/dispatch state changed gets a failed record (``leaked_state``),
and the state is restored afterwards so the next record starts clean.

``rules=True`` (the default) enters :func:`funcbwd.batching.scoped_rules` (batching rules for
``aten::copy`` and ``aten::as_strided_scatter``) around the backward (the ``vjp_fn`` call) of the
functionalizing strategies only: never around ``builtin`` (torch as is), and never around the op's
forward (so an op whose own forward needs a rule, e.g. ``as_strided_scatter``, is not "fixed"
by it). Per strategy and sample the in_dims choices run in turn until the first failure or
mismatch, or until ``budget_s`` is spent (the rest are skipped: ``timed_out``).

:func:`sweep_op_id` is the per-op unit of work: a top-level picklable function of an op *id*
(OpInfo objects hold lambdas), which :func:`run_sweep` maps over the ops serially or on Dask
workers (:func:`funcbwd.measure.distributed.map_items`); a worker that crashes or exceeds the
per-op time budget yields that op's failed records, and the sweep goes on.
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.func import vmap

from funcbwd import batching, internals
from funcbwd.errors import BadInputError, first_line
from funcbwd.measure import coverage_ops
from funcbwd.measure.coverage_ops import DEFAULT_MAX_IN_DIMS, SWEEP_STRATEGIES, Prepared
from funcbwd.measure.distributed import map_items
from funcbwd.progress import Progress
from funcbwd.run.compare import Mismatch, check_close
from funcbwd.run.outcomes import classify, fallback_ops
from funcbwd.run.runner import mechanism_of
from funcbwd.strategies import available, get_strategy, provenance

SCENARIO = "vmap_all_args"  # the matrix scenario this sweep is (torch's nodes, OpInfo samples)
#: the scenario of a strategy that cannot batch primals (``batches_primals = False``): only the
#: cotangents batched; builtin gets a record of it too, its baseline
COTANGENTS_SCENARIO = "vmap_cotangents"
DEFAULT_BUDGET_S = 2.0
DEFAULT_ITEM_TIMEOUT_S = 300.0
RECORD_KEYS = ("op", "sample", "scenario", "strategy", "status", "reason", "message",
               "fallback_ops", "seconds", "max_abs_err", "detail", "mechanism", "mechanism_ran",
               "error_class", "in_dims_tried", "in_dims_total", "timed_out", "entries", "rules")


def classify_sweep(exc: BaseException) -> str:
    """:func:`funcbwd.run.outcomes.classify`, with two OpInfo-specific refinements of 'other'."""
    reason, msg = classify(exc), str(exc)
    if reason == "other" and "randomness" in msg:
        return "randomness"  # a random op under vmap's default randomness='error'
    if reason == "other" and "Batching rule not implemented" in msg:
        return "no_batch_rule"  # no rule, and the fallback cannot run it (view/out= op)
    return reason


def _record(op: str, sample: str, strategy: str, status: str, **kw: Any) -> dict[str, Any]:
    rec = {"op": op, "sample": sample, "scenario": SCENARIO, "strategy": strategy,
           "status": status, "reason": "", "message": "", "fallback_ops": [], "seconds": 0.0,
           "max_abs_err": None, "detail": "", "mechanism": "", "mechanism_ran": False,
           "error_class": "", "in_dims_tried": 0, "in_dims_total": 0, "timed_out": False,
           "entries": "", "rules": []}
    rec.update(kw)
    return {k: rec[k] for k in RECORD_KEYS}


def run_strategy(p: Prepared, op: str, sample: str, strategy: str | Any, *, rules: bool = True,
                 cotangents_only: bool = False,
                 budget_s: float | None = DEFAULT_BUDGET_S) -> dict[str, Any]:
    """One record: the batched vjp of ``p`` under ``strategy`` for each in_dims choice in turn."""
    st = coverage_ops.resolve_strategy(strategy)
    cotangents_only = cotangents_only or not getattr(st, "batches_primals", True)
    choices = p.cotangent_choices() if cotangents_only else p.choices
    total = len(choices) if cotangents_only else p.in_dims_total
    traces = len(getattr(st, "trace_seconds", ()))
    rec = _record(op, sample, st.name, "pass", in_dims_total=total, entries=p.entries_kind,
                  scenario=COTANGENTS_SCENARIO if cotangents_only else SCENARIO)
    fallbacks: set[str] = set()
    events: list = []
    scoped = rules and st.name != "builtin"
    rec["rules"] = list(batching.RULES) if scoped else []
    h = p.vjp_function(st, rules=scoped)
    start = time.perf_counter()
    for in_dims in choices:
        if budget_s is not None and rec["in_dims_tried"] and time.perf_counter() - start > budget_s:
            rec["timed_out"] = True
            break
        try:
            expected = p.expected(in_dims)
        except Exception as e:  # noqa: BLE001 - the reference, not the strategy, cannot run
            rec["reference_stop"] = (f"; stopped: the per-sample loop raises for in_dims={in_dims} "
                                     f"({type(e).__name__})")
            break
        rec["in_dims_tried"] += 1
        rec["detail"] = f"in_dims={in_dims}"
        before = internals.dispatch_state()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with provenance.collecting() as evs:
                    try:
                        with st.active():
                            actual = vmap(h, in_dims=in_dims)(*p.batched(in_dims))
                    finally:
                        events.extend(evs)
                like = [p.flat[d] for d in p.diff]
                actual = [torch.zeros((p.batch, *l.shape), dtype=l.dtype) if a is None else a
                          for a, l in zip(actual, like)]
                check_close(actual, expected, rec["detail"])
            except Mismatch as e:
                rec.update(status="mismatch", max_abs_err=e.max_abs_err, message=str(e))
            except Exception as e:  # noqa: BLE001 - every failure is a classified record
                rec.update(status="fail", reason=classify_sweep(e), error_class=type(e).__name__,
                           message=first_line(str(e)))
        fallbacks |= set(fallback_ops(caught))
        after = internals.dispatch_state()
        if after != before:  # the runner's policy: a leak is a failure, then restored
            rec.update(status="fail", reason="leaked_state", error_class="",
                       message=f"left transform state changed: {before.describe_difference(after)}")
            internals.restore_stack_depth(before.depth)
        if rec["status"] != "pass":
            break
    if rec["status"] == "pass":
        rec["detail"] = (f"{rec['in_dims_tried']} of {total} in_dims choices"
                         + (" (budget spent)" if rec["timed_out"] else "")
                         + rec.pop("reference_stop", ""))
    rec.pop("reference_stop", None)
    if cotangents_only:
        rec["detail"] += " (cotangents only)"
    if hasattr(st, "trace_seconds"):
        spent = st.trace_seconds[traces:]
        rec["detail"] += f"; {len(spent)} trace(s), {sum(spent):.3f} s tracing"
    if rec["status"] == "pass":
        rec["max_abs_err"] = 0.0
    rec["seconds"] = round(time.perf_counter() - start, 4)
    rec["fallback_ops"] = sorted(fallbacks)
    rec["mechanism"], rec["mechanism_ran"] = mechanism_of(st.name, events)
    return rec


def cotangents_only(strategy: str) -> bool:
    """True for a strategy that cannot batch primals (``batches_primals = False``)."""
    return (coverage_ops.strategy_available(strategy)
            and not getattr(coverage_ops.resolve_strategy(strategy), "batches_primals", True))


def scenario_of(strategy: str) -> str:
    return COTANGENTS_SCENARIO if cotangents_only(strategy) else SCENARIO


def sweep_op(op: Any, strategies: Sequence[str], *, all_samples: bool = False,
             max_in_dims: int | None = DEFAULT_MAX_IN_DIMS, budget_s: float | None = DEFAULT_BUDGET_S,
             rules: bool = True) -> list[dict[str, Any]]:
    """Records for one OpInfo: one per sample per strategy (not_applicable ones say why)."""
    name = coverage_ops.op_id(op)

    def skip(sample: str, why: str) -> list[dict]:
        return [_record(name, sample, s, "not_applicable", message=why, scenario=scenario_of(s))
                for s in strategies]

    why = coverage_ops.not_sweepable(op)
    if why:
        return skip("-", why)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            smps = coverage_ops.samples(op, all_samples)
    except Exception as e:  # noqa: BLE001
        return skip("-", f"sample_inputs fails: {first_line(str(e), 160)}")
    if not smps:
        return skip("-", "no samples")
    records: list[dict] = []
    for i, sample in enumerate(smps):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p = coverage_ops.prepare(op, sample, max_in_dims)
            except Exception as e:  # noqa: BLE001
                p = f"prepare fails: {type(e).__name__}: {first_line(str(e), 160)}"
        if isinstance(p, str):
            records.extend(skip(str(i), p))
            continue
        for s in strategies:
            if not coverage_ops.strategy_available(s):
                records.append(_record(name, str(i), s, "not_applicable",
                                       message=f"strategy {s!r} has no module yet"))
                continue
            records.append(run_strategy(p, name, str(i), s, rules=rules, budget_s=budget_s))
        if "builtin" in strategies and any(cotangents_only(s) for s in strategies):
            records.append(run_strategy(p, name, str(i), "builtin", cotangents_only=True,
                                        budget_s=budget_s))
    return records


# ------------------------------------------------------------------------------ per op, anywhere
def warm_worker() -> None:
    """A Dask worker's warmup: import op_db and the strategies once, before the first op."""
    coverage_ops.op_db()
    for s in SWEEP_STRATEGIES:
        if s in available():
            get_strategy(s)


def sweep_op_id(op: str, *, strategies: Sequence[str] = SWEEP_STRATEGIES,
                all_samples: bool = False, max_in_dims: int | None = DEFAULT_MAX_IN_DIMS,
                budget_s: float | None = DEFAULT_BUDGET_S, rules: bool = True,
                cost: bool = False) -> dict[str, Any]:
    """The per-op unit of work: ``{"op", "records", "cost"}`` (``cost`` None unless asked; see
    :func:`funcbwd.measure.coverage_cost.op_cost`). Picklable by reference (top level)."""
    records = sweep_op(coverage_ops.op_by_id(op), strategies, all_samples=all_samples,
                       max_in_dims=max_in_dims, budget_s=budget_s, rules=rules)
    out: dict[str, Any] = {"op": op, "records": records, "cost": None}
    if cost:
        from funcbwd.measure import coverage_cost

        out["cost"] = coverage_cost.op_cost(op, records)
    return out


def failed_op(strategies: Sequence[str]) -> Callable[[str, str, str], dict[str, Any]]:
    """``on_failure`` for :func:`map_items`: the op's records when its worker raised, died
    (``crash``) or exceeded the per-op budget (``timeout``)."""

    def on_failure(op: str, reason: str, message: str) -> dict[str, Any]:
        return {"op": op, "cost": None,
                "records": [_record(op, "-", s, "fail", reason=reason, message=first_line(message),
                                    error_class=reason, scenario=scenario_of(s))
                            for s in strategies]}

    return on_failure


def run_sweep(ops: str | Iterable[str] | None = None,
              strategies: str | Iterable[str] | None = SWEEP_STRATEGIES, all_samples: bool = False,
              *, max_in_dims: int | None = DEFAULT_MAX_IN_DIMS,
              budget_s: float | None = DEFAULT_BUDGET_S, rules: bool = True, cost: bool = False,
              workers: int = 0, scheduler: str | None = None,
              item_timeout: float | None = DEFAULT_ITEM_TIMEOUT_S,
              progress: bool | Progress = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records, costs): the sweep over ``ops`` (ids or names; default all of op_db).
    ``workers=0`` runs serially in this process (timeouts not enforced); otherwise on that many
    local Dask worker processes, or on the cluster at ``scheduler``. ``progress`` counts the ops
    (:class:`funcbwd.progress.Progress`, or True for one on stderr)."""
    chosen = coverage_ops.sweep_strategies(strategies)
    if max_in_dims is not None and max_in_dims < 1:
        raise BadInputError(f"max_in_dims must be >= 1 (or None for all), got {max_in_dims}")
    ids = coverage_ops.select_ops(ops)
    fn = functools.partial(sweep_op_id, strategies=tuple(chosen), all_samples=all_samples,
                           max_in_dims=max_in_dims, budget_s=budget_s, rules=rules, cost=cost)
    results = map_items(fn, ids, workers=workers, scheduler=scheduler, timeout=item_timeout,
                        progress=progress, on_failure=failed_op(chosen), warmup=warm_worker)
    records = [r for res in results for r in res["records"]]
    costs = [res["cost"] for res in results if res.get("cost")]
    return records, costs


def fallback_warnings_work() -> bool:
    """Probe: does vmap's slow fallback still warn? (Detection relies on the warning.)"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vmap(lambda q: torch.quantile(torch.arange(5.0), q))(torch.tensor([0.2, 0.7]))
    return bool(fallback_ops(caught))


def stable(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without the volatile timing (and the budget cut that depends on it)."""
    return [{k: v for k, v in r.items() if k not in ("seconds",)} for r in records]
