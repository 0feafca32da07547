"""The deletable-branches table (issue 17): which of today's hand-written branches in
``torch/csrc/autograd/FunctionsManual.cpp`` would generic functionalization make unnecessary?

Each live site (docs/live-sites.md; ops of group "live": 24 backward and 12 jvp in-place sites,
6 data-dependent controls, and the forward use of matrix_exp's site, registered again but not
counted) is judged per candidate strategy (``traced``, ``per_formula``): its op's ``formula`` is
the site's **fast path alone**, run through the strategy in every applicable scenario (backward
ops: the 8 backward scenarios; jvp ops: the forward-mode ones of
:mod:`funcbwd_lab.run.forward`), every sample, each cell compared with its per-sample loop by
:func:`funcbwd_lab.run.runner.run` (batched args take distinct entries: :mod:`funcbwd_lab.run.entries`).
The same cells run under ``handfixed`` (the hand-written out-of-place path) as the baseline.

Every cell here is checked against the per-sample loop of the **out-of-place path** (each
strategy's ``reference()`` is ``handfixed``, :func:`against_out_of_place`), not of the fast path as
written: for some sites the fast path as written cannot be differentiated twice (core's
``|| GradMode::is_enabled()`` gates, e.g. binary_cross_entropy_with_logits_backward), so it is no
reference for the double-backward scenarios; the out-of-place path is what core runs there.

A site is **deletable** under a strategy iff :data:`CRITERION` holds (stated there once);
:func:`judge_cell` applies it to one cell, :func:`fallback_split` is its fallback part (the one
place that decides which slow fallbacks disqualify), :func:`verdict` and :func:`blocker` give the
site's verdict and its classified reason (:data:`BLOCKERS`). "Mechanism ran or not needed": the
cell's ``mechanism_ran``, or the fast path as written (``plain``) passes that cell too (e.g.
``vjp_of_vjp`` runs the formula outside any vmap level). A cell the out-of-place path fails too
cannot judge the site: it is *unjudged* (the table's "yes*"), and a site none of whose cells can
be judged is "undetermined". :func:`rejudge` recomputes a saved table from its cells.

Cost: the batched time of the first sample, strategy over ``handfixed``
(:mod:`funcbwd_lab.studies.deletable.cost`). Summaries for the views: :func:`counts`,
:func:`headline`, :func:`not_cleared`, :func:`blocker_tally`, :func:`shared_fallback_sites`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from funcbwd.errors import BadInputError
from funcbwd_lab.studies.deletable.cost import measure_cost
from funcbwd_lab.ops.live import backward as live_backward
from funcbwd_lab.ops.live import jvp as live_jvp
from funcbwd_lab.ops.live.common import COMMIT, Site
from funcbwd_lab.ops.registry import OpSpec, Sample, get_op
from funcbwd_lab.run import outcomes, runner
from funcbwd_lab.run.scenarios import names_for
from funcbwd_lab.strategies import Strategy, get_strategy

SCHEMA = "funcbwd-deletable/2"  # 2: classified problems (blockers) and shared fallbacks per strategy
CANDIDATES = ("traced", "per_formula")
BASELINE = "handfixed"
COST_LIMIT = 1.2
IN_PLACE_SITES = 36  # docs/live-sites.md: 24 backward + 12 jvp

#: What "deletable" means, stated once: docs/live-sites.md quotes it, the README block, the report
#: and the CLI print it; :func:`judge_cell` and :func:`verdict` compute it.
CRITERION = (
    "A hand-written branch is deletable under a strategy when the fast path alone, run by that "
    "strategy, passes every applicable scenario and sample (each compared with the per-sample loop "
    "of the out-of-place path), with the strategy's mechanism having run wherever the fast path as "
    "written fails, with no slow per-sample fallback of vmap that today's hand-written path does "
    f"not take as well, and at a batched cost of at most {COST_LIMIT}x the hand-written path's. A "
    "slow fallback the hand-written path takes too does not disqualify (deleting the branch loses "
    "nothing) but is counted apart.")

#: The classified reason a site is not deletable: every failure reason of
#: :data:`funcbwd_lab.run.outcomes.REASONS`, plus this table's own.
BLOCKERS = {**{k: v for k, v in outcomes.REASONS.items() if k},
            "mismatch": "a result differs from the per-sample loop",
            "mechanism_not_run": "passes only where the strategy's mechanism did not run and the fast path fails",
            "slow_fallback": "vmap's slow per-sample fallback, which the hand-written path does not take",
            "cost": f"batched cost above {COST_LIMIT}x the hand-written path",
            "undetermined": "the hand-written path fails every applicable cell"}


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
                   {"reference": lambda self: BASELINE,
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


def fallback_split(fallback_ops: Sequence[str], baseline_fallback_ops: Sequence[str]
                   ) -> tuple[list[str], list[str]]:
    """The fallback part of :data:`CRITERION` for one passing cell: (disqualifying, shared) ops.
    An op vmap ran through its slow per-sample fallback disqualifies unless the hand-written
    path's cell took it too; those shared ops are returned apart."""
    mine, base = set(fallback_ops), set(baseline_fallback_ops)
    return sorted(mine - base), sorted(mine & base)


@dataclasses.dataclass
class Judgement:
    """One strategy on one site: ``problems`` (classified: reason, where, ops, text), ``unjudged``
    (cells the baseline fails too), ``judged`` (applicable cells the baseline passes) and
    ``shared`` (passing cells whose slow fallback the baseline takes too: where, ops)."""

    problems: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    unjudged: list[str] = dataclasses.field(default_factory=list)
    judged: int = 0
    shared: list[dict[str, Any]] = dataclasses.field(default_factory=list)


#: the op vmap names when it has neither a batching rule nor a usable fallback for it
_NO_RULE_RE = re.compile(r"[Bb]atching rule (?:not implemented )?for (\w+::\w+(?:\.\w+)?)")


def _problem(reason: str, where: str, text: str, ops: Sequence[str] = ()) -> dict[str, Any]:
    return {"reason": reason, "where": where, "ops": list(ops), "text": text}


def judge_cell(c: dict[str, Any], base: dict[str, Any], plain_status: Callable[[], str], name: str,
               into: Judgement) -> None:
    """Apply :data:`CRITERION` to one applicable cell (records as :func:`_record` writes them):
    add its problem, unjudged note or shared fallback to ``into``. ``plain_status()`` (the fast
    path as written, asked only for a pass whose mechanism did not run) says whether the
    mechanism was needed there."""
    where = f"{c['scenario']} [{c['sample']}]"
    into.judged += base["status"] == "pass"
    if c["status"] == "fail" and c["reason"] == "data_dependent":
        into.problems.append(_problem("data_dependent", where, f"data-dependent ({where}: {c['message']})"))
    elif base["status"] != "pass":
        into.unjudged.append(f"the out-of-place path fails {where} too ({base['reason'] or base['status']}: "
                             f"{base['message']})")
    elif c["status"] == "mismatch":
        into.problems.append(_problem("mismatch", where, f"mismatch in {where} ({c['message']})"))
    elif c["status"] == "fail":
        reason = c["reason"] if c["reason"] in BLOCKERS else "other"
        into.problems.append(_problem(reason, where, f"fails {where} ({c['reason']}: {c['message']})",
                                      _NO_RULE_RE.findall(c["message"])[:1]))
    elif c["status"] == "pass":
        if c["mechanism_ran"] is False and plain_status() != "pass":
            into.problems.append(_problem(
                "mechanism_not_run", where, f"{name}'s mechanism did not run in {where} "
                f"({c.get('mechanism') or 'nothing recorded'})"))
        disqualifying, shared = fallback_split(c["fallback_ops"], base["fallback_ops"])
        if disqualifying:
            into.problems.append(_problem("slow_fallback", where,
                                          f"slow fallback in {where} ({', '.join(disqualifying)})", disqualifying))
        if shared:
            into.shared.append({"where": where, "ops": shared})


def judge(cells: Cells, spec: OpSpec, strategy: str | Strategy, samples: Sequence[Sample],
          scenarios: Sequence[str]) -> Judgement:
    """``strategy`` on this site, in scenario order, every applicable cell through
    :func:`judge_cell`."""
    name = get_strategy(strategy).name if isinstance(strategy, str) else strategy.name
    out = Judgement()
    for sc in scenarios:
        for smp in samples:
            c = cells.run(strategy, smp, sc)
            if c.status == "not_applicable":
                continue
            base = cells.run(BASELINE, smp, sc)
            judge_cell(_record(c), _record(base), lambda: cells.run("plain", smp, sc).status, name, out)
    return out


def deciding_problem(problems: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The problem a verdict names: the first data-dependent one, else the first."""
    return next((p for p in problems if p["reason"] == "data_dependent"), problems[0] if problems else None)


def verdict(problems: Sequence[dict[str, Any]], unjudged: Sequence[str], judged: int,
            cost_ratio: float | None) -> str:
    """"deletable", "not deletable: <the deciding problem>" or "undetermined: <why>"."""
    first = deciding_problem(problems)
    if first:
        return "not deletable: " + first["text"]
    if not judged:
        return "undetermined: " + (unjudged[0] if unjudged else "no applicable cell")
    if cost_ratio is not None and cost_ratio > COST_LIMIT:
        return f"not deletable: cost {cost_ratio:.2f}x above {COST_LIMIT}x"
    return "deletable"


def blocker(problems: Sequence[dict[str, Any]], judged: int, cost_ratio: float | None
            ) -> dict[str, Any] | None:
    """The verdict's reason, classified (:data:`BLOCKERS`): reason, where, ops, and the cost
    ratio; None for a deletable site. Follows :func:`verdict` case by case."""
    first = deciding_problem(problems)
    if first:
        return {**first, "cost_ratio": cost_ratio}
    if not judged:
        return {"reason": "undetermined", "where": "", "ops": [], "text": "", "cost_ratio": cost_ratio}
    if cost_ratio is not None and cost_ratio > COST_LIMIT:
        return {"reason": "cost", "where": "", "ops": [], "text": "", "cost_ratio": cost_ratio}
    return None


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
    cost = measure_cost(spec, strategies, BASELINE, rounds=rounds) if time_it else {}
    row: dict[str, Any] = {"op": spec.name, "site": site.site_id, "kind": site.kind,
                           "counted": site.counted, "scenarios": scenarios,
                           "samples": [s.name for s in smps], "strategies": {}}
    for st in strategies:
        j = judged[st]
        c = cost.get(st, {})
        ratio = c.get("ratio") if c and not c.get("error") and not _nan(c.get("ratio")) else None
        row["strategies"][st] = {
            "verdict": verdict(j.problems, j.unjudged, j.judged, ratio),
            "blocker": blocker(j.problems, j.judged, ratio), "problems": j.problems,
            "shared_fallbacks": j.shared, "unjudged": j.unjudged, "judged_cells": j.judged,
            "cost_ratio": ratio, "cost": c, "cells": _saved_cells(cells, st)}
    row["baseline_cells"] = [_record(x) for x in cells.by_strategy.get(BASELINE, {}).values()]
    return row


def _saved_cells(cells: Cells, strategy: str) -> list[dict[str, Any]]:
    """The strategy's cell records, each with the fast path's status as written (``plain_status``)
    where :func:`judge_cell` asked for it, so :func:`rejudge` needs nothing else."""
    plain = cells.by_strategy.get("plain", {})
    out = []
    for key, x in cells.by_strategy.get(strategy, {}).items():
        rec = _record(x)
        if key in plain:
            rec["plain_status"] = plain[key].status
        out.append(rec)
    return out


def rejudge(result: dict[str, Any]) -> dict[str, Any]:
    """Recompute, in place, every verdict, blocker, problem and shared-fallback list and the
    headlines of a saved table from its saved cells by today's :data:`CRITERION` (the saved cost
    ratios stand): a change of the criterion needs no re-run. Returns ``result``."""
    for r in result["rows"]:
        base = {(c["sample"], c["scenario"]): c for c in r["baseline_cells"]}
        for st, v in r["strategies"].items():
            j = Judgement()
            for c in v["cells"]:
                if c["status"] != "not_applicable":
                    judge_cell(c, base[(c["sample"], c["scenario"])], lambda c=c: _plain_status(c, r), st, j)
            v.update(verdict=verdict(j.problems, j.unjudged, j.judged, v["cost_ratio"]),
                     blocker=blocker(j.problems, j.judged, v["cost_ratio"]), problems=j.problems,
                     shared_fallbacks=j.shared, unjudged=j.unjudged, judged_cells=j.judged)
    result["schema"] = SCHEMA
    result["headlines"] = {st: headline(result, st) for st in result["strategies"]}
    return result


def _plain_status(c: dict[str, Any], row: dict[str, Any]) -> str:
    if "plain_status" not in c:
        raise BadInputError(f"{row['site']}: a saved cell ({c['scenario']} [{c['sample']}]) passed without "
                            "the mechanism but lacks the fast path's own status (plain_status); recompute "
                            "the table: python -m funcbwd_lab deletable --out data/live-deletable.json --force")
    return c["plain_status"]


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
            verdicts = rows[-1]["strategies"]
            progress(f"[{i + 1}/{len(sites)}] {site.site_id}: " + "; ".join(
                f"{st} {(verdicts[st]['blocker'] or {'reason': 'deletable'})['reason']}" for st in strategies)
                + f" ({time.perf_counter() - t:.1f}s)")
    result = {"schema": SCHEMA, "torch": torch.__version__, "core_commit": COMMIT,
              "strategies": list(strategies), "baseline": BASELINE, "cost_limit": COST_LIMIT,
              "samples": samples, "timed": time_it, "rounds": rounds if time_it else 0,
              "scenarios": "all applicable" if scenarios is None else list(scenarios),
              "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    result["headlines"] = {st: headline(result, st) for st in strategies}
    return result


# ------------------------------------------------------------------------------ summaries
def _in_place(r: dict[str, Any]) -> bool:
    return r["kind"] in ("backward", "jvp") and r["counted"]


def shared_fallbacks(v: dict[str, Any], baseline_cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The passing cells of one strategy's saved verdict ``v`` whose slow fallback the hand-written
    path takes too (where, ops), recomputed by :func:`fallback_split` from the saved cells of both
    paths (:func:`judge_cell` saved the same list as ``v["shared_fallbacks"]``)."""
    base = {(c["sample"], c["scenario"]): c for c in baseline_cells}
    out = []
    for c in v["cells"]:
        b = base.get((c["sample"], c["scenario"]))
        if c["status"] == "pass" and b is not None and b["status"] == "pass":
            shared = fallback_split(c["fallback_ops"], b["fallback_ops"])[1]
            if shared:
                out.append({"where": f"{c['scenario']} [{c['sample']}]", "ops": shared})
    return out


def check_schema(result: dict[str, Any]) -> None:
    """A saved table must be of this :data:`SCHEMA` (classified blockers, shared fallbacks)."""
    if result.get("schema") != SCHEMA:
        raise BadInputError(f"the saved deletable table has schema {result.get('schema')!r}, this "
                            f"funcbwd reads {SCHEMA!r}; recompute it: python -m funcbwd_lab deletable "
                            "--out data/live-deletable.json --force")


def shared_fallback_sites(result: dict[str, Any], strategy: str) -> list[tuple[str, list[str]]]:
    """(site, ops) for every deletable counted in-place site whose slow fallback the hand-written
    path takes too (not disqualifying by :data:`CRITERION`, shown apart)."""
    out = []
    for r in result["rows"]:
        v = r["strategies"].get(strategy)
        if v and _in_place(r) and v["verdict"] == "deletable":
            ops = sorted({op for f in v["shared_fallbacks"] for op in f["ops"]})
            if ops:
                out.append((r["site"], ops))
    return out


def counts(result: dict[str, Any], strategy: str) -> dict[str, Any]:
    """Deletable / undetermined / total among the counted in-place sites and the controls, how
    many deletable sites share a slow fallback with the hand-written path, and the cost ratios of
    the deletable in-place sites."""
    def verdicts(pred: Callable[[dict], bool]) -> list[dict]:
        return [r["strategies"][strategy] for r in result["rows"] if pred(r)]

    in_place = verdicts(_in_place)
    controls = verdicts(lambda r: r["kind"] == "control")
    ratios = [v["cost_ratio"] for v in in_place
              if v["verdict"] == "deletable" and v["cost_ratio"] is not None]
    return {"in_place": len(in_place),
            "deletable": sum(v["verdict"] == "deletable" for v in in_place),
            "shared_fallback": len(shared_fallback_sites(result, strategy)),
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
    worst Y" (N over the in-place sites in the table, by :data:`CRITERION`; controls apart)."""
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
            f"would be unnecessary under {strategy}")
    if c["shared_fallback"]:
        text += (f" ({c['shared_fallback']} of them {'shares' if c['shared_fallback'] == 1 else 'share'} "
                 "a slow fallback with today's hand-written path)")
    text += f"; {cost}"
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


def not_cleared(result: dict[str, Any], strategy: str, controls: bool = True) -> list[dict[str, Any]]:
    """Every site not deletable under ``strategy`` (the counted in-place sites, then the controls
    when ``controls``): site, kind, and its classified blocker (reason, where, ops, cost ratio)."""
    rows = [r for r in result["rows"] if _in_place(r)]
    rows += [r for r in result["rows"] if controls and r["kind"] == "control"]
    out = []
    for r in rows:
        v = r["strategies"].get(strategy)
        if v and v["verdict"] != "deletable":
            out.append({"site": r["site"], "kind": r["kind"], **v["blocker"]})
    return out


def blocker_tally(result: dict[str, Any], strategy: str) -> dict[str, int]:
    """reason -> number of counted in-place sites it blocks under ``strategy``, most first."""
    tally: dict[str, int] = {}
    for b in not_cleared(result, strategy, controls=False):
        tally[b["reason"]] = tally.get(b["reason"], 0) + 1
    return dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))
