"""The deletable-branches table (issue 17): which of today's hand-written branches in
``torch/csrc/autograd/FunctionsManual.cpp`` would generic functionalization make unnecessary?

Each live site (docs/live-sites.md; ops of group "live": 24 backward and 12 jvp in-place sites,
6 data-dependent controls, and the forward use of matrix_exp's site, registered again but not
counted) is judged per candidate strategy (``traced``, ``per_formula``): its op's ``formula`` is
the site's **fast path alone**, run through the strategy in every applicable scenario (backward
ops: the 8 backward scenarios; jvp ops: the forward-mode ones of
:mod:`funcbwd.run.forward`), every sample, each cell compared with its per-sample loop by
:func:`funcbwd.run.runner.run` (batched args take distinct entries: :mod:`funcbwd.run.entries`).
The same cells run under ``handfixed`` (the hand-written out-of-place path) as the baseline.

Every cell here is checked against the per-sample loop of the **out-of-place path** (each
strategy's ``reference()`` is ``handfixed``, :func:`against_out_of_place`), not of the fast path as
written: for some sites the fast path as written cannot be differentiated twice (core's
``|| GradMode::is_enabled()`` gates, e.g. binary_cross_entropy_with_logits_backward), so it is no
reference for the double-backward scenarios; the out-of-place path is what core runs there.

A site is **deletable** under a strategy iff, in every applicable cell:

* it passes (a cell failing with reason data_dependent makes the verdict "data-dependent");
* the strategy's mechanism ran (``CellResult.mechanism_ran``), or the cell did not need it: the
  fast path as written (``plain``) passes that cell too (e.g. ``vjp_of_vjp`` runs the formula
  outside any vmap level);
* vmap took no slow per-sample fallback that the out-of-place path does not take as well
  (``fallback_ops`` beyond ``handfixed``'s in the same cell);

and its batched cost is at most :data:`COST_LIMIT` times the out-of-place path's (when timed). A
cell the out-of-place path fails too cannot judge the site (deleting the branch loses nothing
there, and nothing shows it would gain): it is listed as *unjudged* (the table's "yes*"), and a
site none of whose cells can be judged is "undetermined".

Cost: median time of the batched first sample, strategy over ``handfixed``, interleaved rounds in
one process with one torch thread (:mod:`funcbwd.measure.timing`). For a backward op it is
``vmap(vjp_fn)(cotangents)``; for a jvp op ``vmap`` over tangents of the op's forward-mode rule
run through the strategy with primals and saved outputs fixed (the tangent part only, the analogue
of ``vjp_fn``; the forward itself is the same for every strategy and would dilute the ratio).
Timings inform the verdict through the 1.2x limit; they are never test assertions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics
import time
import warnings
from typing import Any, Callable, Sequence

import torch
from torch.func import vmap

from funcbwd.ops.live import backward as live_backward
from funcbwd.ops.live import jvp as live_jvp
from funcbwd.ops.live.common import COMMIT, Site
from funcbwd.ops.registry import OpSpec, Sample, get_op
from funcbwd.run import runner
from funcbwd.run.scenarios import names_for
from funcbwd.run.scenario import bind, output_shapes
from funcbwd.strategies import Strategy, get_strategy
from funcbwd.measure import timing

SCHEMA = "funcbwd-deletable/1"
CANDIDATES = ("traced", "per_formula")
BASELINE = "handfixed"
COST_LIMIT = 1.2
IN_PLACE_SITES = 36  # docs/live-sites.md: 24 backward + 12 jvp


def live_sites() -> list[Site]:
    """Every registered live site: backward and control sites, then the jvp ones."""
    return list(live_backward.SITES.values()) + list(live_jvp.SITES.values())


# ------------------------------------------------------------------------------ cells
@functools.cache
def against_out_of_place(name: str) -> Strategy:
    """A fresh instance of strategy ``name`` whose per-sample loop reference is the out-of-place
    path (``handfixed``) instead of the fast path as written; same name, same mechanism."""
    cls = type(get_strategy(name))
    variant = type(f"{cls.__name__}AgainstOutOfPlace", (cls,),
                   {"reference": lambda self: get_strategy(BASELINE),
                    "__doc__": f"{name}, checked against the out-of-place path's per-sample loop."})
    return variant()


@dataclasses.dataclass
class Cells:
    """The computed cells of one site: strategy -> {(sample, scenario): CellResult}."""

    op: str
    by_strategy: dict[str, dict[tuple[str, str], Any]] = dataclasses.field(default_factory=dict)

    def run(self, strategy: str | Strategy, sample: Sample, scenario: str) -> Any:
        """The cell (computed once), for a strategy name or instance (tests pass variants)."""
        st = against_out_of_place(strategy) if isinstance(strategy, str) else strategy
        table = self.by_strategy.setdefault(st.name, {})
        key = (sample.name, scenario)
        if key not in table:
            table[key] = runner.run(self.op, scenario, st, sample)
        return table[key]


def _record(c: Any) -> dict[str, Any]:
    return {"sample": c.sample, "scenario": c.scenario, "status": c.status, "reason": c.reason,
            "message": c.message, "fallback_ops": list(c.fallback_ops), "seconds": round(c.seconds, 3),
            "mechanism": c.mechanism, "mechanism_ran": c.mechanism_ran}


def judge(cells: Cells, spec: OpSpec, strategy: str | Strategy, samples: Sequence[Sample],
          scenarios: Sequence[str]) -> tuple[list[str], list[str], int]:
    """(problems, unjudged, judged) of ``strategy`` on this site, in scenario order: each problem
    is a "not deletable" reason; each unjudged entry a cell the baseline fails too; ``judged``
    counts the applicable cells the baseline passes."""
    problems: list[str] = []
    unjudged: list[str] = []
    judged = 0
    for sc in scenarios:
        for smp in samples:
            c = cells.run(strategy, smp, sc)
            if c.status == "not_applicable":
                continue
            base = cells.run(BASELINE, smp, sc)
            where = f"{sc} [{smp.name}]"
            judged += base.status == "pass"
            if c.status == "fail" and c.reason == "data_dependent":
                problems.append(f"data-dependent ({where}: {c.message})")
            elif base.status != "pass":
                unjudged.append(f"the out-of-place path fails {where} too ({base.reason or base.status}: "
                                f"{base.message})")
            elif c.status == "mismatch":
                problems.append(f"mismatch in {where} ({c.message})")
            elif c.status == "fail":
                problems.append(f"fails {where} ({c.reason}: {c.message})")
            elif c.status == "pass":
                extra = sorted(set(c.fallback_ops) - set(base.fallback_ops))
                ran = c.mechanism_ran
                if ran is False and cells.run("plain", smp, sc).status != "pass":
                    problems.append(f"{get_strategy(strategy).name}'s mechanism did not run in {where} "
                                    f"({getattr(c, 'mechanism', '') or 'nothing recorded'})")
                if extra:
                    problems.append(f"slow fallback in {where} ({', '.join(extra)})")
    return problems, unjudged, judged


def verdict(problems: Sequence[str], unjudged: Sequence[str], judged: int,
            cost_ratio: float | None) -> str:
    """"deletable", "not deletable: <first reason>" or "undetermined: <why>"."""
    if any(p.startswith("data-dependent") for p in problems):
        return "not deletable: " + next(p for p in problems if p.startswith("data-dependent"))
    if problems:
        return "not deletable: " + problems[0]
    if not judged:
        return "undetermined: " + (unjudged[0] if unjudged else "no applicable cell")
    if cost_ratio is not None and cost_ratio > COST_LIMIT:
        return f"not deletable: cost {cost_ratio:.2f}x above {COST_LIMIT}x"
    return "deletable"


# ------------------------------------------------------------------------------ cost
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def batched_callable(spec: OpSpec, smp: Sample, strategy: str, batch: int, seed: int = 0
                     ) -> Callable[[], Any]:
    """The timed call: ``vmap(vjp_fn)(cotangents)`` for a backward op, ``vmap`` over tangents of
    the forward-mode rule run through the strategy (primals and saved outputs fixed) for a jvp op."""
    st = get_strategy(strategy)
    if spec.kind == "jvp":
        with torch.no_grad():
            outs = spec.outputs_tuple(spec.torch_op(*smp.args))
        tangents = tuple(torch.randn((batch, *smp.args[p].shape), generator=_gen(seed + j),
                                     dtype=smp.args[p].dtype) for j, p in enumerate(smp.diff))
        fn = vmap(lambda *t: st.run_formula(spec, spec.formula_args(smp.args, outs, t)))

        def tangent_part() -> Any:
            with st.active():
                return fn(*tangents)

        return tangent_part
    dtype = smp.args[smp.diff[0]].dtype
    cts = tuple(torch.randn((batch, *sh), generator=_gen(seed + i), dtype=dtype)
                for i, sh in enumerate(output_shapes(spec, smp)))
    with st.active():
        _, vjp_fn = st.vjp(bind(spec, st, smp.args, smp.diff), *[smp.args[p] for p in smp.diff])
    fn = vmap(lambda *c: vjp_fn(c))

    def backward_part() -> Any:
        with st.active():
            return fn(*cts)

    return backward_part


def measure_cost(spec: OpSpec, strategies: Sequence[str], *, batch: int = 8, rounds: int = 5,
                 target_s: float = 0.01, max_number: int = 200) -> dict[str, dict[str, Any]]:
    """strategy -> {median_s, rel_iqr, ratio (over the baseline), error}: interleaved rounds of the
    batched first sample, one torch thread."""
    smp = spec.samples()[0]
    labels = list(dict.fromkeys([BASELINE, *strategies]))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        series = []
        for label in labels:
            try:
                fn = batched_callable(spec, smp, label, batch)
            except Exception as e:  # noqa: BLE001 - recorded per label
                fn, err = None, f"{type(e).__name__}: {e}".splitlines()[0][:200]
            s = timing.Timed({"strategy": label}, fn or (lambda: None), contextlib.nullcontext, rounds)
            if fn is None:
                s.error = err
            series.append(s)
        good = [s for s in series if not s.error]
        with warnings.catch_warnings():  # vmap's fallback warnings: the cells already record them
            warnings.simplefilter("ignore")
            timing.run_interleaved(good, "thread_cpu", target_s, max_number)
    finally:
        torch.set_num_threads(threads)
    base = next(s for s in series if s.key["strategy"] == BASELINE)
    out = {}
    for s in series:
        med = timing.median(s.samples)
        out[s.key["strategy"]] = {"median_s": med, "rel_iqr": timing.rel_iqr(s.samples),
                                  "ratio": timing.div(med, timing.median(base.samples)),
                                  "number": s.number, "rounds": len(s.samples), "error": s.error}
    return out


# ------------------------------------------------------------------------------ the table
def site_row(site: Site, strategies: Sequence[str] = CANDIDATES, *, samples: str = "all",
             time_it: bool = True, rounds: int = 5, scenarios: Sequence[str] | None = None
             ) -> dict[str, Any]:
    """Every cell, the cost and the verdict per strategy for one site (``scenarios``: a subset of
    the applicable ones, for quick runs; default all)."""
    spec = get_op(site.op_name)
    smps = spec.samples() if samples == "all" else spec.samples()[:1]
    applicable = names_for([spec.kind])
    scenarios = applicable if scenarios is None else [sc for sc in applicable if sc in scenarios]
    cells = Cells(spec.name)
    judged = {st: judge(cells, spec, st, smps, scenarios) for st in strategies}
    cost = measure_cost(spec, strategies, rounds=rounds) if time_it else {}
    row: dict[str, Any] = {"op": spec.name, "site": site.site_id, "kind": site.kind,
                           "counted": site.counted, "scenarios": scenarios,
                           "samples": [s.name for s in smps], "strategies": {}}
    for st in strategies:
        problems, unjudged, n_judged = judged[st]
        c = cost.get(st, {})
        ratio = c.get("ratio") if c and not c.get("error") and not _nan(c.get("ratio")) else None
        row["strategies"][st] = {
            "verdict": verdict(problems, unjudged, n_judged, ratio), "problems": problems,
            "unjudged": unjudged, "judged_cells": n_judged, "cost_ratio": ratio, "cost": c,
            "cells": [_record(x) for x in cells.by_strategy.get(st, {}).values()]}
    row["baseline_cells"] = [_record(x) for x in cells.by_strategy.get(BASELINE, {}).values()]
    return row


def _nan(x: Any) -> bool:
    return isinstance(x, float) and x != x


def run_table(strategies: Sequence[str] = CANDIDATES, *, ops: Sequence[str] | None = None,
              samples: str = "all", time_it: bool = True, rounds: int = 5,
              scenarios: Sequence[str] | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The whole table: one row per live site (``ops`` restricts it to those op names)."""
    for st in strategies:
        get_strategy(st)  # an unknown name raises, listing the valid ones
    sites = live_sites()
    if ops is not None:
        for o in ops:
            get_op(o)
        sites = [s for s in sites if s.op_name in set(ops)]
    start = time.perf_counter()
    rows = []
    for i, site in enumerate(sites):
        t = time.perf_counter()
        rows.append(site_row(site, strategies, samples=samples, time_it=time_it, rounds=rounds,
                             scenarios=scenarios))
        if progress:
            progress(f"[{i + 1}/{len(sites)}] {site.op_name}: "
                     + "; ".join(f"{st} {rows[-1]['strategies'][st]['verdict'][:60]}" for st in strategies)
                     + f" ({time.perf_counter() - t:.1f}s)")
    result = {"schema": SCHEMA, "torch": torch.__version__, "core_commit": COMMIT,
              "strategies": list(strategies), "baseline": BASELINE, "cost_limit": COST_LIMIT,
              "samples": samples, "timed": time_it, "rounds": rounds if time_it else 0,
              "scenarios": "all applicable" if scenarios is None else list(scenarios),
              "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    result["headlines"] = {st: headline(result, st) for st in strategies}
    return result


# ------------------------------------------------------------------------------ summaries
def counts(result: dict[str, Any], strategy: str) -> dict[str, Any]:
    """Deletable / undetermined / total among the counted in-place sites and the controls, and
    the cost ratios of the deletable in-place sites."""
    def verdicts(pred: Callable[[dict], bool]) -> list[dict]:
        return [r["strategies"][strategy] for r in result["rows"] if pred(r)]

    in_place = verdicts(lambda r: r["kind"] in ("backward", "jvp") and r["counted"])
    controls = verdicts(lambda r: r["kind"] == "control")
    ratios = [v["cost_ratio"] for v in in_place
              if v["verdict"] == "deletable" and v["cost_ratio"] is not None]
    return {"in_place": len(in_place),
            "deletable": sum(v["verdict"] == "deletable" for v in in_place),
            "only_cost": sum(v["verdict"].startswith("not deletable: cost") for v in in_place),
            "deletable_with_unjudged": sum(v["verdict"] == "deletable" and bool(v["unjudged"])
                                           for v in in_place),
            "undetermined": sum(v["verdict"].startswith("undetermined") for v in in_place),
            "controls": len(controls),
            "controls_deletable": sum(v["verdict"] == "deletable" for v in controls),
            "median_cost": statistics.median(ratios) if ratios else None,
            "worst_cost": max(ratios) if ratios else None}


def headline(result: dict[str, Any], strategy: str) -> str:
    """"N of 36 hand-written branches ... would be unnecessary under <strategy>; median cost X,
    worst Y" (N over the in-place sites in the table; controls apart)."""
    c = counts(result, strategy)
    total = IN_PLACE_SITES if c["in_place"] == IN_PLACE_SITES else c["in_place"]
    if not result.get("timed"):
        cost = "cost not measured"
    elif c["median_cost"] is None:
        cost = "no deletable site to cost"
    else:
        cost = (f"median cost {c['median_cost']:.2f}x, worst {c['worst_cost']:.2f}x of the "
                "hand-written path (batched, deletable sites)")
    text = (f"{c['deletable']} of {total} hand-written branches in PyTorch's backward/JVP formulas "
            f"would be unnecessary under {strategy}; {cost}")
    if c["deletable_with_unjudged"]:
        text += (f" ({c['deletable_with_unjudged']} of the {c['deletable']} with cells the "
                 "hand-written path fails too, unjudged)")
    if c["only_cost"]:
        text += (f"; {c['only_cost']} more pass every check but cost more than {COST_LIMIT}x the "
                 "hand-written path")
    if c["undetermined"]:
        text += f"; {c['undetermined']} undetermined (the hand-written path fails every cell)"
    if c["controls"]:
        text += (f". Negative controls (data-dependent): {c['controls_deletable']} of {c['controls']} "
                 "deletable")
    return text


def _cell_text(v: dict[str, Any], width: int) -> str:
    ratio = "" if v["cost_ratio"] is None else f" {v['cost_ratio']:.2f}x"
    if v["verdict"] == "deletable":
        text = ("yes*" if v["unjudged"] else "yes") + ratio
    else:
        text = v["verdict"].replace("not deletable: ", "no: ").replace("undetermined: ", "?: ")
        text += "" if text.startswith("no: cost") else ratio
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(result: dict[str, Any], width: int = 58) -> str:
    """The table as text: in-place sites, then the negative controls and the uncounted extra
    rows apart; one column per strategy (yes + cost ratio, or the first reason); headlines last."""
    strategies = result["strategies"]
    sections = [("in-place sites (backward, jvp)", lambda r: r["kind"] != "control" and r["counted"]),
                ("negative controls (data-dependent)", lambda r: r["kind"] == "control"),
                ("registered again, not counted", lambda r: r["kind"] != "control" and not r["counted"])]
    lines = []
    for title, pred in sections:
        rows = [r for r in result["rows"] if pred(r)]
        if not rows:
            continue
        table = [["site", "kind", *strategies]] + [
            [r["site"], r["kind"], *(_cell_text(r["strategies"][st], width) for st in strategies)]
            for r in rows]
        widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
        lines += ["", f"== {title} ({len(rows)})"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() for t in table]
    lines += ["", "yes* = deletable; some cells are unjudged (the hand-written path fails them too)",
              ""]
    lines += [f"{st}: {result['headlines'][st]}" for st in strategies]
    return "\n".join(lines).lstrip("\n")
