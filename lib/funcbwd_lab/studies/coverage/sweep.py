"""The OpInfo sweep: every composition functorch tests, over every OpInfo with autograd, each
record a cell of the one engine (:func:`funcbwd_lab.run.runner.run`), on Dask, resumable.

What one op's unit of work does (:func:`sweep_op`, a top-level picklable function of the op's
*id*: OpInfos hold lambdas): for each dtype of the :class:`Plan`, each sample the plan allows
for a composition (float32: every sample, as upstream's tests; a cap for speed is written into
every record, ``sample_cap`` and ``samples_total``) (:mod:`funcbwd_lab.studies.coverage.opinfo` turns it into a cell), each
composition (:mod:`funcbwd_lab.run.functorch`: every in_dims choice upstream's generator makes, no
cap, plus the vmap-of-vmap check) it runs ``builtin`` (torch as is) and then each
functionalizing strategy with the scoped batching rules (``Strategy.with_rules``), trying first
the in_dims choice ``builtin`` failed on (``first=``), so a cell's budget is spent where the
answer is. A budget that runs out is a ``timeout`` record, never a pass. Distinct batch entries
by default; where they are not valid inputs of the op (the reference loop raises on them) the
sample is rerun with copies and the records say ``entries="copies"``.

:func:`run_sweep` maps :func:`sweep_op` over the ops serially or on Dask workers
(:func:`funcbwd_lab.parallel.map_items`: a crash or hang is that op's failed record),
appending each op's records to ``<out>.partial.jsonl`` as they arrive; ``resume=True`` skips
the ops already there, so an interrupted sweep continues where it stopped and the final file
equals one uninterrupted run (``tests/test_sweep.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from funcbwd.errors import BadInputError, first_line, parse_names
from funcbwd_lab.parallel import map_items
from funcbwd_lab.run import runner
from funcbwd_lab.run.scenarios import FUNCTORCH_NAMES
from funcbwd_lab.strategies import get_strategy
from funcbwd_lab.studies.coverage import opinfo

COMPOSITIONS = FUNCTORCH_NAMES  # vmapvjp, vmapvjpvjp, vmapjvpvjp, vmapjvpall, vjpvmap
STRATEGIES = ("builtin", "whole", "hooks", "traced_backward")
BASELINE = "builtin"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a sweep covers. ``samples[dtype][composition]``: how many of the op's samples at
    that dtype the composition runs (None: every one; a composition absent: none)."""

    samples: dict[str, dict[str, int | None]]
    strategies: tuple[str, ...] = STRATEGIES
    budget_s: float = 3.0  # per cell (op sample x composition x strategy)
    op_budget_s: float = 420.0  # per op: no new cell starts after it (those are timeout records)
    item_timeout_s: float = 900.0  # per op, enforced on Dask workers (a hang: the op's records fail)
    batch: int = 3

    def compositions(self) -> list[str]:
        return list(dict.fromkeys(c for per in self.samples.values() for c in per))

    def meta(self) -> dict[str, Any]:
        return {"compositions": self.compositions(), "dtypes": list(self.samples),
                "samples": self.samples, "strategies": list(self.strategies),
                "baseline": BASELINE, "max_in_dims": None, "budget_s": self.budget_s,
                "op_budget_s": self.op_budget_s, "item_timeout_s": self.item_timeout_s,
                "batch": self.batch,
                "entries": "distinct (copies where distinct entries are not valid inputs)",
                "rules": "scoped aten::copy and aten::as_strided_scatter rules around the "
                         "functionalizing strategies' backward, never around builtin"}


#: float32: every sample of every composition, as upstream's tests loop over every sample (a
#: cap, :func:`capped`, is for speed and is written into every record: ``sample_cap``,
#: ``samples_total``); float64 and complex64 on the first sample
DEFAULT_PLAN = Plan({
    "float32": {"vmapvjp": None, "vmapvjpvjp": None, "vmapjvpvjp": None, "vmapjvpall": None,
                "vjpvmap": None},
    "float64": {"vmapvjp": 1},
    "complex64": {"vmapvjp": 1, "vmapjvpall": 1},
})


def capped(plan: Plan, n: int, dtype: str = "float32") -> Plan:
    """``plan`` with at most ``n`` samples per composition at ``dtype`` (for speed; every record
    says so: a capped cell's verdict can be no more than "passes the samples run")."""
    return dataclasses.replace(plan, samples={**plan.samples, dtype: {
        c: n if v is None else min(v, n) for c, v in plan.samples[dtype].items()}})


def plan_from(data: dict[str, Any]) -> Plan:
    return Plan({d: dict(c) for d, c in data["samples"].items()}, tuple(data["strategies"]),
                data["budget_s"], data["op_budget_s"], data["item_timeout_s"], data["batch"])


# ------------------------------------------------------------------------------ one op
def _record(r: runner.CellResult, composition: str, cap: int | None = None,
            total: int | None = None) -> dict[str, Any]:
    """The cell's record with its composition, the plan's ``sample_cap`` for it (None: every
    sample) and ``samples_total`` (the op's samples at that dtype; None: not known)."""
    rec = r.record()
    rec["composition"] = composition
    rec["sample_cap"], rec["samples_total"] = cap, total
    return rec


def _skip(op: str, sample: str, composition: str, strategy: str, dtype: str, why: str) -> dict:
    return _record(runner.CellResult(op, sample, composition, strategy, "not_applicable",
                                     dtype=dtype, message=why), composition)


def _strategy(name: str) -> Any:
    st = get_strategy(name)
    return st if name == BASELINE else st.with_rules()


def run_cell(spec, smp, composition: str, strategy: str, plan: Plan,
             first: Sequence[str] = ()) -> runner.CellResult:
    """One record; where distinct entries are not valid inputs (the reference raises), again
    with copies of the sample."""
    kw = dict(batch=plan.batch, budget_s=plan.budget_s, first=first)
    r = runner.run(spec, composition, _strategy(strategy), smp, **kw)
    if r.reason == "reference_failed":
        copies = runner.run(spec, composition, _strategy(strategy), smp, entries="copies", **kw)
        if copies.reason != "reference_failed":
            copies.detail = (copies.detail + "; " if copies.detail else "") + (
                f"distinct entries invalid ({first_line(r.message, 80)})")
            return copies
    return r


def sweep_op(op_id: str, plan: Plan = DEFAULT_PLAN, only_sample: str | None = None) -> dict[str, Any]:
    """``{"op", "records", "seconds"}`` for one OpInfo (see the module docstring);
    ``only_sample``: that sample's cells only (the deep pass)."""
    start = time.perf_counter()
    op = opinfo.op_by_id(op_id)
    records: list[dict] = []
    for dtype_name, per in plan.samples.items():
        dtype = getattr(torch, dtype_name)
        why = opinfo.not_sweepable(op, dtype)
        smps: list = []
        if not why:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    smps = opinfo.samples(op, dtype)  # every one: the records say how many there are
            except Exception as e:  # noqa: BLE001
                why = f"sample_inputs fails: {first_line(str(e), 160)}"
            if not why and not smps:
                why = "no samples"
        if why:
            records += [_skip(op_id, "-", c, s, dtype_name, why) for c in per for s in plan.strategies]
            continue
        total = len(smps)
        for i, sample in enumerate(smps):
            if only_sample is not None and str(i) != only_sample:
                continue
            if all(n is not None and i >= n for n in per.values()):
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                case = opinfo.case_for(op, sample, str(i))
            for comp, n in per.items():
                if n is not None and i >= n:
                    continue

                def rec(r: runner.CellResult, comp=comp, n=n) -> dict[str, Any]:
                    return _record(r, comp, n, total)

                if isinstance(case, str):
                    records += [rec(runner.CellResult(op_id, str(i), comp, s, "not_applicable",
                                                      dtype=dtype_name, message=case))
                                for s in plan.strategies]
                    continue
                spec, smp = case
                if time.perf_counter() - start > plan.op_budget_s:
                    why = (f"the op's budget of {plan.op_budget_s:g} s was spent before this "
                           "cell started (not a pass)")
                    records += [rec(runner.CellResult(op_id, str(i), comp, s, "timeout",
                                                      dtype=dtype_name, message=why))
                                for s in plan.strategies]
                    continue
                base = run_cell(spec, smp, comp, BASELINE, plan)
                records.append(rec(base))
                first = [base.detail] if base.status in ("fail", "mismatch") else []
                for s in plan.strategies:
                    if s != BASELINE:
                        records.append(rec(run_cell(spec, smp, comp, s, plan, first)))
    return {"op": op_id, "records": records, "seconds": round(time.perf_counter() - start, 2)}


# ------------------------------------------------------------------------------ all ops
def warm_worker() -> None:
    """A Dask worker's warmup: torch's op_db and the strategies, once, before the first op."""
    opinfo.op_db()
    for s in STRATEGIES:
        get_strategy(s)


def _failed(plan: Plan):
    def on_failure(op: str, reason: str, message: str) -> dict[str, Any]:
        return {"op": op, "seconds": None, "records": [
            _record(runner.CellResult(op, "-", c, s, "fail", dtype=d, reason=reason,
                                      error_class=reason, message=first_line(message)), c)
            for d, per in plan.samples.items() for c in per for s in plan.strategies]}
    return on_failure


def partial_path(out: str | Path) -> Path:
    return Path(str(out) + ".partial.jsonl")


def done_ops(out: str | Path) -> dict[str, dict]:
    """The ops an interrupted sweep already finished (``<out>.partial.jsonl``), by id."""
    path = partial_path(out)
    if not path.exists():
        return {}
    done = {}
    for line in path.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            done[item["op"]] = item
    return done


def run_sweep(ops: str | Iterable[str] | None = None, plan: Plan = DEFAULT_PLAN, *,
              out: str | Path | None = None, resume: bool = False, workers: int = 0,
              scheduler: str | None = None, progress: Any = True) -> list[dict[str, Any]]:
    """Every op's ``{"op", "records", "seconds"}`` in op order (see the module docstring).
    ``out``: where the final file goes (its ``.partial.jsonl`` holds the ops done so far);
    ``resume``: skip the ops that file already has (the plan must be the same)."""
    for s in plan.strategies:
        get_strategy(s)
    parse_names("composition", plan.compositions(), COMPOSITIONS)
    ids = opinfo.select_ops(ops)
    done = done_ops(out) if (resume and out is not None) else {}
    if out is not None and not resume:
        partial_path(out).unlink(missing_ok=True)
    if done and out is not None:
        meta_path = partial_path(out).with_suffix(".plan.json")
        if meta_path.exists() and json.loads(meta_path.read_text()) != plan.meta():
            raise BadInputError(f"--resume: {partial_path(out)} was written by another plan; "
                                "rerun without --resume")
    if out is not None:
        partial_path(out).with_suffix(".plan.json").write_text(json.dumps(plan.meta()))
    todo = [i for i in ids if i not in done]

    def save(item: str, result: dict) -> None:
        if out is not None:
            with partial_path(out).open("a") as f:
                f.write(json.dumps(result) + "\n")

    fn = functools.partial(sweep_op, plan=plan)
    results = map_items(fn, todo, workers=workers, scheduler=scheduler,
                        timeout=plan.item_timeout_s, progress=progress, on_failure=_failed(plan),
                        warmup=warm_worker, on_result=save)
    by_op = {**done, **{r["op"]: r for r in results}}
    return [by_op[i] for i in ids]
