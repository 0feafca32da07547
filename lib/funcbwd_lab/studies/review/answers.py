"""The answers to the design review's ten objections (issue 28), one function each, from the
inputs :func:`funcbwd_lab.studies.review.objections.load` reads: ``(verdict for the table, Markdown
lines)``. A missing input gives "unknown, because ..."; every number is read from the data.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Mapping

from funcbwd_lab.tables import WIDTH, paragraph

SWEEP_STRATEGY = "traced_backward"
#: the sweep's per-cell budget (docs/opinfo-sweep.md) and the deep pass's
BUDGET_S, DEEP_BUDGET_S = 3.0, 120.0


# ------------------------------------------------------------------------------ rendering helpers
def para(text: str) -> list[str]:
    return [paragraph(text, WIDTH), ""]


def bullet(text: str) -> str:
    return paragraph(f"- {text}", WIDTH, "", "  ")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (as tests/test_docs_links.py computes it)."""
    text = heading.replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


#: the objections, most damaging first: (number, short title for the table, heading)
TITLES = (
    (1, "fixes that are not in-place fixes", "Fixes that are not in-place fixes"),
    (2, "tensor subclasses, meta, modes", "Tensor subclasses, meta tensors and dispatch modes"),
    (3, "torch.compile around the mechanism", "torch.compile around the mechanism"),
    (4, "the pick rests on aten::copy", "The pick rests on one missing batching rule"),
    (5, "compiled autograd", "Compiled autograd is not compared"),
    (6, "what it breaks, what is unknown", "What it breaks and what is unknown"),
    (7, "cache keys in practice", "Cache keys in practice"),
    (8, "C++ cost from noise", "The C++ cost in instructions"),
    (9, "threads and devices", "Threads and devices"),
    (10, "forward mode and maintenance", "Forward mode and maintenance"),
)


def heading(n: int) -> str:
    return f"### {n}. {TITLES[n - 1][2]}"


# ------------------------------------------------------------------------------ the answers
def one(inputs: Mapping[str, Any], pick: str, retired: Mapping[str, Any],
         deleted: Mapping[str, Any]) -> tuple[str, list[str]]:
    sw = inputs["sweep"]
    if sw is None or not retired.get("measured"):
        return "unknown", para("**Unknown, because** the OpInfo sweep's data is not there.")
    tests = Counter(v["test"] for v in retired["fixed"])
    per = sw["per"]
    own = per[SWEEP_STRATEGY]
    out = para(
        f"**Conceded.** The {len(retired['fixed'])} upstream entries `{SWEEP_STRATEGY}` \"fixes\" "
        "are all " + ", ".join(f"`{t}` ({n})" for t, n in tests.items()) + ": torch's builtin "
        "formula is already correct there and the expected failure is about its slow per-sample "
        f"fallback, so they are speed entries, not in-place fixes. Over the whole sweep (torch "
        f"{sw['torch']}, every composition) `{SWEEP_STRATEGY}` fixes {own['fixes']} cells and "
        f"{own['inplace_fixes']} in-place failures; `whole` and `hooks` fix "
        f"{per['whole']['inplace_fixes']} and {per['hooks']['inplace_fixes']} in-place "
        f"failures. Vmap's in-place error remains on only {sw['inplace_left']} cells of torch's "
        "own formulas.")
    out += para(
        "So on current torch the evidence shows no user-visible failure of torch's own formulas "
        "that the mechanism fixes and a batching rule would not: the hand-written branches already "
        "do the job. Its value on today's torch is (a) deleting those branches: "
        f"{len(deleted.get('deleted', []))} of the hand-written sites pass every scenario with "
        "their fast path under the mechanism (below), and (b) removing vmap's slow fallbacks "
        "(the `has_batch_rule` entries and data/fallback-speedup.json), which the small PRs "
        "below do for those entries with no mechanism at all. It also fixes in-place code that "
        "is not torch's: the re-created legacy formulas (the summary above) and users' own code "
        "(the corpus, below), which is where the failures are today.")
    return "conceded: speed, deletion", out


def two(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    sub = inputs["subclass"]
    if sub is None:
        return "unknown", para("**Unknown, because** data/review-subclass.json is not there.")
    s = sub["summary"]
    rows = sub["rows"]
    escaped = [r["op"] for r in rows if r.get("legacy", {}).get("two_tensor", {}).get("type") == "Tensor"
               and not r["legacy"]["two_tensor"].get("correct")]

    def counts(which: str, kind: str) -> str:
        c = s.get(which, {}).get(kind, {})
        return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))

    def ran(which: str) -> int:
        return sum(1 for r in rows if "mode" in r.get(which, {}))

    def seen(which: str) -> int:
        return sum(1 for r in rows if r.get(which, {}).get("mode", {}).get("inplace_seen", 0) > 0)

    out = para(
        f"Measured (funcbwd_lab.studies.review.subclass: {len(rows)} legacy formulas and "
        f"{sum('modern' in r for r in rows)} modern ones, run eagerly outside every transform on "
        "each op's first sample):")
    out += ["| inputs | legacy (in-place) formulas | modern (out-of-place) formulas |",
            "|---|---|---|"]
    for kind, label in (("two_tensor", "TwoTensor (wrapper subclass)"), ("meta", "meta"),
                        ("fake", "FakeTensorMode"), ("mode", "a pass-through dispatch mode")):
        out.append(f"| {label} | {counts('legacy', kind)} | {counts('modern', kind)} |")
    out.append("")
    out += para(
        f"The objection holds: {len(escaped)} legacy formulas return a plain `Tensor` for a "
        "TwoTensor input (the in-place write into a fresh `zeros` keeps the zeros' type: "
        + ", ".join(f"`{o}`" for o in escaped[:8]) + (", ..." if len(escaped) > 8 else "")
        + "), right values but the wrong type, which composite compliance refuses; no modern "
        "formula does. Meta and fake tensors run both forms except where the formula reads a "
        "value (`.item()`, `nonzero`: the data-dependent controls), so for them the fast path is "
        "fine. The TwoTensor errors are TwoTensor's own stride assertion on an expanded tensor, "
        "in both forms. A dispatch mode sees in-place ATen calls in "
        f"{seen('legacy')} of {ran('legacy')} legacy formulas (and in {seen('modern')} of "
        f"{ran('modern')} modern ones) and every result is right.")
    br = inputs.get("branches_summary")
    out += para(
        "What this means for deleting branches: the trigger is a vmap level (the change in core), "
        "so a deleted branch leaves wrapper subclasses (DTensor, NJT, anything "
        "`isTensorSubclassLike` is true for) on the fast path"
        + (f", and CompositeCompliance, run on the fast paths, fails {br['compliance_fast_fail']} "
           f"of {br['sites']} sites (data/review-branches.json)" if br else "")
        + ". A branch can go only if the prologue also routes every subclass-like input to the "
        "functionalized graph, which makes its trigger `isTensorSubclassLike` itself: the "
        "per-site guards become one per Node, not none. Meta, fake and dispatch modes need "
        "nothing for correctness (a mode sees the in-place calls, which is its business).")
    return f"holds: {len(escaped)} escape TwoTensor", out


def three(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    c = inputs["compile"]
    if c is None:
        return "unknown", para("**Unknown, because** data/review-compile.json is not there.")
    parts = []
    for b, r in c["backends"].items():
        parts.append(f"`{b}`: {r['compiled']}, equal to eager: {'yes' if r['equals_eager'] else 'no'}, "
                     f"cache after it: {', '.join(r['cache_after_compile']) or 'empty'}, "
                     f"graph breaks: {len(r['graph_breaks'])}")
    out = para(
        "**Fixed in the tool.** Reproduced first: a signature not traced before compiling hit "
        "functorch's internal assert (`dynamicLayerStack.size() >= level`, DynamicLayer.cpp) "
        "because dynamo compiled the tracer's own frames, the failure was cached as untraceable, "
        "and every later eager call with that signature raised \"derivative for aten::copy is "
        "not implemented\". Now the wrapper's transform path runs outside dynamo "
        "(`funcbwd.internals.dynamo.run_eagerly`: a graph break at the call and no frame of the "
        "trace compiled; nothing imports dynamo until torch.compile has), and a trace failure "
        "raised by dynamo's machinery, or a trace started while dynamo traces, is refused in one "
        "line and never cached. `torch.compile(vmap(jacrev(functionalized f)))` with a fresh "
        "signature: " + "; ".join(parts) + "; a later eager call works "
        "(tests/test_tool_compile.py, which fails without the fix).")
    out += para(
        "In core: the prologue must not trace while AOTAutograd traces. Under AOTAutograd the "
        "backward is traced with FakeTensors and, with dynamic shapes, SymInt sizes, under "
        "AOTAutograd's own functionalization; a functionalized graph keyed on concrete sizes "
        "would either be traced per symbolic signature or baked with one size. The sound rule, "
        "the prototype's: when sizes are symbolic or a compile trace is active, run the "
        "generated body (AOTAutograd functionalizes it anyway) and cache nothing. Whether vmap "
        "over a compiled backward then batches the copies is **unknown, because** the prototype "
        "only graph-breaks around itself; it was not run inside an AOTAutograd trace.")
    return "fixed in the tool", out


def four(inputs: Mapping[str, Any], pick: str) -> tuple[str, list[str]]:
    sc = inputs["copy_scenario"]
    if sc is None:
        return "unknown", para("**Unknown, because** data/matrix-test-ops.json is not there.")
    today, after = sc["values"]["today"], sc["values"]["copy_failures_fail"]
    out = para(
        "Scenario: core adds `aten::copy`'s batching rule, derivative and forward-AD formula (the "
        "batching rule is prototyped in Python, scoped: lib/funcbwd_lab/batching/copy.py). Re-ranked "
        "from the saved matrix (funcbwd_lab.studies.review.copy_scenario; a passing sample whose only "
        "slow fallback is `aten::copy` counts as passing without fallback; per_formula's "
        "cost from the bench with the copy rule active, the other costs and the probes kept):")
    out += ["| candidate | passes | without slow fallback, today | with copy's rules | fixes |",
            "|---|---|---|---|---|"]
    for cand in today:
        t, a = today[cand], after[cand]
        out.append(f"| `{cand}` | {t['passed']} of {sc['applicable'][cand]} | {t['no_fallback']} "
                   f"| {a['no_fallback']} | {a['fixes']} |")
    out.append("")
    ties = [c for c in after if c != pick and all(after[c][k] == after[pick][k]
                                                  for k in ("passed", "no_fallback", "fixes"))]
    pf, tr = sc["per_formula_cost"], sc["traced_cost"]
    rule = pf.get("with_copy_rule")
    out += para(
        f"The objection holds for the matrix: with copy's rules "
        f"{', '.join(f'`{c}`' for c in ties) or 'no candidate'} tie `{pick}` on every matrix "
        "criterion. It does not change the pick: re-taken with per_formula's batched cost "
        + (f"measured with the scoped Python copy rule active (bench label `per_formula+copy_rule` "
           f"in data/bench-quick.json: {num(rule['cost_vs_handfixed'])}x the hand-fixed formula, "
           f"against {num(pf['today']['cost_vs_handfixed'])}x without the rule and "
           f"{num(tr['cost_vs_handfixed'])}x for `{pick}`; medians over ops, batch >= 64), "
           if rule else "(not benched with the copy rule: **unknown**), ")
        + f"the decision picks `{sc['picks']['copy_failures_fail']}`. per_formula's cost is "
        "functionalizing at call time, not copy's fallback: it is as slow on ops without a "
        "`copy_`. A C++ batching rule would be faster than the Python one, but the gap is the "
        "per-call functionalization, which here runs torch.func.functionalize's Python wrapping; "
        "how much of it a C++ per-formula functionalization would keep is **unknown, because** "
        f"none was built. {len(sc['copy_failing_cells'])} matrix cells fail on "
        "copy's missing derivative; in the OpInfo sweep the copy_has_no_* regressions of "
        "`whole`/`hooks` (objection 6) are what the scenario removes. So: land copy's three rules "
        "now (a small PR, below: `vmap(jacrev(functionalize(f)))` of pytorch#103329's function "
        "needs them, not the issue's own repro, and those regressions for everyone); the large "
        "change then rests on cost and on deleting branches, not on coverage.")
    verdict = "ties; pick unchanged (cost)" if sc["picks"]["copy_failures_fail"] == pick else \
        f"pick changes to {sc['picks']['copy_failures_fail']}"
    return verdict, out


def seven(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    ch = inputs["cache_hits"]
    if ch is None:
        return "unknown", para("**Unknown, because** data/review-cache-hits.json is not there.")
    out = para(
        f"Measured with the bounded default ({ch['maxsize']} signatures per function, LRU; "
        "funcbwd_lab.studies.review.cache_hits): a function in pytorch#103329's pattern through "
        "torch.func for 3 epochs of a training loop, and the corpus of public code decorated once "
        "and called repeatedly.")
    out += ["| call sequence | calls | hits | misses | hit rate |", "|---|---|---|---|---|"]
    for name, r in ch["loops"].items():
        out.append(f"| {name.replace('_', ' ')} | {r['calls']} | {r['hits']} | {r['misses']} | "
                   f"{r['hit_rate']:.0%} |")
    for t, r in ch["corpus_summary"].items():
        out.append(f"| corpus under `{t}` ({r['all_calls_ok']} cases whose every call works) | - "
                   f"| {r['hits']} | {r['misses']} | {r['hit_rate']:.0%} |")
    out.append("")
    cb = inputs.get("cache_bound")
    if cb is not None:
        runs = cb["runs"]
        out += para(
            "The evidence with the bounded default (funcbwd_lab.studies.review.cache_bound: the "
            "`traced` column of the matrix re-run, every sample): "
            + "; ".join(f"maxsize {k}: {r['traces']} traces, {r['hits']} hits, largest cache "
                        f"{r['largest_cache']}, {len(r['differ_from_unbounded'])} of "
                        f"{r['sample_runs']} sample runs differ from the saved unbounded run"
                        for k, r in runs.items())
            + ". The default never evicts on the evidence (its largest cache is far below the "
            "bound); `maxsize=1`, which evicts on nearly every new signature, traces more and "
            "changes no result.")
    fl, ts = ch["loops"]["float_scalar_per_step"], ch["loops"]["tensor_scalar_per_step"]
    out += para(
        "The objection holds for Python scalars: a float that changes every step misses on "
        f"every call ({fl['misses']} of {fl['calls']}); the same value as a 0-dim tensor misses "
        f"once ({ts['misses']}). Batch sizes under vmap are not in the key (per-sample "
        "gradients hit), a batch size in the shape costs one trace per size, and variable "
        "sequence lengths miss once per length. In the corpus, no case's key changed per call "
        "(repeated misses: "
        + (", ".join(ch["corpus_summary"]["vmap"]["repeated_misses"]) or "none") + "). For core: "
        "scalars stay in the key, so nothing is written per formula and a scalar that changes "
        "every step traces every step; making a scalar a graph input needs to know, per formula, "
        "that no branch reads it (formulas branch on scalars: the change in core, above). "
        "Symbolic sizes (`compiled_args`' key, or make_fx's "
        "symbolic mode) would turn the length misses into hits; the bound keeps a "
        "never-repeating key from growing memory, not from tracing.")
    return "holds for float scalars", out


def eight(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    cg = inputs["callgrind"]
    if cg is None:
        return "unknown", para(
            "**Unknown, because** the callgrind run (funcbwd_lab.studies.review.callgrind, valgrind "
            "3.19 is installed) had not finished in this round; the wall-time figure above stays "
            "\"not resolved\".")
    i = cg["instructions_per_call"]
    out = para(
        f"Counted with `torch.utils.benchmark.Timer.collect_callgrind` ({cg['number']} calls, "
        f"denoised; funcbwd_lab.studies.review.callgrind): the legacy diag formula called directly "
        f"takes {i['formula']:,} instructions per call, through `funcbwd.functionalized` outside "
        f"transforms {i['wrapped']:,}: the prototype adds {cg['wrapper_adds']:,} per call in "
        f"Python, of which the depth read from Python is {i['depth']:,} (mostly Python's call "
        "overhead). A C++ prologue pays the thread-local read of `maybeCurrentDynamicLayer()` "
        "instead, and graph replay per Node in C++ costs what the C++ study measures (data/"
        "cpp.json; the decision on C++ numbers, above); the Python replay's cost is the bench "
        "figures above (What it costs).")
    return "counted", out


def nine(inputs: Mapping[str, Any]) -> tuple[str, list[str]]:
    th = inputs["threads"]
    if th is None:
        return "unknown", para("**Unknown, because** data/review-threads.json is not there.")
    out = para(
        f"Measured (funcbwd_lab.studies.review.threads, tests/test_threads.py): {th['threads']} "
        f"threads x {th['calls_per_thread']} calls of backward through traced graphs (vmap over "
        "cotangents) and plain backwards, on a cold cache so traces race with replays: "
        f"{th['finished']} of {th['calls']} finished, {th['hung_threads']} threads hung "
        f"(timeout {th['timeout_s']:.0f} s), results bit-equal to a single-threaded run: "
        f"{'yes' if not th['unequal_ops'] else 'no: ' + ', '.join(th['unequal_ops'])}, "
        f"{th['traces']} traces (single-threaded: {th['traces_single_threaded']}). The test fails "
        "without the trace lock (signatures traced twice). CPU only: autograd's device threads "
        "(CUDA) are **unknown, because** this machine has no GPU.")
    out += para(
        "The lock: the prototype holds one process-wide lock while it traces (make_fx runs real "
        "meta kernels), never while a cached graph replays; in core the trace should take a "
        "per-key lock (a future per signature) so a trace on one device thread never blocks "
        "replays or other keys.")
    out += para(
        "Tolerance policy of the elision check: exact comparison of the elided and un-elided "
        "graph on one seeded draw, and a mismatch refuses the elision, which keeps the un-elided "
        "(functionalized) graph: correct by construction, only slower. So a nondeterministic "
        "kernel (CUDA atomics in index_add/scatter_add) can cost speed at random, never "
        "correctness. To make refusals reproducible, core should run the check on CPU copies "
        "of the inputs (the elision's layout decisions depend on metadata, not the device), or "
        "with `torch.use_deterministic_algorithms(True)`; where an op has no deterministic "
        "kernel, run the un-elided graph twice and compare with the dtype's tolerance only if it "
        "differs from itself. A tolerance never admits a wrong elision that an exact check on "
        "deterministic kernels would refuse.")
    return "clean on CPU", out
