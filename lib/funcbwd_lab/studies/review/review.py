"""Which functionalization strategy, and why: the design review's evidence and its decision.

This is where outcomes are weighed; :mod:`funcbwd_lab.views` only renders what it returns.

* :func:`matrix_evidence`: per strategy, counts over the op x scenario cells of a matrix run. ONE
  basis for every count: a cell is the worst status over ALL its samples. "Fixes over plain" are
  the cells where ``plain`` fails and the strategy passes with its own mechanism ran in every
  sample (:func:`funcbwd_lab.studies.matrix.summary.fixes_over_plain`).
* :func:`cost_evidence`: batched cost vs ``handfixed`` and ``builtin`` and the vmap-off cost, from
  a saved bench result (:func:`funcbwd_lab.studies.bench.results.cost_summary`); what the result
  lacks stays None (not measured), never guessed.
* :func:`probe_evidence`: error safety and operator-library growth, measured live
  (:mod:`funcbwd_lab.studies.review.probes`).
* :func:`collect_evidence` gathers them into an :class:`Evidence` (saved as JSON by
  ``tools/update_readme.py``); :func:`decision` ranks the candidates lexicographically on
  :data:`CRITERIA` and writes the pick and why in three sentences from the numbers (the sentence
  builders live in :mod:`funcbwd_lab.studies.review.text`). Nothing about the pick is typed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.review import probes as review_probes
from funcbwd_lab.studies.review import text as review_text
from funcbwd_lab.studies.bench.config import NO_STRATEGY
from funcbwd_lab.ops import registry
from funcbwd_lab.studies.matrix import matrix
from funcbwd_lab.studies.matrix import summary
from funcbwd_lab.run.runner import CellResult
from funcbwd_lab.strategies import CANDIDATES, REFERENCES  # the registry's roles

#: file names in a data directory (the checkout's ``data/``; the library takes explicit paths)
EVIDENCE_FILE = "review-evidence.json"
BENCH_FILE = "bench-quick.json"
SCHEMA = "funcbwd-review/1"


@dataclasses.dataclass(frozen=True)
class Criterion:
    """One column of the decision: ``better`` is "max" or "min"; ``of`` names the evidence field
    that is the count's denominator (shown as n/of); ``timing`` marks machine-dependent numbers,
    which come after every deterministic criterion so they can only break ties."""

    name: str
    label: str
    unit: str
    better: str
    how: str
    worse: tuple[str, str]  # (one strategy, several) "... is behind the pick" verb phrases
    of: str = ""
    timing: bool = False


CRITERIA: tuple[Criterion, ...] = (
    Criterion("fixes", "fixes over plain", "cells", "max",
              "op x scenario cells where plain fails and the strategy passes with its mechanism "
              "ran in every sample (funcbwd_lab.studies.matrix.summary.fixes_over_plain)",
              ("fixes fewer of the cells where plain fails", "fix fewer of the cells where plain fails"),
              of="plain_failures"),
    Criterion("wrong", "wrong results", "cells", "min",
              "cells whose result differs from torch's own gradient, computed per sample with "
              "torch.func (where torch has no such op: from the per-sample loop); mismatch",
              ("gives more wrong results", "give more wrong results"), of="applicable"),
    Criterion("leaks", "state leaks", "cases", "min",
              "raising backwards after which transform state or bookkeeping changed "
              "(review_probes.error_safety)", ("leaks state after more raising backwards", "leak state after more raising backwards"),
              of="checked"),
    Criterion("no_fallback", "passes without slow fallback", "cells", "max",
              "passing cells in which vmap never took its slow per-sample fallback",
              ("passes fewer cells without vmap's slow fallback",
               "pass fewer cells without vmap's slow fallback"), of="applicable"),
    Criterion("new_ops", "new operators", "ops", "min",
              "operators the dispatcher learns while the strategy runs the corpus "
              "(review_probes.operator_growth): FC/BC surface", ("adds more operators", "add more operators")),
    Criterion("cost_vs_handfixed", "batched vs handfixed", "x time", "min",
              "median over ops of the time ratio to the hand-fixed formula, batch >= 64",
              ("is slower batched", "are slower batched"), timing=True),
    Criterion("cost_vs_builtin", "batched vs builtin", "x time", "min",
              "median over ops of the time ratio to torch's C++ formula, batch >= 64",
              ("is slower batched than builtin", "are slower batched than builtin"),
              timing=True),
    Criterion("vmap_off_us", "vmap-off cost", "µs/node", "min",
              "plain backward with the strategy installed, µs per node over none (median over ops)",
              ("costs more with vmap off", "cost more with vmap off"), timing=True),
)
CRITERION = {c.name: c for c in CRITERIA}


@dataclasses.dataclass
class Evidence:
    """What :func:`decision` weighs. ``strategies``: strategy -> criterion or detail -> value
    (None = not measured); ``basis``: what the counts are over; ``unsolved``: cells no candidate
    passes; ``sources``: where each group of numbers came from."""

    basis: dict[str, Any]
    strategies: dict[str, dict[str, Any]]
    unsolved: list[dict[str, Any]]
    sources: dict[str, str]
    candidates: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **dataclasses.asdict(self)}


def save_evidence(evidence: Evidence, path: str | Path) -> None:
    """Write ``evidence`` as JSON (sorted keys: a rerun that finds the same numbers writes the same file)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(evidence.to_dict(), indent=1, sort_keys=True) + "\n")


def load_evidence(path: str | Path) -> Evidence:
    """The evidence saved by :func:`save_evidence` (``tools/update_readme.py`` writes the
    checkout's ``data/review-evidence.json``)."""
    from funcbwd.errors import BadInputError

    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInputError(f"no saved review evidence at {path}; run `python tools/update_readme.py`") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BadInputError(f"{path} is not review evidence (schema {SCHEMA!r}); "
                            "run `python tools/update_readme.py`")
    data.pop("schema")
    return Evidence(**data)


# ------------------------------------------------------------------------------ matrix evidence
def fallback_names(ops: Iterable[str]) -> list[str]:
    """Fallback op names as recorded, without the sentence's trailing period."""
    return sorted({o.rstrip(".") for o in ops})


def strategy_score(cells: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Counts over one strategy's cells (scenario -> summarized cell): passed, applicable, with
    fallback, failing and wrong scenarios, failure reasons."""
    applicable = {sc: c for sc, c in cells.items() if c["status"] != "not_applicable"}
    passed = [sc for sc, c in applicable.items() if c["status"] == "pass"]
    bad = {sc: c for sc, c in applicable.items() if c["status"] != "pass"}
    return {
        "passed": len(passed), "applicable": len(applicable), "scenarios": len(cells),
        "fallback": [sc for sc in passed if applicable[sc]["fallback_ops"]],
        "fallback_ops": fallback_names(f for c in applicable.values() for f in c["fallback_ops"]),
        "failing": sorted(bad),
        "wrong": sorted(sc for sc, c in bad.items() if c["status"] == "mismatch"),
        "reasons": sorted({c["reason"] or c["status"] for c in bad.values()}),
        "not_applicable": sorted(sc for sc, c in cells.items() if c["status"] == "not_applicable"),
    }


def basis(results: Sequence[CellResult]) -> dict[str, Any]:
    """What the counts are over: ``samples`` is "all" when every op ran every registered sample."""
    ops = list(dict.fromkeys(r.op for r in results))
    seen = {op: {r.sample for r in results if r.op == op} for op in ops}
    registered = {op: {s.name for s in registry.get_op(op).samples()} for op in ops
                  if op in registry.op_names()}
    every = bool(ops) and all(registered.get(op) is not None and registered[op] <= seen[op] for op in ops)
    first = all(len(s) == 1 for s in seen.values())
    return {"samples": "all" if every else ("first" if first else "some"), "ops": ops,
            "scenarios": list(dict.fromkeys(r.scenario for r in results)),
            "strategies": list(dict.fromkeys(r.strategy for r in results)),
            "sample_runs": len(results), "cells": len(matrix.summarize(results))}


def basis_text(b: Mapping[str, Any]) -> str:
    """The basis as a phrase for every place a count appears. Sample runs are counted per
    strategy (op x sample x scenario), the number that is the same wherever the same ops, samples
    and scenarios ran, however many strategies a run compared (their total is said beside it)."""
    which = {"all": "all samples", "first": "the first sample of each op"}.get(b["samples"], "some samples")
    n = max(len(b.get("strategies") or ()), 1)
    return (f"{which} of {len(b['ops'])} ops x {len(b['scenarios'])} scenarios "
            f"({b['sample_runs'] // n} sample runs per strategy, x {n} strategies; a cell passes "
            "only if every sample passes)")


def matrix_evidence(results: Sequence[CellResult]) -> dict[str, dict[str, Any]]:
    """Per strategy over op x scenario cells (worst status over samples): ``applicable``,
    ``passed``, ``without_mechanism`` (passed, mechanism not run in every sample), ``fixes`` and
    ``plain_failures`` (cells where plain fails or is wrong), ``wrong``, ``failed``,
    ``fallback_cells``, ``no_fallback``, ``nesting`` (scenarios in which every applicable op
    passes) and ``fail_reasons`` (reason -> cells)."""
    cells = matrix.summarize(results)
    kinds = summary.fixes_over_plain(results)
    plain_failures = sum(summary.plain_fails(c) for (_, _, st), c in cells.items() if st == "plain")
    out: dict[str, dict[str, Any]] = {}
    for st, k in kinds.items():
        mine = {(op, sc): c for (op, sc, s), c in cells.items() if s == st}
        applicable = [c for c in mine.values() if c["status"] != "not_applicable"]
        passed = [c for c in applicable if c["status"] == "pass"]
        scenarios = list(dict.fromkeys(sc for (_, sc) in mine))
        full = [sc for sc in scenarios if all(c["status"] in ("pass", "not_applicable")
                                             for (_, s), c in mine.items() if s == sc)]
        out[st] = {
            "applicable": len(applicable), "passed": len(passed),
            "without_mechanism": len(k["without_mechanism"]),
            "fixes": len(k["fixes"]), "plain_failures": plain_failures if "plain" in kinds else None,
            "wrong": sum(c["status"] == "mismatch" for c in applicable),
            "wrong_inherited": sum(c["status"] == "mismatch" and c["reason"] == "legacy_wrong"
                                   for c in applicable),
            "failed": sum(c["status"] == "fail" for c in applicable),
            "fallback_cells": sum(bool(c["fallback_ops"]) for c in passed),
            "no_fallback": sum(not c["fallback_ops"] for c in passed),
            "nesting": len(full), "nesting_scenarios": full,
            "fail_reasons": dict(sorted(Counter(c["reason"] or c["status"] for c in applicable
                                                if c["status"] != "pass").items())),
        }
    return out


def unsolved_cells(results: Sequence[CellResult], candidates: Sequence[str] = CANDIDATES
                   ) -> list[dict[str, Any]]:
    """Cells that no candidate passes (worst over samples), grouped per op and failure reason:
    ``{"op", "reason", "scenarios", "builtin_passes"}`` (scenarios where torch's own formula passes)."""
    cells = matrix.summarize(results)
    cands = list(dict.fromkeys(st for (_, _, st) in cells if st in candidates))
    groups: dict[tuple[str, str], list[str]] = {}
    for op, sc in dict.fromkeys((op, sc) for (op, sc, _) in cells):
        mine = [cells[(op, sc, st)] for st in cands if (op, sc, st) in cells]
        if not any(c["status"] != "not_applicable" for c in mine) or any(c["status"] == "pass" for c in mine):
            continue
        if all(c["status"] in ("uninformative", "not_applicable") for c in mine):
            continue  # no evidence either way (torch's answer is zero), not a cell left unsolved
        if not summary.plain_fails(cells.get((op, sc, "plain"), {"status": "pass"})) and \
                cells.get((op, sc, "plain"), {}).get("reason") == "legacy_wrong":
            continue  # the formula's own error, not a transform failure: the notes say so
        reasons = Counter(c["reason"] or c["status"] for c in mine if c["status"] != "not_applicable")
        groups.setdefault((op, reasons.most_common(1)[0][0]), []).append(sc)
    return [{"op": op, "reason": reason, "scenarios": scs,
             "builtin_passes": [sc for sc in scs if cells.get((op, sc, "builtin"), {}).get("status") == "pass"]}
            for (op, reason), scs in groups.items()]


# ------------------------------------------------------------------------------ cost and probes
def _number(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))) else float(x)


def cost_evidence(bench: Mapping[str, Any] | None, source: str = "") -> tuple[dict[str, dict[str, Any]], str]:
    """Per bench label: ``cost_vs_handfixed``, ``cost_vs_builtin`` (median over ops of the batched
    time ratio, batch >= 64), ``vmap_off_us`` and ``vmap_off_noise_us`` (µs per node over no
    strategy, and the run's spread on that difference: the IQRs per node of the label's and the
    baseline's samples added, median over ops), ``ops_timed``, ``ops_failing``. Returns
    (per label, where from); without a result every value is None and the text says why."""
    if bench is None:
        return {}, "no saved bench result: batched and vmap-off costs not measured"
    costs = bench_results.cost_summary(dict(bench))
    rows = bench_results.overhead_rows(dict(bench))
    per_node = {(r["op"], r["label"]): r["rel_iqr"] * r["median_s"] / r["nodes"] * 1e6 for r in rows}
    spread: dict[str, list[float]] = {}  # a difference of two medians: both series' spreads
    for (op, label), v in per_node.items():
        spread.setdefault(label, []).append(v + per_node.get((op, NO_STRATEGY), 0.0))
    out = {}
    for label, c in costs.items():
        noise = sorted(spread.get(label, []))
        out[label] = {"cost_vs_handfixed": _number(c.get("batched_vs_handfixed")),
                      "cost_vs_builtin": _number(c.get("batched_vs_builtin")),
                      "vmap_off_us": _number(c.get("vmap_off_us_per_node")),
                      "vmap_off_noise_us": noise[len(noise) // 2] if noise else None,
                      "ops_timed": list(c.get("ops_timed", [])), "ops_failing": list(c.get("ops_failing", []))}
    env = bench.get("environment", {})
    return out, (f"{source or 'a saved bench result'} (torch {env.get('torch', '?')}, "
                 f"{bench.get('config', {}).get('name', '?')} run; batched ratios at batch >= 64)")


def probe_evidence(candidates: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per candidate, measured live: ``leaks`` / ``checked`` / ``leak_cases`` (error safety) and
    ``new_ops`` / ``new_op_names`` (operators added over the corpus)."""
    growth = review_probes.operator_growth(candidates)
    out = {}
    for st in candidates:
        safety = review_probes.error_safety(st)
        out[st] = {"leaks": len(safety["leaks"]), "checked": safety["checked"],
                   "leak_cases": safety["leaks"], "new_ops": len(growth[st]),
                   "new_op_names": growth[st]}
    return out


def collect_evidence(results: Sequence[CellResult], bench: Mapping[str, Any] | None = None, *,
                     bench_source: str = "", probes: bool = True,
                     candidates: Sequence[str] = CANDIDATES) -> Evidence:
    """Everything :func:`decision` weighs, from a matrix run (use every sample: that is the basis
    the workbench states), a saved bench result (or None) and, with ``probes``, the live probes."""
    mx = matrix_evidence(results)
    cands = [c for c in candidates if c in mx]
    costs, cost_source = cost_evidence(bench, bench_source)
    probed = probe_evidence(cands) if probes else {}
    strategies = {}
    for st in mx:
        strategies[st] = {**mx[st], **{k: None for k in ("leaks", "checked", "new_ops")},
                          **{c.name: None for c in CRITERIA if c.timing}, **costs.get(st, {}),
                          **probed.get(st, {})}
    sources = {"matrix": basis_text(basis(results)), "costs": cost_source,
               "probes": (f"measured live: error_safety (formulas raising at 4 points, Exception and "
                          "KeyboardInterrupt, 2 scenarios) and operator_growth over "
                          f"{len(review_probes.corpus_ops())} "
                          "corpus formulas" if probes else "not measured")}
    return Evidence(basis(results), strategies, unsolved_cells(results, cands), sources, cands)


def compare_evidence(a: Evidence, b: Evidence, timing: bool = False) -> list[str]:
    """Differences between two evidences on the criteria (timings only with ``timing``) and the
    unsolved cells, one line each; [] when they agree."""
    out = []
    names = [c.name for c in CRITERIA if timing or not c.timing] + ["plain_failures", "applicable"]
    for st in sorted(set(a.strategies) | set(b.strategies)):
        x, y = a.strategies.get(st, {}), b.strategies.get(st, {})
        out += [f"{st}.{n}: {x.get(n)!r} != {y.get(n)!r}" for n in names if x.get(n) != y.get(n)]
    if a.unsolved != b.unsolved:
        out.append(f"unsolved: {a.unsolved!r} != {b.unsolved!r}")
    return out


# ------------------------------------------------------------------------------ ranking
def rank_strategies(values: Mapping[str, Mapping[str, Any]],
                    criteria: Sequence[Criterion] = CRITERIA) -> list[dict[str, Any]]:
    """Rank strategies lexicographically by ``criteria`` (most important first); a None (not
    measured) sorts last on its criterion, a tie on every criterion is broken by name. Rows:
    rank, strategy, each criterion's value and ``ahead_of_next_by`` (the criterion that put the
    strategy ahead of the next one)."""
    def key(st: str) -> tuple:
        out = []
        for c in criteria:
            v = values[st].get(c.name)
            out.append((1, 0.0) if v is None else (0, -float(v) if c.better == "max" else float(v)))
        return tuple(out)

    order = sorted(values, key=lambda st: (key(st), st))
    rows = []
    for i, st in enumerate(order):
        ahead = ""
        if i + 1 < len(order):
            ahead = next((c.name for c, a, b in zip(criteria, key(st), key(order[i + 1])) if a != b), "")
        rows.append({"rank": i + 1, "strategy": st, **{c.name: values[st].get(c.name) for c in criteria},
                     "ahead_of_next_by": ahead})
    return rows


def behind_on(pick: Mapping[str, Any], other: Mapping[str, Any],
              criteria: Sequence[Criterion] = CRITERIA) -> str:
    """The first criterion on which ``other`` is worse than ``pick`` ("" if on none)."""
    for c in criteria:
        a, b = pick.get(c.name), other.get(c.name)
        if a is None and b is None or a == b:
            continue
        if b is None or (a is not None and (b < a if c.better == "max" else b > a)):
            return c.name
        return ""  # other is better here: the pick is ahead only on a later criterion
    return ""


@dataclasses.dataclass
class Decision:
    """The pick and why: ``rows`` (ranked candidates, each criterion's value and ``behind_on``,
    the criterion on which it loses to the pick), ``references`` (the registry's reference rows,
    :data:`funcbwd_lab.strategies.REFERENCES`, for context, not ranked), three ``sentences``, the ``unsolved`` cells, the ``basis`` and
    ``notes`` explaining surprising values."""

    pick: str
    runner_up: str | None
    rows: list[dict[str, Any]]
    references: list[dict[str, Any]]
    criteria: tuple[Criterion, ...]
    sentences: tuple[str, str, str]
    unsolved: list[dict[str, Any]]
    basis: str
    sources: dict[str, str]
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ranking(self) -> list[str]:
        return [r["strategy"] for r in self.rows]


def decision(evidence: Evidence, criteria: Sequence[Criterion] = CRITERIA) -> Decision:
    """Rank the candidates of ``evidence`` on ``criteria`` and explain the first one."""
    from funcbwd.errors import FuncbwdError

    values = {st: evidence.strategies[st] for st in evidence.candidates if st in evidence.strategies}
    if not values:
        raise FuncbwdError("no candidate strategy in the evidence; candidates: " + ", ".join(CANDIDATES))
    ranked = rank_strategies(values, criteria)
    pick = ranked[0]["strategy"]
    for row in ranked:
        row["behind_on"] = "" if row["strategy"] == pick else behind_on(values[pick], values[row["strategy"]], criteria)
        row["details"] = values[row["strategy"]]
    refs = [{"strategy": st, **{c.name: evidence.strategies[st].get(c.name) for c in criteria},
             "details": evidence.strategies[st]} for st in REFERENCES if st in evidence.strategies]
    runner = ranked[1]["strategy"] if len(ranked) > 1 else None
    sentences = review_text.sentences(ranked, criteria, evidence)
    return Decision(pick, runner, ranked, refs, tuple(criteria), sentences, evidence.unsolved,
                    basis_text(evidence.basis), dict(evidence.sources),
                    review_text.notes(ranked + refs, [c.name for c in criteria if c.timing]))
