# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # __OP_TITLE__
#
# __OP_LEDE__
#
# The verdict first, generated from this notebook's own run; then what is particular to `__OP__`,
# then the chapters every op notebook shares: (1) the op and its legacy formula, (2) the failure
# with its dispatch-key trace, (3) every strategy in every scenario, (4) the formula's graph plain
# -> functionalized -> elided, (5) overhead and copies. Every number comes from a `funcbwd` call in
# this notebook; every step asserts what it shows.

# %%
import dataclasses
import os

# Read when torch loads (so before any import of it): keeps torch's C++-side warnings, which are
# timestamped and go straight to stderr, out of the stored outputs. Python warnings are unaffected.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

from funcbwd.errors import first_line
from funcbwd_lab.ops import registry
from funcbwd_lab.run import outcomes, runner, scenarios
from funcbwd_lab.strategies import available
from funcbwd_lab.studies.graphs import graphs
from funcbwd_lab.studies.trace import trace
from funcbwd_lab.tables import fit
from funcbwd_lab.views import display

display.setup_notebook()
OP = "__OP__"
spec = registry.get_op(OP)

# %% [markdown]
# ## The verdict
#
# Every sample of `__OP__`, in every scenario, under every strategy, read from the saved matrix run
# (`data/matrix-test-ops.json`, which the tests keep equal to a fresh run; shown in chapter 3), and
# the verdict `funcbwd_lab.views.display.verdict(OP, results)` generates from it. To run the
# cells here instead, set `RECOMPUTE = True` (a minute or two).

# %%
RECOMPUTE = False
results = display.matrix_results([OP], recompute=RECOMPUTE)
assert {r.strategy for r in results} == set(available())
display.verdict(OP, results)

# __OP_INTRO__

# %% [markdown]
# ## 1. The op and its legacy formula
#
# The formula below is funcbwd's line-for-line Python re-creation of the C++ backward of early
# 2022 (in `funcbwd_lab.ops.discussion`, one module per op, beside core's modern formula); the legacy
# op runs torch's forward and this backward.

# %%
facts = {"op": f"{spec.name} [{spec.group}]", "schema": spec.schema, "legacy": spec.source,
         "fixed by": spec.fixed_by, "samples": "; ".join(s.name for s in spec.samples()),
         "note": spec.notes}
print("\n".join(fit(f"{k + ':':11s} {v}") for k, v in facts.items() if v))
assert spec.name == OP and spec.samples()

# %%
display.formula_source(OP)

# %% [markdown]
# ## 2. The failure, reproduced
#
# The legacy formula as written (strategy `plain`) is run in the scenarios closest to the
# original report first (`vmap_cotangents`, then `vmap_all_args`, which also batches
# index/mask/min/max as PyTorch's `test_vmapvjp` does), sample by sample, until a cell fails.

# %%
search = ["vmap_cotangents", "vmap_all_args"] + [s for s in scenarios.BACKWARD_NAMES
                                                  if s not in ("vmap_cotangents", "vmap_all_args")]
cells = (runner.run(OP, sc, "plain", smp) for sc in search for smp in spec.samples())
failing = next((cell for cell in cells if cell.status != "pass"), None)
assert failing is not None, "the legacy formula passes everywhere: nothing to reproduce"
print(f"first failing cell: sample {failing.sample!r}, scenario {failing.scenario}")
print(fit(f"status: {failing.status} ({failing.reason}: {outcomes.REASONS[failing.reason]})"))
print(fit(f"error: {failing.error_class}: {first_line(failing.message, 200)}"))

# %% [markdown]
# The dispatch-key trace of that cell (`funcbwd_lab.studies.trace.trace.trace`): each torch call the formula made,
# the functorch interpreter stack, each tensor argument's wrapper chain, and how vmap handles the
# op. The failing call is marked. Only the last formula call is shown (the one that failed;
# `vmap_all_args` calls the formula once per in_dims choice).

# %%
t = trace.trace(OP, "plain", failing.scenario, failing.sample)
assert t.status == failing.status and t.reason == failing.reason
print(f"{len(t.calls)} formula call(s) under a transform; showing the last")
display.long_text(fit(dataclasses.replace(t, calls=t.calls[-1:]).text()), head=7,
                  summary="each torch call of that formula call, the failing one marked")

# %% [markdown]
# ## 3. Every strategy in every scenario
#
# The run the verdict above comes from: every sample of the op, in every scenario, under every
# strategy, each compared with a per-sample loop over plain autograd (atol = rtol = 1e-4). The
# decision's pick (`display.saved_decision()`, the README's) is marked; the legend under the table
# says what each mark means.

# %%
display.matrix_table(results, pick=display.saved_decision().pick)

# %% tags=["nbval-ignore-output"]
display.matrix_heatmap(results, title=f"{OP}: scenario x strategy (hover for reasons)")

# %% [markdown]
# Slow fallback: the ops for which vmap ran its per-sample loop, per strategy (passing cells only
# count; a strategy with no entry never needed it):

# %%
fallback = {}
for r in results:
    if r.status == "pass" and r.fallback_ops:
        fallback.setdefault(r.strategy, set()).update(display.fallback_names(r.fallback_ops))
ran = [st for st in available() if st in {r.strategy for r in results}]
for st in ran:
    if st in fallback:
        print(fit(f"{st:12s} {', '.join(sorted(fallback[st]))}"))
print(fit("no fallback: " + (", ".join(st for st in ran if st not in fallback) or "(none)")))

# __OP_EXTRA__

# %% [markdown]
# ## 4. The formula's graph: plain -> functionalized -> elided
#
# `funcbwd_lab.studies.graphs.graphs.capture` traces the formula with `make_fx` for the op's first sample: as
# written (`plain`), under `torch.func.functionalize` (what `per_formula` runs) and after the FX
# pass that elides functionalization's `aten.copy` (what `traced` runs).

# %%
captures = {form: graphs.capture(OP, form) for form in ("plain", "functionalized", "traced")}
for form, cap in captures.items():
    if cap.ok:
        print(fit(f"{form:15s} {len(cap.nodes)} ops: {', '.join(cap.op_names())}"))
    else:
        print(fit(f"{form:15s} capture failed: {first_line(cap.error, 150)}"))
# A capture may only fail on data-dependent control flow (make_fx with fake tensors cannot branch
# on values); anything else would be a bug in the graph tools.
assert all(c.ok or "data-dependent" in c.error for c in captures.values())

# %%
for a, b in (("plain", "functionalized"), ("functionalized", "traced")):
    if captures[a].ok and captures[b].ok:
        print(fit(graphs.diff(OP, a, b).unified() or f"{a} and {b} graphs are identical") + "\n")
    else:
        print(f"no diff {a} -> {b}: a capture failed (see above)\n")

# %% [markdown]
# Copies: copy-like ops in each form and the bytes they write (fake-tensor metadata), unbatched and
# under vmap (batch 4), with the excess over torch's modern formula (`builtin`).

# %%
for vmapped in (False, True):
    print(f"vmap={vmapped}")
    print(fit(graphs.format_copy_table(graphs.copy_table(ops=[OP], vmap=vmapped))) + "\n")

# %% [markdown]
# ## 5. Overhead and copies, measured
#
# From the saved quick benchmark (`python -m funcbwd_lab bench --quick --out data/bench-quick.json --force`):
# timings are machine-dependent, so only the charts show them (as ratios) and they are not compared
# by the notebook tests.

# %% tags=["nbval-ignore-output"]
BENCH = os.path.join("..", "data", "bench-quick.json")
saved_bench = None
if os.path.exists(BENCH):
    from funcbwd_lab.studies.bench import results as bench_results
    from funcbwd_lab.studies.bench import charts as plots

    saved_bench = bench_results.load(BENCH)
    for metric in ("ratio_vs_handfixed", "ratio_vs_builtin", "speedup_vs_loop"):
        plots.ratio_vs_batch(saved_bench, "small", metric, ops=[OP], cols=1).show()
else:
    print(f"no saved bench results at {BENCH}")

# %% [markdown]
# With vmap off, what each strategy adds to a plain backward through this op (microseconds per
# autograd node over no strategy; `noop_hook` is the floor any hook-based approach pays):

# %% tags=["nbval-ignore-output"]
if saved_bench is not None:
    plots.overhead_chart(saved_bench, ops=[OP]).show()
