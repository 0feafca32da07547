""""What would the PR look like?": a generated RFC for the design review's question.

:func:`document` writes Markdown (every line <= 100 columns) from the saved data of a data
directory, nothing measured live, so the same files give the same document (``docs/rfc.md`` is
one generation, checked by ``tests/test_rfc.py``). Sections, each from its own module:

* the pick on C++ numbers (:mod:`.cpp_decision`, ``data/cpp.json``; "C++ cost: not yet measured"
  without it), the candidates with the status quo and the out-of-place rewrite
  (:mod:`.corrections`), and the Python prototype's ranking, labelled as Python
  (:func:`funcbwd_lab.studies.review.review.decision` of ``review-evidence.json``);
* what changes in core and the files cited (:mod:`.rfc_core`); which upstream entries it retires
  and which branches it deletes (:mod:`.rfc_evidence`); what it costs (below, Python, with
  :mod:`.cpp_cost`'s estimates); the ten objections, the small PRs and users' code
  (:mod:`.objections`); what this version corrects (:mod:`.corrections`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.deletable import deletable
from funcbwd_lab.studies.review import corrections, cpp_cost, cpp_decision, review, rfc_core
from funcbwd_lab.studies.review import rfc_evidence
from funcbwd_lab.studies.review import text as review_text
from funcbwd_lab.studies.review.rfc_evidence import (COVERAGE_FILE, LIVE_FILE,  # noqa: F401
                                                      NOT_MEASURED, SWEEP_STRATEGY, deleted)
from funcbwd_lab.tables import WIDTH, paragraph

COMPILED_FILE = "compiled.json"


# ------------------------------------------------------------------------------ inputs
def load(data_dir: str | Path) -> dict[str, Any]:
    """Every saved input the document reads (a missing optional file is None)."""
    from funcbwd_lab.studies.prs import effects, upstream
    from funcbwd_lab.studies.review import (branches, budget_resample, copy_repro,
                                            inplace_formulas, objections, trigger)

    d = Path(data_dir)
    evidence = review.load_evidence(d / review.EVIDENCE_FILE)
    out: dict[str, Any] = {"evidence": evidence, "cpp": cpp_cost.load_inputs(d)}
    out["live"] = json.loads((d / LIVE_FILE).read_text()) if (d / LIVE_FILE).exists() else None
    out["compiled"] = (json.loads((d / COMPILED_FILE).read_text())
                       if (d / COMPILED_FILE).exists() else None)
    out["coverage"] = _coverage(d / COVERAGE_FILE)
    out["cpp_study"] = cpp_decision.load(d, evidence)
    out.update(prs_upstream=upstream.load(d), prs_effects=effects.load(d),
               branches=branches.load(d), trigger=trigger.load(d),
               inplace_formulas=inplace_formulas.load(d), budget_resample=budget_resample.load(d),
               copy_repro=copy_repro.load(d))
    out["objections"] = objections.load(d, evidence, out["coverage"])
    return out


def _coverage(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    from funcbwd_lab.studies.coverage import data

    return data.load(path)


def retired(coverage: Mapping[str, Any] | None, pick: str,
            fallback: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`funcbwd_lab.studies.review.rfc_evidence.retired`."""
    return rfc_evidence.retired(coverage, pick, fallback)


# ------------------------------------------------------------------------------ sections
def _p(text: str, width: int = WIDTH) -> list[str]:
    return [paragraph(text, width), ""]


def _bullet(text: str, width: int = WIDTH) -> str:
    return paragraph(f"- {text}", width, "", "  ")


def _cost_section(inputs: Mapping[str, Any], pick: str) -> list[str]:
    out = ["## What it costs (Python)", ""]
    bench = inputs["cpp"].get("bench")
    d = deleted(inputs.get("live"), pick)
    ests = [e for e in cpp_cost.estimates(inputs["cpp"]) if e.candidate in (pick, "python floor")]
    first = next((e for e in ests if e.candidate == pick), None)
    if bench is None or first is None or first.value is None:
        return out + _p(f"**{NOT_MEASURED}**: no saved bench result (`data/{cpp_cost.FILES['bench']}`).")
    sites = (f" and at most {d['counts']['worst_cost']:.2f}x the hand-written path on the "
             f"{d['counts']['deletable']} branches it deletes (median "
             f"{d['counts']['median_cost']:.2f}x; live sites, batched first sample; the criterion "
             f"admits at most {deletable.COST_LIMIT}x, and over all {d['timed']} timed in-place "
             f"sites the worst is {d['worst_timed']:.2f}x)"
             if d["measured"] and d["counts"]["worst_cost"] is not None else "")
    every = [r["ratio_vs_handfixed"] for r in bench_results.ratios(dict(bench))
             if r["label"] == pick and r["ratio_vs_handfixed"] == r["ratio_vs_handfixed"]]
    out += _p("Every figure here is measured on the Python prototype: what core would pay "
              "is the C++ study's (the pick on C++ numbers, above).")
    out += _p(f"**Headline, on one basis (the worst case):** `{pick}` takes at most "
              f"{first.high:.2f}x the time of the same formula written out of place (bench, "
              f"{pick} / handfixed, worst over op x size x batch >= {cpp_cost.MIN_BATCH}; median "
              f"{first.value:.2f}x; over every batch size down to "
              f"{min(bench['config']['batch_sizes'])} the worst is {max(every):.2f}x){sites}. Both "
              "arms of these ratios run the formula in Python, so they are the mechanism's own "
              "cost, without the Python floor.")
    targets = bench_results.targets(dict(bench))
    missed = [t for t in targets if t["status"] == "missed"]
    out += _p(f"Next to it, the bench's targets: {len(missed)} of {len(targets)} missed "
              "(each judged on its worst case over its own inputs and batch sizes):")
    for t in targets:
        w = t.get("where") or {}
        at = f" at {w['op']}, {w['size']}, B={w['batch']}" if w else ""
        unit = " B" if "copy" in t["name"] else "x"
        value = "-" if t["value"] != t["value"] else (f"{t['value']:.0f}" if unit == " B" else f"{t['value']:.2f}")
        out.append(_bullet(f"{t['text']}: **{t['status']}**, {value}{unit}{at}"))
    floor = next((e for e in ests if e.candidate == "python floor"), None)
    if floor is not None and floor.value is not None:
        out += ["", *_p(f"The targets against `builtin` compare a Python formula with torch's C++ one, "
                        f"so they include the Python floor (handfixed / builtin {floor.value:.2f}x, "
                        "median), which core would not pay. What core would pay, per figure with its "
                        "basis, assumptions and falsifier (funcbwd_lab.studies.review.cpp_cost):")]
    out.append(cpp_cost.markdown(ests, inputs["cpp"], heading="###").rstrip())
    return out + [""]


def _compiled_section(compiled: Mapping[str, Any] | None) -> list[str]:
    if compiled is None:
        return []
    from funcbwd_lab.studies.review import compiled_answer

    a = compiled_answer.answer(compiled)
    return ["## Why not torch.compile", "", *_p(" ".join(a[:3]) + " (data/compiled.json)")]


def _summary(inputs: Mapping[str, Any], d: Any, cpp: Mapping[str, Any],
             ret: Mapping[str, Any]) -> list[str]:
    ev = inputs["evidence"]
    out = ["## Summary", ""]
    if cpp["measured"]:
        out.append(_bullet(f"Pick on C++ numbers: `{cpp['pick']}` (data/{cpp_decision.FILE}; "
                           "[the decision on C++ numbers](#the-decision-on-c-numbers))."))
    else:
        out.append(_bullet(f"**{cpp_decision.NOT_MEASURED}**: no approach has a C++ number on "
                           "this branch, so no pick is made on what core would pay "
                           "([the decision on C++ numbers](#the-decision-on-c-numbers))."))
    rows = {r["strategy"]: r for r in corrections.with_baselines(ev)}
    if "builtin" in rows and d.pick in rows:
        b, p = rows["builtin"], rows[d.pick]
        out.append(_bullet(
            f"The status quo (torch's own formulas) passes {b['no_fallback']} of "
            f"{b['details']['applicable']} cells without vmap's slow fallback and fixes "
            f"{b['fixes']} of the {b['details']['plain_failures']} legacy failures; `{d.pick}` "
            f"passes {p['no_fallback']} and fixes {p['fixes']} "
            "([candidates](#candidates-with-the-status-quo-and-the-out-of-place-rewrite))."))
    pu = inputs.get("prs_upstream")
    if pu is not None:
        out.append(_bullet(
            f"Without any mechanism, the small PRs' kernels built out of tree retire "
            f"{pu['retired']} of {pu['entries']} upstream entries they target on torch "
            f"{pu['torch']} ([small PRs](#small-prs-the-evidence-supports-today), docs/prs/)."))
    first = d.sentences[0].replace(f"Pick `{d.pick}`:", f"`{d.pick}` ranks first:", 1)
    out.append(_bullet("In Python (the prototype's ranking, not the pick: its costs include "
                       "torch.func.functionalize's Python wrapper and the Python floor, which "
                       "core would not pay): " + " ".join([first, *d.sentences[1:]])))
    out += [_bullet("The design review's ten objections, each with its answer and evidence: "
                    "[the ten objections](#the-ten-objections); what this version corrects: "
                    "[corrections](#what-this-version-corrects)."), ""]
    return out


def document(inputs: Mapping[str, Any], width: int = WIDTH) -> str:
    """The RFC as Markdown from :func:`load`'s inputs (lines <= ``width`` columns)."""
    d = review.decision(inputs["evidence"])
    pick = d.pick
    cpp = cpp_decision.decide(cpp_decision.normalize(inputs.get("cpp_study")))
    ret = retired(inputs.get("coverage"), pick, (inputs.get("cpp") or {}).get("fallback"))
    title = f"`{cpp['pick']}`" if cpp["measured"] else "pick pending C++ numbers"
    out = [f"# RFC: functionalize in-place backward formulas under vmap ({title})", ""]
    out += _p("_Generated by `python -m funcbwd_lab rfc --out docs/rfc.md` from the saved data in "
              "`data/` (review-evidence.json, cpp.json when the C++ study has run, bench-quick.json, "
              "live-deletable.json, coverage-cost.json, fallback-speedup.json, compiled.json, "
              "coverage.json.gz, matrix-test-ops.json, yourcode-corpus.json, prs-*.json and the "
              "review-*.json of the objections and corrections); regenerate, do not edit. "
              "tests/test_rfc.py checks this file against a fresh generation._", width)
    out += _summary(inputs, d, cpp, ret)
    out += _p("Prototype in this repository: `funcbwd.functionalized` (lib/funcbwd/decorator.py), the copy "
              "elision lib/funcbwd/fx/elide.py, the strategy lib/funcbwd_lab/strategies/traced.py; "
              "the small PRs: docs/prs/; history of the question: functorch#241, pytorch#69534 "
              "(isTensorSubclassLike), pytorch#69991 (composite compliance).", width)
    out += ["## The decision on C++ numbers", ""] + cpp_decision.markdown(cpp)
    out += corrections.candidates_section(inputs, pick)
    out += rfc_core.change(inputs, pick)
    out += rfc_evidence.tests_section(inputs, pick)
    out += rfc_evidence.deletes_section(inputs, pick)
    out += _cost_section(inputs, pick)
    out += ["## What it does not fix", ""]
    out += [_bullet(f"{u['op']}: {review_text.reason_text(u['reason'])} in {', '.join(u['scenarios'])}"
                    + (f" (builtin passes {', '.join(u['builtin_passes'])})" if u["builtin_passes"] else ""),
                    width) for u in d.unsolved] or ["- nothing the matrix found"]
    out += [""]
    out += _compiled_section(inputs.get("compiled"))
    if inputs.get("objections") is not None:
        from funcbwd_lab.studies.review import objections

        from funcbwd_lab.studies.review import branches

        more = {k: inputs.get(k) for k in ("prs_upstream", "prs_effects", "budget_resample",
                                           "copy_repro")}
        more["branches_summary"] = (branches.summary(inputs["branches"])
                                    if inputs.get("branches") else None)
        out += objections.sections({**inputs["objections"], **more}, pick, ret,
                                   deleted(inputs.get("live"), pick))
    out += corrections.corrections(inputs, pick, ret)
    out += rfc_core.cited()
    return "\n".join(out).rstrip() + "\n"
