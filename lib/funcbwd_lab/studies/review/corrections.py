"""Two of the RFC's sections that issue 39 asked for: the candidates with the two baselines the
earlier versions left out (the status quo: torch's own formulas, ``builtin``; and rewriting each
branch out of place, PR #46674's pattern: ``handfixed`` in the matrix, the out-of-place path of
every live site), and the list of what this version corrects, each with what it rests on.
Every number is read from the saved data.
"""

from __future__ import annotations

from typing import Any, Mapping

from funcbwd_lab.tables import WIDTH, paragraph

#: the matrix criteria the candidates and the baselines share (review.CRITERIA's first ones)
MATRIX = ("fixes", "wrong", "no_fallback")
BASELINES = {"builtin": "the status quo: torch's own formulas",
             "handfixed": "every formula written out of place"}
SHORT = {"fixes": "fixes", "wrong": "wrong, own", "no_fallback": "no slow fallback"}


def _p(text: str) -> list[str]:
    return [paragraph(text, WIDTH), ""]


def _b(text: str) -> str:
    return paragraph(f"- {text}", WIDTH, "", "  ")


def with_baselines(evidence: Any) -> list[dict[str, Any]]:
    """The candidates and the two baselines ranked on the matrix criteria alone (the baselines
    have no probes, and timings compare Python with C++)."""
    from funcbwd_lab.studies.review import review

    crit = [c for c in review.CRITERIA if c.name in MATRIX]
    names = [s for s in evidence.candidates if s in evidence.strategies]
    names += [s for s in BASELINES if s in evidence.strategies]
    # wrong results of its own: a legacy formula's own error (legacy_wrong) is not the
    # mechanism's, and the baselines do not run the legacy formulas
    values = {s: {**evidence.strategies[s], "wrong": evidence.strategies[s]["wrong"]
                  - evidence.strategies[s].get("wrong_inherited", 0)} for s in names}
    rows = review.rank_strategies(values, crit)
    for r in rows:
        r["details"] = evidence.strategies[r["strategy"]]
    return rows


def candidates_section(inputs: Mapping[str, Any], pick: str) -> list[str]:
    from funcbwd_lab.studies.review import review
    from funcbwd_lab.studies.review.text import value_text

    ev = inputs["evidence"]
    rows = with_baselines(ev)
    crit = [review.CRITERION[n] for n in MATRIX]
    out = ["## Candidates, with the status quo and the out-of-place rewrite", ""]
    out += _p("Ranked on the decision's matrix criteria (fixes over the legacy formulas, wrong "
              "results of its own, cells passed without vmap's slow fallback; the first that "
              "differs decides; a legacy formula's own error, which every mechanism running it "
              "inherits, is not counted); the baselines have no probes, and timings would compare "
              "Python with C++:")
    out += ["| rank | candidate | " + " | ".join(f"{SHORT[c.name]} [{c.unit}]" for c in crit) + " |",
            "|---|---|" + "---|" * len(crit)]
    for r in rows:
        name = f"`{r['strategy']}`" + (f": {BASELINES[r['strategy']]}"
                                       if r["strategy"] in BASELINES else "")
        out.append(f"| {r['rank']} | {name} | "
                   + " | ".join(value_text(c, r[c.name], r["details"]) for c in crit) + " |")
    out.append("")
    by = {r["strategy"]: r for r in rows}
    sq, p = by.get("builtin"), by.get(pick)
    if sq and p:
        def ahead(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
            return [c.label for c in crit if (a[c.name] > b[c.name] if c.better == "max"
                                              else a[c.name] < b[c.name])]
        mine, theirs = ahead(p, sq), ahead(sq, p)
        out += _p(
            f"On the matrix (the same basis as the decision: {review.basis_text(ev.basis)}), the "
            f"status quo fixes {sq['fixes']} of the {sq['details']['plain_failures']} cells where "
            f"the legacy formulas fail, gives {sq['wrong']} wrong result(s) of its own and passes "
            f"{sq['no_fallback']} cells without vmap's slow fallback; `{pick}` fixes "
            f"{p['fixes']}, gives {p['wrong']} of its own "
            f"({p['details'].get('wrong_inherited', 0)} more are the legacy formula's own error) "
            f"and passes {p['no_fallback']}. `{pick}` is ahead on: "
            f"{', '.join(mine) or 'nothing'}; the status quo on: {', '.join(theirs) or 'nothing'}."
            + (" So on today's torch the large change's case rests on deleting branches and "
               "removing fallbacks, not on what vmap can run." if theirs else "")
            + " The legacy formulas are history (torch's own formulas were fixed one by one); "
            "what a mechanism would fix today is users' code and future formulas.")
    br = inputs.get("branches")
    if br is not None:
        from funcbwd_lab.studies.review import branches

        s = branches.summary(br)
        out += _p(
            "For one of today's branches the three choices differ as follows (data/"
            f"review-branches.json: the {s['sites']} counted live sites, Python re-creations, "
            "first sample, CPU):")
        out.append(_b(
            f"**keep it** (status quo): eager runs the fast path; vmap, fake tracing "
            "(AOTAutograd) and CompositeCompliance run the out-of-place path, since each makes "
            "`isTensorSubclassLike` true."))
        out.append(_b(
            f"**rewrite it out of place** (PR #46674's pattern, no guard): every user pays the "
            f"out-of-place path in eager, median {s['eager_median']:.2f}x the fast path's time "
            f"(worst {s['eager_worst']:.2f}x; slower on {s['eager_slower']} of {s['sites']} "
            f"sites; thread CPU time, median of {br['rounds']} interleaved rounds, vmap off); "
            f"CompositeCompliance passes on {s['sites'] - s['compliance_slow_fail']} of "
            f"{s['sites']}; vmap needs nothing."))
        out.append(_b(
            f"**delete the out-of-place side** (the change): eager as today; fake tracing records "
            f"in-place calls in {s['fake_fast_inplace']} of {s['fake_traced']} graphs (equal to "
            f"the out-of-place graph after functionalization in {s['functionalized_same']}); "
            f"CompositeCompliance fails on {s['compliance_fast_fail']} of {s['sites']}; vmap needs "
            "the mechanism."))
        out.append("")
        sl = br.get("subclass_like") or {}
        if sl:
            out += _p(
                "Why the last two differ beyond vmap: in torch 2.13.0's own header "
                f"(ATen/TensorSubclassLikeUtils.h, built from {sl['git'][:10]}), "
                "`isTensorSubclassLike` is true for a tensor with any of "
                + ", ".join(f"`{k}`" for k in sl["keys"])
                + (", and for every tensor while any dispatch mode is active" if
                   sl["dispatch_mode_makes_true"] else "")
                + ": the branch serves sparse, meta, Python-key (FakeTensor, DTensor, NJT) "
                "tensors and every mode, not functorch alone.")
    return out


def corrections(inputs: Mapping[str, Any], pick: str, retired: Mapping[str, Any]) -> list[str]:
    """What this version corrects from the earlier ones, each with what it rests on."""
    out = ["## What this version corrects", ""]
    out += _p("Read as a core maintainer would (issue 39), the earlier versions made claims that "
              "PyTorch's source or this workbench's own data refute. Each is fixed or withdrawn "
              "above, from:")
    items = []
    if retired.get("withdrawn"):
        items.append("\"index_fill ... fixed by traced_backward\": withdrawn, its graph keeps "
                     + ", ".join(", ".join(v["falls_back"]) for v in retired["withdrawn"])
                     + ", which falls back (data/fallback-speedup.json); the tests section.")
    ca = (inputs.get("objections") or {}).get("compiled_autograd")
    if ca and ca.get("graph"):
        g = ca["graph"]
        items.append(
            f"`apply_with_saved` as a recorder of a Node's ATen calls: withdrawn. In torch "
            f"{ca['torch']} it proxies one opaque call per Node (compiled autograd's graph of "
            f"diag's backward holds {len(g['node_calls'])} calls, "
            + ", ".join(f"`{n}`" for n in g["node_calls"])
            + f", and {len(g['aten_calls_in_graph'])} ATen calls, where the same backward "
            f"dispatches {len(g['eager_aten_calls'])} distinct ATen ops eagerly), and its Python "
            "side returns dummy tensors (data/review-compiled-autograd.json); objection 5.")
    cr = inputs.get("copy_repro")
    if cr:
        from funcbwd_lab.studies.prs.effects import describe

        r = {x["composition"]: x for x in cr["rows"]}
        repro = next(v for k, v in r.items() if "repro" in k)
        items.append(
            "pytorch#103329 among the copy rules' evidence: corrected. With the three rules "
            "built out of tree the issue's own repro, `vmap(jacrev(f))`, still raises "
            f"({describe(repro['all three rules'])}); only `vmap(jacrev(functionalize(f)))` "
            "and `vmap(jacfwd(functionalize(f)))` need them (data/review-copy-repro.json).")
    items.append("`skip()` entries listed apart from the expected failures, with upstream's "
                 "reasons, and every verdict said to be CPU-only (torch 2.13.0+cpu).")
    items.append("The status quo and the out-of-place rewrite are candidates beside the "
                 "mechanisms, in eager, fake tracing and CompositeCompliance (data/"
                 "review-branches.json); what `isTensorSubclassLike` covers is read from torch's "
                 "own header, and the prototype's recorder, a dispatch mode, is shown never to "
                 "record torch's fast paths.")
    items.append("The trigger is a vmap level, for a generated list of formulas that write in "
                 "place (data/review-trigger.json, data/review-inplace-formulas.json); \"scalars "
                 "as graph inputs\" is withdrawn (formulas branch on scalars); the prologue is "
                 "placed in today's generated Node; forward mode is dropped (no evidence).")
    items.append("The budget-spent cells of the sweep are re-run (objection 6); the small PRs "
                 "are artifacts: docs/prs/, kernels built out of tree, upstream entries run.")
    items.append("The pick is to be made on C++ numbers (above); the Python figures are "
                  "labelled as Python.")
    out += [_b(i) for i in items]
    return out + [""]
