"""The answers to objections 5, 6 and 10 as issue 39 corrected them (the others:
:mod:`funcbwd_lab.studies.review.answers`): compiled autograd's ``apply_with_saved`` proxies one
opaque call per Node (measured on its graph, quoted from torch 2.13's own files), the sweep's
budget-spent cells re-run (all of them, or a random sample with an exact bound), and forward
mode dropped. Same contract: ``(verdict for the table, Markdown lines)``.
"""

from __future__ import annotations

from typing import Any, Mapping

from funcbwd_lab.studies.review.answers import BUDGET_S, SWEEP_STRATEGY, num, para


def five(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    ca = inputs.get("compiled_autograd")
    if ca is None or not ca.get("graph"):
        return "unknown", para("**Unknown, because** data/review-compiled-autograd.json (schema "
                               "/2, with the captured graph) is not there.")
    n, g, src, calls = ca.get("nodes") or {}, ca["graph"], ca.get("source") or {}, ca["calls"]
    under = [k for k in calls if k != "backward"]
    out = para(
        f"In torch {ca['torch']}'s installed headers, {n.get('apply_with_saved', '?')} of "
        f"{n.get('nodes', '?')} backward Node structs declare `apply_with_saved` and "
        f"{n.get('compiled_args', '?')} `compiled_args`. What `apply_with_saved` does, in the "
        "header's own words (torch/csrc/dynamo/compiled_autograd.h): \""
        + " ".join(src.get("header_note", [])[1:6]) + "\" The Python side of that call ("
        "torch/_dynamo/compiled_autograd.py, `apply_functional` -> `proxy_call`) "
        + ("returns dummy tensors (`allocate_dummy`)" if src.get("proxy_call_returns_dummies")
           else "returns the call's results")
        + ". Measured on the graph compiled autograd hands its compiler for diag's backward: "
        f"{len(g['node_calls'])} calls, one per Node ("
        + ", ".join(f"`{c}`" for c in g["node_calls"]) + f"), and "
        f"{len(g['aten_calls_in_graph'])} ATen calls, while the same backward dispatches "
        f"{len(g['eager_aten_calls'])} distinct ATen ops eagerly (in place: "
        + ", ".join(f"`{c}`" for c in g["eager_inplace_calls"]) + "). So `apply_with_saved` "
        "is not a recorder of a formula's ATen calls (the earlier versions said it was): the "
        "formula stays one opaque function, which dynamo traces into later or not at all.")
    out += para(
        "Under torch.func it is not used: a plain `.backward()` is captured "
        f"{calls['backward']['captures']} time(s); "
        + ", ".join(f"`{k}` {calls[k]['captures']}" for k in under)
        + f" captures; the legacy diag formula under vmap fails the same way with it "
        f"({calls['vmap_vjp_legacy_diag']['compiled_autograd']}). What it does offer the "
        "prologue is the packing: `${op}_apply_functional_ivalue` and the generated code that "
        "packs a Node's saved values for it (the change in core, above). A recorder of the "
        "formula's calls would still have to be built.")
    return "one opaque call per Node", out


def six(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    sw = inputs["sweep"]
    if sw is None:
        return "unknown", para("**Unknown, because** the OpInfo sweep's data is not there.")
    own = sw["per"][SWEEP_STRATEGY]
    regress = ", ".join(f"{n} in {comp}" for (comp, _), n in sorted(sw["regressions_by"].items()))
    causes = "; ".join(f"`{k}`: {n} cells ({', '.join(sts)})"
                       for k, (n, sts) in sorted(sw["all_causes"].items()))
    budget = sum(sw["budget"].values())
    out = para(f"What `{SWEEP_STRATEGY}` breaks against builtin: {own['regressions']} cells "
               f"({regress}). All regressions of the sweep by cause: {causes}.")
    rs = inputs.get("budget_resample")
    head = (f"What was unknown: {budget} cells where builtin passes and `{SWEEP_STRATEGY}` spent "
            f"the sweep's {BUDGET_S:.0f} s budget ("
            + ", ".join(f"{c} {n}" for c, n in sorted(sw["budget"].items()))
            + f"; builtin's median there {num(sw['budget_builtin_median_s'])} s).")
    if rs is None:
        out += para(head + " **Unknown, because** data/review-budget-resample.json is not there.")
        verdict = f"{own['regressions']} regressions, {budget} unknown"
    else:
        b, st = rs["bound"], rs["status"]
        whole = b["sampled"] == b["population"]
        left = b["seen"].get("still out of budget", 0)
        bad = b["seen"].get("regression", 0)
        out += para(
            head + (f" Re-run, every one of them" if whole else
                    f" Re-run, a random sample of {b['sampled']} (seed {rs['seed']})")
            + f", with {rs['budget_s']:.0f} s per cell on Dask "
            "(funcbwd_lab.studies.review.budget_resample, resumable): "
            + ", ".join(f"{k} {v}" for k, v in sorted(st.items())) + ". "
            + (f"So the sweep's budget, not the strategy, left them unknown: {bad} regress; "
               f"{b['seen'].get('uninformative', 0)} are uninformative (torch's answer is zero "
               f"there, for builtin too); {left} still ran out of time ("
               + ", ".join(sorted({r['cell'][0] for r in rs['rows'] if r['status'] == 'timeout'}))
               + ", every in_dims choice they ran passed)."
               if whole else
               f"So, at {b['confidence']:.0%} confidence (exact, hypergeometric), at most "
               f"{b['at_most']['regression']} of the {b['population']} regress and at most "
               f"{b['at_most']['still out of budget']} would still run out of time at "
               f"{rs['budget_s']:.0f} s; at least {b['at_least_no_regression']} pass or are "
               "uninformative (torch's answer is zero there)."))
        verdict = (f"{own['regressions']}; re-run: {bad} more" if whole else
                   f"{own['regressions']}; <= {b['at_most']['regression']} more "
                   f"({b['confidence']:.0%})")
    ib = sw["inplace_by"]
    out += para(
        "The in-place cells (builtin fails with vmap's in-place error), fixed / not fixed / out "
        "of budget: " + "; ".join(
            f"`{s}` {v.get('fixed', 0)} / {v.get('not_fixed', 0)} / {v.get('unresolved', 0)}"
            for s, v in ib.items()) + " (the deep pass: docs/opinfo-sweep.md).")
    return verdict, out


def ten(inputs: Mapping[str, Any], deleted: Mapping[str, Any]) -> tuple[str, list[str]]:
    sw = inputs["sweep"]
    if sw is None:
        return "unknown", para("**Unknown, because** the OpInfo sweep's data is not there.")
    jvp_deleted = sum(1 for _, k, _ in deleted.get("deleted", []) if k == "jvp")
    b = sw["vmapjvpall_builtin"]
    out = para(
        f"Forward mode: **dropped from the change.** `{SWEEP_STRATEGY}` is not applicable to "
        f"{sw['vmapjvpall_na']} `vmapjvpall` cells (it functionalizes backward Nodes; "
        "forward-mode formulas run in VariableType), and no strategy runs torch's own "
        f"forward-mode formulas functionalized; builtin passes {b.get('pass', 0)} `vmapjvpall` "
        f"cells and fails {b.get('fail', 0)}. The {jvp_deleted} jvp sites of the deletable table "
        "are Python re-creations, not evidence for a prologue in `gen_variable_type.py`.")
    out += para(
        "Maintenance, beside the benefit (deleting about "
        f"{len(deleted.get('deleted', []))} branches and the slow fallbacks): a recorder, an "
        "elision pass, a checker and a cache in the Node generator, which autograd's and "
        "functorch's maintainers must both know; lines and binary size: the C++ study's.")
    return "forward mode dropped", out
