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
# # funcbwd: how should in-place backward formulas be functionalized for `vmap(vjp(f))`?
#
# **The decision first**, computed by `funcbwd_lab.studies.review.review.decision` from the saved
# evidence (`data/review-evidence.json`; counts over every sample). Section 4 checks its counts
# against the saved matrix run; `design_review` recomputes the evidence and weighs it point by point.

# %%
import os

os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # read when torch loads: no C++ warnings in outputs
from funcbwd_lab.studies.review import review
from funcbwd_lab.views import display
from funcbwd_lab.studies.review import decision as decision_view

display.setup_notebook()
evidence = review.load_evidence(os.path.join("..", "data", review.EVIDENCE_FILE))
decision = review.decision(evidence)
decision_view.block(decision)

# %% [markdown]
# The same numbers as a chart, one panel per criterion in ranking order (its legend says what each
# colour marks):

# %% tags=["nbval-ignore-output"]
decision_view.chart(decision)

# %% [markdown]
# ## The problem
#
# In late 2021 several PyTorch backward formulas wrote into a freshly made tensor *in place*
# (`zeros(...).index_add_(...)`, `.diagonal().copy_(...)`, `.scatter_(...)`). Under
# `torch.func.vmap(vjp_fn)` the incoming grad is batched but the fresh tensor is not, and vmap
# refuses to write a batched tensor into an unbatched one. The design question (functorch#241):
# *how should such formulas be functionalized when vmap is active?*
#
# Below: the problem in five minutes, then the whole op x strategy x scenario matrix, then an
# explorer. Every number is computed by a `funcbwd` call in this notebook.

# %%
import torch
from torch.func import vmap

from funcbwd import internals
from funcbwd.errors import first_line
from funcbwd_lab.ops import registry
from funcbwd_lab.run import outcomes
from funcbwd_lab.strategies import available, get_strategy
from funcbwd_lab.tables import fit

print("strategies:", ", ".join(available()))

# %% [markdown]
# ## 1. One failing call
#
# `diag` of a non-square matrix. Its legacy backward (PyTorch ~1.10) is re-created line for line in
# `funcbwd_lab.ops.discussion.diag`; the `plain` strategy runs it as written.

# %%
display.formula_source("diag")

# %% [markdown]
# The helper below runs `vmap(vjp_fn)` over a batch of 3 cotangents under a strategy. Every
# strategy supplies the differentiated function and the `vjp` entry point.

# %%
spec = registry.get_op("diag")
x, k = spec.sample("3x5 k=1").args
cotangents = torch.randn(3, *torch.diag(x, k).shape, generator=torch.Generator().manual_seed(0))


def batched_vjp(strategy_name: str) -> torch.Tensor:
    st = get_strategy(strategy_name)
    _, vjp_fn = st.vjp(lambda t: st.function(spec)(t, k), x)
    (grads,) = vmap(vjp_fn)(cotangents)
    return grads


try:
    batched_vjp("plain")
    raise AssertionError("the legacy formula was expected to fail under vmap")
except RuntimeError as e:
    error = e
print(fit(f"{type(error).__name__}: {first_line(str(error), 160)}"))
print("classified as:", outcomes.classify(error))
assert outcomes.classify(error) == "vmap_inplace"
assert internals.stack_depth() == 0  # the failing transform left no level behind

# %% [markdown]
# ## 2. Why it fails
#
# Inside the backward, `grad` is a batched tensor (one slice per cotangent), but
# `zeros(input_sizes)` is a plain tensor of the per-sample shape. `copy_` into its diagonal would
# have to store 3 values in one slot. The probe below runs the formula's first two lines under
# vmap and asks `funcbwd.internals` which tensors are batched.

# %%
seen = {}


def probe(grad: torch.Tensor) -> torch.Tensor:
    target = torch.zeros(3, 5)
    seen["grad is batched"] = internals.is_batched(grad)
    seen["zeros(...) target is batched"] = internals.is_batched(target)
    return grad


vmap(probe)(cotangents)
print(seen)
assert seen == {"grad is batched": True, "zeros(...) target is batched": False}

# %% [markdown]
# ## 3. The idea: functionalize the formula when vmap is active
#
# `torch.func.functionalize` rewrites mutations into out-of-place ops: `copy_` into a view becomes
# `copy` + `diagonal_scatter`, which vmap can batch. The `per_formula` strategy wraps every legacy
# formula in one generic decorator that does this only while a vmap level is active. The same call
# now passes and matches a per-sample loop over plain autograd:

# %%
grads = batched_vjp("per_formula")
xr = x.clone().requires_grad_()
loop = torch.stack([torch.autograd.grad(torch.diag(xr, k), xr, c)[0] for c in cotangents])
print("shape:", tuple(grads.shape), "| max abs error vs loop:", float((grads - loop).abs().max()))
assert torch.allclose(grads, loop, atol=1e-6)

# %% [markdown]
# ## 4. The matrix: every op x scenario x strategy
#
# `funcbwd_lab.studies.matrix.matrix.run_test_ops` runs each of the 8 test ops of functorch#241,
# every sample, in 8 transform scenarios under every strategy, and compares each result with a
# per-sample Python loop. This notebook reads its saved run (`data/matrix-test-ops.json`, which the
# tests keep equal to a fresh run); set `RECOMPUTE = True` to run it here (a few minutes). Every
# count in this notebook is over op x scenario cells, and a cell passes only if every one of its
# samples passes: the same basis as the decision above. Strategies:

# %%
for name in available():
    print(fit(f"{name:12s} {get_strategy(name).summary}"))

# %%
RECOMPUTE = False
results = display.matrix_results(recompute=RECOMPUTE)
print(fit(review.basis_text(review.basis(results))))
print(fit(f"sample runs by status: {({s: sum(r.status == s for r in results) for s in outcomes.STATUSES})}"))

# %% [markdown]
# Hover a cell for the classified failure reason, what ran, the ops that sent vmap to its slow
# per-sample fallback and the failing samples; the legend names each colour.

# %% tags=["nbval-ignore-output"]
display.matrix_heatmap(results, title="8 test ops x 8 scenarios x strategies (all samples)")

# %% [markdown]
# The same matrix as a table, the decision's pick marked; the legend under it says what each mark
# means:

# %%
display.matrix_table(results, caption="8 test ops x 8 scenarios", pick=decision.pick)

# %% [markdown]
# Per strategy, the counts the decision weighs, recomputed from this run (cells over all samples):
# fixes over plain (plain fails, the strategy passes with its own mechanism ran), passes of the
# applicable cells, passes through the slow fallback, failures and wrong results.

# %%
counts = review.matrix_evidence(results)
display.records_table([{"strategy": st, "fixes over plain": f"{c['fixes']}/{c['plain_failures']}",
                        "passes": f"{c['passed']}/{c['applicable']}", "via slow fallback": c["fallback_cells"],
                        "fail": c["failed"], "wrong": c["wrong"]} for st, c in counts.items()],
                      caption=review.basis_text(review.basis(results)))

# %% [markdown]
# Those are the numbers the saved evidence at the top holds; if either file changed without the
# other, this cell says which differ (regenerate both with `python tools/update_readme.py`):

# %%
keys = ("fixes", "plain_failures", "passed", "applicable", "no_fallback", "wrong")
stale = [f"{st}.{k}: saved {evidence.strategies[st].get(k)}, now {c[k]}"
         for st, c in counts.items() if st in evidence.strategies for k in keys
         if evidence.strategies[st].get(k) != c[k]]
print("\n".join(stale) or "the saved evidence matches this run on every count")
assert not stale

# %% [markdown]
# ## 5. Guide to the other notebooks
#
# - `op_diag`, `op_index_select`, `op_topk`, `op_sort`, `op_mode`, `op_masked_select`, `op_clamp`,
#   `op_prod`: one per test op, same chapters (legacy formula and citation, the failure with its
#   dispatch-key trace, every strategy in every scenario over all samples, the graph
#   plain -> functionalized -> elided, overhead and copies, a generated verdict).
# - `overhead_and_copies`: what functionalization costs, across ops, from saved bench results.
# - `coverage`: the sweep of torch's OpInfo database.
# - `design_review`: the decision above, its evidence recomputed, then the original discussion
#   answered point by point (approaches 1-3, the cheap option 2, copies, ops becoming public API),
#   what it would cost in C++, the PR, the review's ten objections and the conclusion.
#
# ## 6. Explorer
#
# Pick an op, a strategy and a scenario: the status line, the chart (every strategy on that op and
# scenario), the dispatch-key trace and the graph diff update in place. Cells not in the matrix
# above are run on demand. Opened without a kernel, the cell shows a static snapshot of this first
# view instead; run it to interact.

# %%
from funcbwd_lab.views.widgets import Explorer

explorer = Explorer(results, op="diag", strategy="plain", scenario="vmap_cotangents")
assert explorer.summary("diag", "vmap_cotangents", "plain")["status"] == "fail"

# %% tags=["nbval-ignore-output"]
explorer

# %% [markdown]
# Changing a dropdown from code does what a click does:

# %%
explorer.select(strategy="per_formula")
print(explorer.figure.layout.title.text)
assert explorer.summary("diag", "vmap_cotangents", "per_formula")["status"] == "pass"
