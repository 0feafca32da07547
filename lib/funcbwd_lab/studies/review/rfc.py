""""What would the PR look like?": a generated RFC for the design review's pick.

:func:`document` writes Markdown (every line <= 100 columns) from the saved data of a data
directory, nothing measured live, so the same files give the same document (``docs/rfc.md`` is
one generation, checked by ``tests/test_rfc.py``):

* the pick and why: :func:`funcbwd_lab.studies.review.review.decision` of ``review-evidence.json``;
* what changes in core: the plan of :data:`CHANGES` (upstream files cited with the commit of the
  copy read, :data:`UPSTREAM`), for the pick's mechanism;
* which functorch expected failures it retires: the OpInfo sweep's ``coverage.json.gz`` (schema
  ``funcbwd-coverage/3``), each upstream entry's verdict recomputed by
  :func:`funcbwd_lab.studies.coverage.verdicts.upstream_verdicts`: "fixed" by the sweep's strategy for
  the pick (:data:`SWEEP_STRATEGY`); without the file the section says "not yet measured";
* which of the 36 hand-written branches it deletes: ``live-deletable.json`` by
  :data:`funcbwd_lab.studies.deletable.deletable.CRITERION`;
* the cost on one stated basis (the worst case) next to the bench's targets, and the C++
  estimates of :mod:`funcbwd_lab.studies.review.cpp_cost`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.deletable import deletable
from funcbwd_lab.studies.review import review
from funcbwd_lab.studies.review import text as review_text
from funcbwd_lab.studies.review import cpp_cost
from funcbwd_lab.tables import WIDTH, paragraph

COVERAGE_FILE = "coverage.json.gz"
LIVE_FILE = "live-deletable.json"
COMPILED_FILE = "compiled.json"
#: the OpInfo sweep's strategy that runs the pick's mechanism on torch's own backward nodes
SWEEP_STRATEGY = {"traced": "traced_backward", "whole": "whole", "hooks": "hooks"}
NOT_MEASURED = "not yet measured"

#: upstream files the plan names: path -> (commit of the copy read, what it is)
UPSTREAM = {
    "tools/autograd/derivatives.yaml": ("d327a787782618826890c323f8d7e51f3d28ec13",
                                        "every op's backward and forward-mode formula"),
    "tools/autograd/gen_autograd_functions.py": (
        "0088d90bab0d2334b81614edfa0ed4f0dae97b3c",
        "generates each backward Node (Functions.h/cpp); FUNCTION_DEFINITION is the template of "
        "every Node::apply, whose body (DERIVATIVE_SINGLE / DERIVATIVE_MULTI) computes "
        "`grad_result = ${derivative}`"),
    "tools/autograd/gen_variable_type.py": (
        "9e69e8210c01ff23aff82df3806f7dbe0ec106d2",
        "generates VariableType kernels; its FW_DERIVATIVE_* templates run forward-mode formulas"),
    "torch/csrc/autograd/FunctionsManual.cpp": (deletable.COMMIT,
                                                "the hand-written backward/JVP helpers"),
    "aten/src/ATen/functorch/DynamicLayer.h": ("b4cd07a43e4b86eb625af70570ed8e8a2a380d43",
                                               "maybeCurrentDynamicLayer(): the innermost "
                                               "functorch transform, if any"),
    "aten/src/ATen/functorch/BatchedFallback.cpp": ("ef825c2906ada3ab06e6da90b1fc5e05f2e1bae8",
                                                    "vmap's slow per-sample fallback"),
    "aten/src/ATen/FunctionalTensorWrapper.cpp": ("bff395c81fa76581fdf81717032d42e9955465d5",
                                                  "functionalization in core (C++)"),
    "aten/src/ATen/native/Copy.cpp": ("2322f525a4d3c72faa9f97c317ee212432280373",
                                      "aten::copy (fresh memory with dst's strides), which has no "
                                      "batching rule"),
    "torch/csrc/jit/frontend/tracer.cpp": ("de7c85b2ae4438d2414d5a75210a8197403f2e68",
                                           "TorchScript's tracer, core's one C++ recorder of calls"),
    "torch/fx/experimental/proxy_tensor.py": ("551bedd9c9104f0cefeb488513da72671cef7d8c",
                                              "make_fx, the tracer the prototype uses"),
    "test/functorch/test_ops.py": ("28a580b0d22161650a6f4131276dddbf3a4699f4",
                                   "functorch's composition tests and their xfail sets"),
    "torch/testing/_internal/composite_compliance.py": (
        "9c40c0f4b9b0fd977623989f4cb1012f74dbe752",
        "the subclass-like checks the isTensorSubclassLike branches were written for"),
}

#: the plan: (file, what the PR does there); files not in :data:`UPSTREAM` are new
CHANGES = (
    ("tools/autograd/gen_autograd_functions.py",
     "the entry point: one generic prologue in FUNCTION_DEFINITION, nothing per formula (the "
     "prototype needs no per-formula input: review_probes.needs_per_op_input). When a functorch "
     "transform is active (maybeCurrentDynamicLayer() has a value; the prototype tests the "
     "transform stack's depth) the node's formula runs as its cached functionalized graph; "
     "otherwise the generated body runs as today"),
    ("tools/autograd/gen_variable_type.py",
     "the same prologue for forward-mode formulas (FW_DERIVATIVE_*), for the JVP sites"),
    ("aten/src/ATen/functorch/FunctionalizedFormulas.{h,cpp} (new)",
     "where the graphs are generated and cached: per formula (the Node type, or the JVP "
     "formula's id) and signature (sizes, strides, dtypes, scalar arguments, which outputs are "
     "needed), bounded LRU, thread-safe, one trace per key. A miss runs the formula once under "
     "the Functionalize key (FunctionalTensorWrapper) and records the ATen calls it dispatches; "
     "the recorded aten::copy is elided where no later op can observe the layout, materialized "
     "with dst's strides where it can, kept otherwise; each new graph is checked once against the "
     "un-elided one (values and strides) and refused if they differ; a formula with "
     "data-dependent control flow is not traced and runs functionalized at call time"),
    ("torch/csrc/autograd/FunctionsManual.cpp",
     "delete the deletable isTensorSubclassLike branches (below): their fast path, run by the "
     "mechanism, passes every functorch scenario. Before merging, composite compliance must pass "
     "too: the branches also serve other subclass-like tensors, which this workbench does not run; "
     "a branch needed there stays, or the trigger must cover that tensor as well"),
    ("test/functorch/test_ops.py",
     "remove the expected failures the mechanism fixes (below); add a test that every newly "
     "traced graph equals its un-elided graph (the prototype's tests/test_elide.py)"),
)


# ------------------------------------------------------------------------------ inputs
def load(data_dir: str | Path) -> dict[str, Any]:
    """Every saved input the document reads (a missing optional file is None)."""
    d = Path(data_dir)
    evidence = review.load_evidence(d / review.EVIDENCE_FILE)
    out: dict[str, Any] = {"evidence": evidence, "cpp": cpp_cost.load_inputs(d)}
    out["live"] = json.loads((d / LIVE_FILE).read_text()) if (d / LIVE_FILE).exists() else None
    out["compiled"] = (json.loads((d / COMPILED_FILE).read_text())
                       if (d / COMPILED_FILE).exists() else None)
    out["coverage"] = _coverage(d / COVERAGE_FILE)
    from funcbwd_lab.studies.review import objections

    out["objections"] = objections.load(d, evidence, out["coverage"])
    return out


def _coverage(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    from funcbwd_lab.studies.coverage import data

    return data.load(path)


# ------------------------------------------------------------------------------ sections
def _p(text: str, width: int = WIDTH) -> list[str]:
    return [paragraph(text, width), ""]


def _bullet(text: str, width: int = WIDTH) -> str:
    return paragraph(f"- {text}", width, "", "  ")


def retired(coverage: Mapping[str, Any] | None, pick: str) -> dict[str, Any]:
    """The upstream expected failures the pick retires (verdict "fixed", by the sweep's strategy
    for the pick), the stale ones (pass already), and the counts per verdict; ``measured`` False
    without sweep data or when the pick has no sweep strategy."""
    strategy = SWEEP_STRATEGY.get(pick)
    if coverage is None or strategy is None:
        return {"measured": False, "strategy": strategy}
    from funcbwd_lab.studies.coverage import verdicts

    vs = verdicts.of_document(coverage)  # "stale" needs every sample (the caps in meta)
    fixed = [v for v in vs if v["verdict"] == "fixed" and strategy in v.get("fixed_by", [])]
    counts: dict[str, int] = {}
    for v in vs:
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    return {"measured": True, "strategy": strategy, "fixed": fixed, "entries": len(vs),
            "stale": [v for v in vs if v["verdict"] == "stale"], "counts": counts,
            "torch": coverage.get("meta", {}).get("torch", "?")}


def _tests_section(coverage: Mapping[str, Any] | None, pick: str) -> list[str]:
    r = retired(coverage, pick)
    out = ["## The tests it retires", ""]
    if not r["measured"]:
        why = (f"`data/{COVERAGE_FILE}` (schema funcbwd-coverage/3, the OpInfo sweep of "
               "funcbwd_lab.studies.coverage) is not there yet" if coverage is None else
               f"the sweep has no strategy for `{pick}`")
        return out + _p(f"**{NOT_MEASURED}**: {why}. When it is, this section lists each expected "
                        "failure of test/functorch/test_ops.py whose computed verdict is \"fixed\" by "
                        f"`{r['strategy'] or pick}` (the pick's mechanism on torch's own backward "
                        "nodes), with its source line.")
    out += _p(f"Of {r['entries']} upstream entries (test/functorch/test_ops.py at "
              f"{UPSTREAM['test/functorch/test_ops.py'][0][:10]}; verdicts on torch {r['torch']}: "
              + ", ".join(f"{k} {n}" for k, n in sorted(r["counts"].items())) + "), "
              f"`{r['strategy']}` fixes {len(r['fixed'])} (verdict \"fixed\": a failing entry it "
              "passes with its mechanism ran and no regression on the op); "
              f"{sum(v['test'].endswith('_has_batch_rule') for v in r['fixed'])} of them are "
              "`_has_batch_rule` entries, where builtin is already correct and the failure is its "
              "slow fallback: speed, not in-place fixes (objection 1). The PR removes them:")
    out += [_bullet(f"`{v['test']}` {v['op']}{'.' + v['variant'] if v['variant'] else ''} "
                    f"({v['kind']}, line {v['source'].rsplit(' ', 1)[-1]}; fixed by "
                    f"{', '.join(v['fixed_by'])})") for v in r["fixed"]] or ["- none"]
    out.append("")
    out += _p(f"Independently of the PR, {len(r['stale'])} entries are stale (they pass on torch "
              f"{r['torch']}) and can go now.")
    return out


def deleted(live: Mapping[str, Any] | None, pick: str) -> dict[str, Any]:
    """The sites the pick deletes by the criterion, the ones it does not (with their blockers),
    and the headline; ``measured`` False without the table or the pick in it."""
    if live is None or pick not in live.get("strategies", []):
        return {"measured": False}
    deletable.check_schema(dict(live))
    rows = [r for r in live["rows"] if r["kind"] in ("backward", "jvp") and r["counted"]]
    gone = [(r["site"], r["kind"], r["strategies"][pick]["cost_ratio"]) for r in rows
            if r["strategies"][pick]["verdict"] == "deletable"]
    timed = [r["strategies"][pick]["cost_ratio"] for r in rows
             if r["strategies"][pick]["cost_ratio"] is not None]
    return {"measured": True, "deleted": gone, "timed": len(timed),
            "worst_timed": max(timed, default=None), "kept": deletable.not_cleared(dict(live), pick),
            "headline": deletable.headline(dict(live), pick), "counts": deletable.counts(dict(live), pick),
            "commit": live.get("core_commit", "")}


def _deletes_section(live: Mapping[str, Any] | None, pick: str) -> list[str]:
    d = deleted(live, pick)
    out = ["## The hand-written branches it deletes", ""]
    if not d["measured"]:
        return out + _p(f"**{NOT_MEASURED}**: no `data/{LIVE_FILE}` with `{pick}` "
                        "(`python -m funcbwd_lab deletable --out data/live-deletable.json`).")
    out += _p(d["headline"] + ".")
    out += _p(f"Criterion: {deletable.CRITERION}")
    out += _p(f"Deleted under `{pick}` (torch/csrc/autograd/FunctionsManual.cpp at "
              f"{d['commit'][:12]}; cost: batched time of the fast path under `{pick}` over the "
              "hand-written path):")
    out += ["| site | kind | cost |", "|---|---|---|"]
    out += [f"| `{s}` | {k} | {'-' if c is None else f'{c:.2f}x'} |" for s, k, c in d["deleted"]]
    out += ["", "Kept, and why (the first blocker found per site; controls are data-dependent):", ""]
    for b in d["kept"]:
        why = deletable.BLOCKERS.get(b["reason"], b["reason"])
        where = f" in {b['where']}" if b.get("where") else ""
        ops = f" ({', '.join(b['ops'])})" if b.get("ops") else ""
        cost = f"; cost {b['cost_ratio']:.2f}x" if b.get("cost_ratio") is not None else ""
        out.append(_bullet(f"`{b['site']}` ({b['kind']}): {why}{where}{ops}{cost}"))
    out += ["", *_p("What this measures is functorch's transforms only: the branches also serve "
                    "other subclass-like tensors (torch/testing/_internal/composite_compliance.py), "
                    "which this table does not run.")]
    return out


def _cost_section(inputs: Mapping[str, Any], pick: str) -> list[str]:
    out = ["## What it costs", ""]
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


def document(inputs: Mapping[str, Any], width: int = WIDTH) -> str:
    """The RFC as Markdown from :func:`load`'s inputs (lines <= ``width`` columns)."""
    d = review.decision(inputs["evidence"])
    pick = d.pick
    out = [f"# RFC: functionalize in-place backward formulas under vmap (`{pick}`)", ""]
    out += _p("_Generated by `python -m funcbwd_lab rfc --out docs/rfc.md` from the saved data in "
              "`data/` (review-evidence.json, bench-quick.json, live-deletable.json, "
              "coverage-cost.json, fallback-speedup.json, compiled.json, coverage.json.gz, "
              "matrix-test-ops.json, yourcode-corpus.json and the review-*.json of the ten "
              "objections); "
              "regenerate, do not edit. tests/test_rfc.py checks this file against a fresh "
              "generation._", width)
    out += ["## Summary", ""]
    out += [_bullet(s, width) for s in d.sentences]
    out += [_bullet("The design review's ten objections, each with its answer and evidence: "
                    "[the ten objections](#the-ten-objections); the small PRs the evidence supports "
                    "without the large change: [small PRs](#small-prs-the-evidence-supports-today)"
                    ".", width), ""]
    out += _p("Prototype in this repository: `funcbwd.functionalized` (lib/funcbwd/tool/), the copy "
              "elision lib/funcbwd/fx/elide.py, the strategy lib/funcbwd_lab/strategies/traced.py; "
              "history of the question: functorch#241, pytorch#69534 (isTensorSubclassLike), "
              "pytorch#69991 (composite compliance).", width)
    out += ["## The change in core", ""]
    out += _p(f"Mechanism (`{pick}`): under a functorch transform each formula runs as a graph "
              "traced once per signature with functionalization on, its aten::copy elided where "
              "sound (aten::copy has no batching rule, so vmap would run its slow per-sample "
              "fallback), cached and replayed; with no transform active nothing changes.", width)
    for path, what in CHANGES:
        key = path.split(" ")[0]
        cite = f" (pytorch/pytorch@{UPSTREAM[key][0][:10]}: {UPSTREAM[key][1]})" if key in UPSTREAM else ""
        out.append(_bullet(f"`{path}`{cite}: {what}.", width))
    out += [""]
    out += _p("Open question for the PR: the prototype records with make_fx "
              "(torch/fx/experimental/proxy_tensor.py) from Python. In C++, compiled autograd's "
              "per-node `apply_with_saved` (which traces a node's formula into FX) and "
              "`compiled_args` (a per-node key) are an existing recorder and key (objection 5); "
              "a recorder on the Functionalize key's output, or graphs generated at build time, "
              "are the alternatives.", width)
    out += _tests_section(inputs.get("coverage"), pick)
    out += _deletes_section(inputs.get("live"), pick)
    out += _cost_section(inputs, pick)
    out += ["## What it does not fix", ""]
    out += [_bullet(f"{u['op']}: {review_text.reason_text(u['reason'])} in {', '.join(u['scenarios'])}"
                    + (f" (builtin passes {', '.join(u['builtin_passes'])})" if u["builtin_passes"] else ""),
                    width) for u in d.unsolved] or ["- nothing the matrix found"]
    out += [""]
    out += _compiled_section(inputs.get("compiled"))
    if inputs.get("objections") is not None:
        from funcbwd_lab.studies.review import objections

        out += objections.sections(inputs["objections"], pick, retired(inputs.get("coverage"), pick),
                                   deleted(inputs.get("live"), pick))
    out += ["## Upstream files cited", ""]
    out += [_bullet(f"`{p}` at {c[:12]}: {w}", width) for p, (c, w) in UPSTREAM.items() if c]
    text = "\n".join(out).rstrip() + "\n"
    return text
