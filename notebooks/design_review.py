# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Design review: how should in-place backward formulas be functionalized under vmap?
#
# **The decision first**, weighed by `funcbwd_lab.studies.review.review.decision` from the saved
# evidence (`data/review-evidence.json`, written by `tools/update_readme.py`: every sample of the 8
# test ops in every scenario under every strategy, the saved bench run and the probes). The next
# cells recompute that evidence from the saved matrix run and this notebook's own probes (seconds);
# `RECOMPUTE = True` runs the matrix here too (a few minutes). Then the original discussion
# (functorch#241), point by point, each point with the computed cell that decides it, and the
# conclusion.

# %%
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # read when torch loads: no C++ warnings in outputs
from funcbwd_lab.studies.review import decision as decision_view
from funcbwd_lab.studies.review import review
from funcbwd_lab.tables import fit
from funcbwd_lab.views import display

display.setup_notebook()
DATA = os.path.join("..", "data")
saved = review.load_evidence(os.path.join(DATA, review.EVIDENCE_FILE))
decision = review.decision(saved)
decision_view.block(decision)

# %% [markdown]
# The same numbers as a chart, one panel per criterion in ranking order (its legend says what each
# colour marks):

# %% tags=["nbval-ignore-output"]
decision_view.chart(decision)

# %% [markdown]
# Does the saved evidence say what the code computes? The evidence again, from the matrix (the
# saved run, or with `RECOMPUTE = True` a run here), the saved bench and this notebook's probes:

# %%
from funcbwd_lab.studies.bench import results as bench_results
from funcbwd_lab.studies.matrix import matrix

RECOMPUTE = False
results = display.matrix_results(recompute=RECOMPUTE)
bench = bench_results.load(os.path.join(DATA, review.BENCH_FILE))
evidence = review.collect_evidence(results, bench, bench_source="data/" + review.BENCH_FILE)
print("\n".join(review.compare_evidence(saved, evidence)) or "the saved evidence agrees on every count")
assert review.decision(evidence).pick == decision.pick

# %% [markdown]
# ## The candidates
#
# | strategy | the discussion's name |
# |---|---|
# | `composite` | **approach 1**: each backward formula a (private) composite operator whose vmap kernel functionalizes it |
# | `hooks` | **approach 2**: autograd pre/post hooks turn functionalization on before a node runs and off after |
# | `whole` | **approach 3**: functionalize the whole backward when vmap sees a backward pass |
# | `per_formula` | the **cheap option 2**, done generically: one decorator functionalizes a formula iff vmap is active |
# | `traced` | `per_formula` traced once per signature, with functionalization's `aten.copy` elided |
#
# `plain` (the legacy formula as written) and `builtin` / `handfixed` (torch's modern formula, in
# C++ / in Python) are the references. A helper for the cells below: per strategy, the summarized
# cells (op, scenario) -> status, every sample.

# %%
cells = matrix.summarize(results)


def status(strategy: str) -> dict:
    return {(op, sc): c for (op, sc, st), c in cells.items() if st == strategy}


print(fit(review.basis_text(evidence.basis)))

# %% [markdown]
# ## Approach 1: composite operators (`composite`)
#
# First, correctness: of the cells where the legacy formula fails, how many does each candidate fix
# (pass, with its own mechanism ran in every sample)?

# %%
for st in decision.ranking:
    e = evidence.strategies[st]
    print(f"{st:12s} fixes {e['fixes']}/{e['plain_failures']} cells where plain fails")

# %% [markdown]
# Approach 1's price is in its design: every formula becomes an operator the dispatcher knows. How
# many, over the corpus of legacy formulas (`review_probes.operator_growth`, run above)?

# %%
added = evidence.strategies["composite"]["new_op_names"]
print(fit(f"{len(added)} operators added, e.g. {', '.join(added[:3])}"))
assert evidence.strategies["composite"]["new_ops"] == len(added) > 0

# %% [markdown]
# Each call goes through the dispatcher even with vmap off. What does that cost per backward node,
# next to the others (saved bench run)?

# %%
for st in decision.ranking:
    us = evidence.strategies[st]["vmap_off_us"]
    print(f"{st:12s} vmap off: {'not measured' if us is None else f'{us:.1f}'} µs per backward node over no strategy")

# %% [markdown]
# ## "Ops become public API"
#
# The thread's worry about approach 1: an operator, even a private one, is serialization surface.
# `composite.serialization_probe` exports a module calling one, saves it and loads it back with and
# without the library (`fresh_process=False`: the in-process checks only):

# %%
import warnings

from funcbwd_lab.strategies import composite

with warnings.catch_warnings():  # torch.export's own deprecation notices are not the question
    warnings.simplefilter("ignore", FutureWarning)
    facts = composite.serialization_probe("diag", fresh_process=False)
for key in ("op", "op_in_graph", "survives_decompositions", "artifact_names_op", "load_ok"):
    print(f"{key:24s} {facts.get(key)}")
print(fit(f"load without the library: {({k: v for k, v in facts.items() if 'without' in k})}"))

# %% [markdown]
# ## Approach 2: hooks (`hooks`), and approach 3: the whole backward (`whole`)
#
# Both functionalize more than the formula: the whole node, or the whole backward. Which cells that
# `per_formula` passes do they miss, and why?

# %%
base = status("per_formula")
for st in ("hooks", "whole"):
    mine = status(st)
    missed = sorted((op, sc, mine[(op, sc)]["reason"]) for (op, sc), c in base.items()
                    if c["status"] == "pass" and mine[(op, sc)]["status"] != "pass")
    print(f"{st}: {len(missed)} cells", *(fit(f"  {op} / {sc}: {reason}") for op, sc, reason in missed), sep="\n")

# %% [markdown]
# The thread's requirement for hooks: functionalization "unconditionally disabled after [the node],
# even if the backward raises". `review_probes.error_safety` raises inside formulas (4 points, an
# Exception and a KeyboardInterrupt, 2 scenarios) and compares torch's transform state before and
# after, for every candidate:

# %%
for st in decision.ranking:
    e = evidence.strategies[st]
    print(f"{st:12s} {e['leaks']} leaks after {e['checked']} raising backwards", *map(fit, e["leak_cases"]), sep="\n  ")

# %% [markdown]
# The hooks' own cost with vmap off, against a no-op Python hook (paired samples from the saved
# bench run; "not resolved" when the run's noise hides it):

# %%
claim = bench_results.hooks_claim_result(bench)
print(fit(claim.get("reason") or "\n".join(f"{g['graph']}: {g.get('verdict', g.get('error'))}" for g in claim["graphs"])))

# %% [markdown]
# ## The cheap option 2: functionalize each formula (`per_formula`), and `traced`
#
# One decorator, nothing written per formula: blanking diag's hand-written schema does not stop it
# (`review_probes.needs_per_op_input`: 1 = the strategy needs it):

# %%
from funcbwd_lab.studies.review import probes as review_probes

print({st: review_probes.needs_per_op_input(st) for st in ("per_formula", "traced", "composite")})

# %% [markdown]
# Where does vmap still run its slow per-sample loop (an op without a batching rule) under it, for
# which ops, and does `traced` (copy elision) remove them?

# %%
for st in ("per_formula", "traced"):
    slow = {f for c in status(st).values() if c["status"] == "pass" for f in c["fallback_ops"]}
    e = evidence.strategies[st]
    print(fit(f"{st:12s} {e['fallback_cells']} cells via the slow fallback, for: {', '.join(sorted(slow)) or '-'}"))

# %% [markdown]
# ## "Copies seem scary"
#
# Functionalization replaces a write into a view by a copy plus a `*_scatter`. How many copy-like
# ops does each form add over `builtin`'s graph, under vmap (`funcbwd_lab.studies.graphs.graphs.copy_table`)?

# %%
from funcbwd_lab.studies.graphs import graphs
from funcbwd_lab.ops import registry

copy_rows = graphs.copy_table(ops=registry.TEST_OPS, vmap=True)
for st in decision.ranking:
    form = graphs.STRATEGY_FORMS[st]
    extra = sum(r["extra_copies"] for r in copy_rows if r["form"] == form and r["extra_copies"] is not None)
    print(f"{st:12s} form {form:15s} extra copies over builtin: {extra}")

# %% [markdown]
# And what they cost, batched: the median over ops of the time ratio at batch >= 64 (saved bench
# run; machine-dependent, so not compared by the notebook tests):

# %% tags=["nbval-ignore-output"]
for st in decision.ranking:
    e = evidence.strategies[st]
    hf, bi = e["cost_vs_handfixed"], e["cost_vs_builtin"]
    print(f"{st:12s} x handfixed: {'-' if hf is None else f'{hf:.2f}'}  x builtin: {'-' if bi is None else f'{bi:.2f}'}")

# %% [markdown]
# ## What no candidate solves
#
# Functionalization removes in-place ops; it cannot remove a branch on data (`prod`'s `.item()`)
# or a data-dependent output shape (`masked_select` when its input is batched):

# %%
for u in evidence.unsolved:
    print(fit(f"{u['op']}: {u['reason']} in {', '.join(u['scenarios'])}; builtin passes "
              f"{', '.join(u['builtin_passes']) or 'none'}"))

# %% [markdown]
# ## The question today: which of core's hand-written branches would the pick delete?
#
# Core still carries 36 `isTensorSubclassLike` branches in `FunctionsManual.cpp` (24 backward,
# 12 forward-mode) whose fast path writes in place. `python -m funcbwd_lab deletable` runs each fast
# path alone under `traced` and `per_formula` in every applicable scenario and times it against
# the hand-written out-of-place path; the 6 data-dependent sites are the negative controls. The
# table is saved (`data/live-deletable.json`, about 9 minutes to recompute); the headlines, and the
# sites `traced` does not clear with why (the first reason found per site), are computed from its
# rows:

# %%
import json

from funcbwd_lab.studies.deletable import deletable
from funcbwd_lab.studies.deletable import render as live

live_table = json.load(open(os.path.join(DATA, live.LIVE_FILE_NAME)))
assert deletable.counts(live_table, "traced")["in_place"] == deletable.IN_PLACE_SITES
assert deletable.counts(live_table, "traced")["controls_deletable"] == 0, "a data-dependent control was judged deletable"
display.markdown(live.markdown(live_table))

# %% [markdown]
# ## "Doesn't torch.compile already do this?"
#
# The `compiled` reference row of the decision runs the legacy formulas under
# `torch.compile(aot_eager)` of the whole transform call: it fixes none of the cells where the
# legacy formula fails. Its study (`funcbwd_lab.studies.compiled`, saved in `data/compiled.json`, about
# 20 minutes to recompute) runs every cell under three backends and records what dynamo compiled.
# The answer, computed from that file (`funcbwd_lab.studies.review.compiled_answer`):

# %%
from funcbwd_lab.studies.review import compiled_answer
from funcbwd_lab.tables import paragraph

compiled = json.load(open(os.path.join(DATA, "compiled.json")))
print("\n".join(paragraph(s) for s in compiled_answer.answer(compiled)))
row = evidence.strategies["compiled"]
mine = status("compiled")
differ = [f"{c['op']} / {c['scenario']}: the matrix {mine[(c['op'], c['scenario'])]['status']}, "
          f"the study {c['status']}" for c in compiled["registered_row"]
          if (c["op"], c["scenario"]) in mine and mine[(c["op"], c["scenario"])]["status"] != c["status"]]
print("cells where the matrix's compiled row and the study's differ:", *differ or ["none"], sep="\n  ")
assert row["fixes"] == sum(c["status"] == "pass" and c["mechanism_ran"] for c in compiled["registered_row"])

# %% [markdown]
# Each kind of failure, with its reason put together from what the study recorded: the stage that
# raised, where dynamo broke the graph (and dynamo's own words), the error's first line. Every
# failing cell belongs to exactly one kind:

# %%
kinds = compiled_answer.failure_kinds(compiled)
for k in kinds:
    cells_per_backend = ", ".join(f"{b} {n}" for b, n in k["cells"].items())
    print(paragraph(f"[{k['code']}] {cells_per_backend}: {k['reason']}", hanging="    "))
failing = [r for r in compiled["outcomes"] if r["status"] not in ("pass", "not_applicable")]
assert sum(sum(k["cells"].values()) for k in kinds) == len(failing)

# %% [markdown]
# Why a compiled "pass" is not torch.compile running the formula: the control is a well-formed
# `autograd.Function` for diag whose backward returns *twice* the gradient. Eager `vmap(vjp)` returns
# twice torch's gradient (the custom backward ran); compiled, it returns torch's own gradient:
# dynamo inlined the forward and dropped the backward (pytorch#193279).

# %%
drops = compiled_answer.drop_control(compiled)
for d in drops:
    print(fit(f"{d['backward']:22s} {d['backend']:10s} eager: {d['eager']:20s} compiled: {d['compiled']}"))
assert all(not p["function_in_graph"] for p, d in zip(compiled["drop_probe"], drops) if d["dropped"])

# %% [markdown]
# Its cost is not in the bench (a slow strategy: every cell compiles), so the decision table shows
# `–` for `compiled`'s timings and says where they are measured. On torch's own ops, where
# torch.compile can compile, the study times compiled against eager (ratios of this run only):

# %% tags=["nbval-ignore-output"]
for c in compiled_answer.cost(compiled):
    median = "-" if c["median_ratio"] is None else f"{c['median_ratio']:.2f}x"
    print(f"{c['variant']:13s} {c['backend']:10s} median {median} eager's time, "
          f"first call {c['median_compile_s']:.1f} s, transform in a graph {c['in_graph']}/{c['timed']}")
    if c["wrong"]:
        print(f"{'':25s}WRONG in {c['wrong']} of {c['cases']} cases, not timed: "
              f"{', '.join(c['wrong_cases'])}")

# %%
assert all(row[c.name] is None for c in review.CRITERIA if c.timing)
notes = review.decision(evidence).notes
assert any("`compiled`'s timings are not measured" in n and "data/compiled.json" in n for n in notes)

# %% [markdown]
# ## "What would it cost in C++?"
#
# Core would not run formulas in Python, so the question is what each mechanism costs by itself.
# `funcbwd_lab.studies.review.cpp_cost` keeps the Python floor (any formula in Python, `handfixed` /
# `builtin`) apart from functionalization's own cost, measured on torch's own C++ nodes (the OpInfo
# sweep's cost entries, `traced_backward`'s graphs) or in runs whose two arms are both Python. The
# RFC's answer (`docs/rfc.md`, generated from the saved data; the next cells check it is current),
# with every figure's basis, assumptions and falsifier a click away:

# %%
from funcbwd_lab.studies.review import cpp_cost, rfc
from funcbwd_lab.views import markup

rfc_text = rfc.document(rfc.load(DATA))
assert rfc_text == open(os.path.join("..", "docs", "rfc.md")).read(), \
    "docs/rfc.md is stale: python -m funcbwd_lab rfc --out docs/rfc.md --force"
display.markdown(markup.section(rfc_text, "## The decision on C++ numbers", keep_heading=True))
costs = markup.section(rfc_text, "## What it costs (Python)", keep_heading=False)
head, _, figures = costs.partition("\n### ")  # the headline, then one part per candidate
shown = head + "\n" + markup.collapsed("Every figure: its basis, assumptions and falsifier", "### " + figures)
display.markdown(markup.resolve_links(shown, rfc_text, document="docs/rfc.md", here="notebooks"))

# %% [markdown]
# The figures are read from the same saved bench run as the decision's timing columns:

# %%
cpp_inputs = cpp_cost.load_inputs(DATA)
estimates = cpp_cost.estimates(cpp_inputs, saved.to_dict())
by = {}  # each candidate's first figure: its batched cost
for e in estimates:
    by.setdefault(e.candidate, e)
assert by["traced"].value == saved.strategies["traced"]["cost_vs_handfixed"]
assert by["python floor"].value == saved.strategies["handfixed"]["cost_vs_builtin"]

# %% [markdown]
# ## "What would the PR look like?"
#
# `python -m funcbwd_lab rfc --out docs/rfc.md --force` writes the pick as an RFC: the files core
# would change (the generated `Node::apply`'s entry point, where the functionalized graphs are
# generated and cached), the functorch expected failures it retires (from the OpInfo sweep's
# `data/coverage.json.gz`), the hand-written branches it deletes, and its cost on one basis next
# to the bench's targets. Its proposal, from the committed [docs/rfc.md](../docs/rfc.md):

# %%
display.document_part(rfc_text, "## The change in core", document="docs/rfc.md")

# %% [markdown]
# ## The review's ten objections
#
# Read as a core maintainer would, the RFC drew ten objections (issue 28): "fixes" that are only
# speed entries, tensor subclasses, torch.compile around the tool, the pick resting on
# `aten::copy`'s missing rules, compiled autograd, what it breaks, cache keys, the C++ cost,
# threads, forward mode. The RFC answers each from saved data (or says "unknown, because"); each
# row links to its answer in the RFC and to the data it rests on:

# %%
display.document_part(rfc_text, "## The ten objections", until="### 1. ", document="docs/rfc.md")

# %% [markdown]
# ## Conclusion
#
# The RFC's summary: the pick and why, what it costs, what it does not fix, and where the
# objections and the small PRs the evidence supports today are answered:

# %%
display.document_part(rfc_text, "## Summary", document="docs/rfc.md")
