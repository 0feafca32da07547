"""The design review's ten objections (issue 28) answered from saved data, for docs/rfc.md.

:func:`load` reads what the answers rest on (each a file of ``data/``, or a computation over one);
:func:`sections` renders, in order: the table "the ten objections" (each row links to its answer
and its evidence), one section per objection (computed evidence, or "unknown, because ..."), the
small PRs the evidence supports today apart from the large change, and what the corpus of users'
in-place code says for core (functorch#1025). Every number is read from the data; nothing is
measured here.
"""

from __future__ import annotations

import json

import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from funcbwd_lab.studies.review import answers as A
from funcbwd_lab.studies.review import answers_corrected as C
from funcbwd_lab.studies.review import prs_users
from funcbwd_lab.studies.review.answers import SWEEP_STRATEGY, TITLES, heading, slug
from funcbwd_lab.studies.review.prs_users import CORPUS_FILE, COST_FILE


# ------------------------------------------------------------------------------ inputs
def load(data_dir: str | Path, evidence: Any, coverage: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every saved input of the answers (a missing file is None); ``coverage``: the OpInfo
    sweep's document (read once by the RFC), summarized by :func:`sweep_facts`."""
    from funcbwd_lab.studies.review import (budget_rerun, cache_bound, cache_hits, callgrind,
                                        compile_tool, compiled_autograd, copy_scenario, subclass,
                                        threads)

    d = Path(data_dir)
    corpus, cost = d / CORPUS_FILE, d / COST_FILE
    return {"subclass": subclass.load(d), "threads": threads.load(d),
            "cache_hits": cache_hits.load(d), "cache_bound": cache_bound.load(d), "compile": compile_tool.load(d),
            "callgrind": callgrind.load(d), "compiled_autograd": compiled_autograd.load(d),
            "copy_scenario": copy_scenario.load(d, evidence), "budget_rerun": budget_rerun.load(d),
            "corpus": json.loads(corpus.read_text()) if corpus.exists() else None,
            "corpus_cost": json.loads(cost.read_text()) if cost.exists() else None,
            "sweep": sweep_facts(coverage), "stale_reruns": stale_reruns(d, coverage)}


def stale_reruns(d: Path, coverage: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The entries the every-sample re-runs of the sweep's one-sample stale cells
    (data/coverage-stale-rerun*.json.gz) find stale on every sample; None without the files."""
    from funcbwd_lab.studies.coverage import data, stale_rerun

    files = ((stale_rerun.FILE_NAME, stale_rerun.stale_cells),
             (stale_rerun.REST_FILE_NAME, stale_rerun.rest_cells))
    if coverage is None or not all((d / name).exists() for name, _ in files):
        return None
    return [r for name, cells in files
            for r in stale_rerun.changes(coverage, data.load(d / name), cells(coverage))
            if r["verdict"] == "stale"]


def sweep_facts(coverage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What objections 1, 6 and 10 read from the OpInfo sweep's records."""
    if coverage is None:
        return None
    from funcbwd_lab.studies.coverage import summary

    records = coverage["records"]
    s = summary.summarize(records)
    comps = s["compositions"]
    per = {st: {k: sum(comps[c].get(st, {}).get(k, 0) for c in comps)
                for k in ("fixes", "inplace_fixes", "regressions", "not_applicable")}
           for st in ("whole", "hooks", SWEEP_STRATEGY)}
    regress = Counter((r["cell"][3], r.get("cause", "")) for r in s["regressions"]
                      if r["strategy"] == SWEEP_STRATEGY)
    causes = {k: [r for r in v if r["strategy"] == SWEEP_STRATEGY]
              for k, v in s["regression_causes"].items()}
    budget, seconds = Counter(), []
    for cell, rs in summary.by_cell(records).items():
        b, t = rs.get("builtin"), rs.get(SWEEP_STRATEGY)
        if b and t and t["status"] == "timeout" and b["status"] == "pass":
            budget[cell[3]] += 1
            seconds.append(b["seconds"])
    return {"per": per, "regressions_by": dict(regress),
            "causes": {k: len(v) for k, v in causes.items() if v},
            "all_causes": {k: (len(v), sorted({r["strategy"] for r in v}))
                           for k, v in s["regression_causes"].items()},
            "budget": dict(budget), "budget_builtin_median_s": statistics.median(seconds)
            if seconds else None, "budget_builtin_max_s": max(seconds, default=None),
            "inplace_left": len(s["inplace_failures"]),
            "inplace_by": {st: summary.inplace_fixed_by(records, st)
                           for st in ("whole", "hooks", SWEEP_STRATEGY)},
            "vmapjvpall_na": comps.get("vmapjvpall", {}).get(SWEEP_STRATEGY, {}).get(
                "not_applicable", 0),
            "vmapjvpall_builtin": comps.get("vmapjvpall", {}).get("builtin", {}),
            "torch": coverage.get("meta", {}).get("torch", "?")}


# ------------------------------------------------------------------------------ the document part
def sections(inputs: Mapping[str, Any], pick: str, retired: Mapping[str, Any],
             deleted: Mapping[str, Any]) -> list[str]:
    """The table, the ten answers, the small PRs and the users' section (Markdown lines)."""
    answers: list[tuple[str, list[str]]] = [
        A.one(inputs, pick, retired, deleted), A.two(inputs), A.three(inputs),
        A.four(inputs, pick), C.five(inputs), C.six(inputs), A.seven(inputs), A.eight(inputs),
        A.nine(inputs), C.ten(inputs, deleted)]
    evidence = {1: "data/coverage.json.gz", 2: "data/review-subclass.json",
                3: "data/review-compile.json", 4: "data/matrix-test-ops.json",
                5: "data/review-compiled-autograd.json" if inputs.get("compiled_autograd") else None,
                6: "data/review-budget-resample.json" if inputs.get("budget_resample")
                else "data/coverage.json.gz", 7: "data/review-cache-hits.json",
                8: "data/review-callgrind.json" if inputs["callgrind"] else None,
                9: "data/review-threads.json", 10: "data/coverage.json.gz"}
    out = ["## The ten objections", ""]
    out += A.para("The design review (issue 28) read this RFC as a core maintainer would; its ten "
              "objections, most damaging first, each with the answer below and the data it rests "
              "on:")
    out += ["| # | objection | answer | evidence |", "|---|---|---|---|"]
    refs = []
    for (n, short, _), (verdict, _) in zip(TITLES, answers):
        ev = evidence[n]
        stem = ev.rsplit("/", 1)[-1].split(".json")[0] if ev else ""
        out.append(f"| [{n}][o{n}] | {short} | {verdict} | "
                   f"{f'[{stem}][e{n}]' if ev else 'none: unknown'} |")
        refs.append(f"[o{n}]: #{slug(heading(n)[4:])}")
        if ev:
            refs.append(f"[e{n}]: ../{ev}")
    out += ["", *refs, ""]
    for (n, _, _), (_, body) in zip(TITLES, answers):
        out += [heading(n), "", *body]
    out += prs_users.prs(inputs, retired)
    out += prs_users.users(inputs.get("corpus"), inputs.get("corpus_cost"))
    return out

