# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # funcbwd overview: functionalizing in-place backward formulas for `vmap(vjp(f))`
#
# In late 2021 several PyTorch backward formulas wrote into a freshly made tensor *in place*
# (`zeros(...).index_add_(...)`, `.diagonal().copy_(...)`, `.scatter_(...)`). Under
# `torch.func.vmap(vjp_fn)` the incoming grad is batched but the fresh tensor is not, and vmap
# refuses to write a batched tensor into an unbatched one. The design question (functorch#241):
# *how should such formulas be functionalized when vmap is active?*
#
# This notebook shows the problem in five minutes, then the whole op x strategy x scenario matrix,
# then an explorer. Every number below is computed by a `funcbwd` call in this notebook.

# %%
import os

# Read when torch loads (so before any import of it): keeps torch's C++-side warnings, which are
# timestamped and go straight to stderr, out of the stored outputs. Python warnings are unaffected.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

import torch
from torch.func import vmap

from funcbwd import internals
from funcbwd.ops import registry
from funcbwd.run import matrix
from funcbwd.views import display
from funcbwd.strategies import available, get_strategy

display.setup_notebook()
print("strategies:", ", ".join(available()))

# %% [markdown]
# ## 1. One failing call
#
# `diag` of a non-square matrix. Its legacy backward (PyTorch ~1.10) is re-created line for line in
# `funcbwd.ops.legacy_formulas`; the `plain` strategy runs it as written.

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
    with st.active():
        _, vjp_fn = st.vjp(lambda t: st.function(spec)(t, k), x)
        (grads,) = vmap(vjp_fn)(cotangents)
    return grads


try:
    batched_vjp("plain")
    raise AssertionError("the legacy formula was expected to fail under vmap")
except RuntimeError as e:
    error = e
print(type(error).__name__ + ":", matrix.first_line(str(error), 160))
print("classified as:", matrix.classify(error))
assert matrix.classify(error) == "vmap_inplace"
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
# `funcbwd.run.matrix.run_matrix` runs each of the 8 test ops of functorch#241 (first sample here; the
# per-op notebooks run every sample) in 8 transform scenarios under every strategy, and compares
# each result with a per-sample Python loop. Strategies:

# %%
for name in available():
    print(f"{name:12s} {get_strategy(name).summary}")

# %%
results = matrix.run_matrix(ops=registry.TEST_OPS, samples="first")
print(len(results), "cells;", {s: sum(r.status == s for r in results) for s in matrix.STATUSES})

# %% [markdown]
# Hover a cell for the classified failure reason, the ops that sent vmap to its slow per-sample
# fallback and the failing samples. (Colour: green pass, light green pass via the slow fallback,
# orange wrong result, red failure, grey not applicable.)

# %% tags=["nbval-ignore-output"]
display.matrix_heatmap(results, title="8 test ops x 8 scenarios x strategies (first sample)")

# %% [markdown]
# The same matrix as text (`ok`, `FAIL k/n reason`, `WRONG`, `n/a`; `+fb` = the slow fallback ran):

# %%
print(display.matrix_text(results))

# %% [markdown]
# Per strategy, the number of op x scenario cells that pass, over the applicable ones:

# %%
summary = matrix.summarize(results)
rows = []
for st in available():
    cells = [c for (op, sc, s), c in summary.items() if s == st]
    applicable = [c for c in cells if c["status"] != "not_applicable"]
    rows.append({
        "strategy": st,
        "pass": sum(c["status"] == "pass" for c in applicable),
        "applicable": len(applicable),
        "via slow fallback": sum(c["status"] == "pass" and bool(c["fallback_ops"]) for c in applicable),
        "fail": sum(c["status"] == "fail" for c in applicable),
        "wrong": sum(c["status"] == "mismatch" for c in applicable),
    })
display.records_table(rows)

# %% [markdown]
# ## 5. Guide to the other notebooks
#
# - `op_diag`, `op_index_select`, `op_topk`, `op_sort`, `op_mode`, `op_masked_select`, `op_clamp`,
#   `op_prod`: one per test op, same chapters (legacy formula and citation, the failure with its
#   dispatch-key trace, every strategy in every scenario over all samples, the graph
#   plain -> functionalized -> elided, overhead and copies, a generated verdict).
# - `overhead_and_copies`: what functionalization costs, across ops, from saved bench results.
# - `coverage`: the sweep of torch's OpInfo database.
# - `design_review`: the three approaches of the original discussion plus `per_formula` and
#   `traced`, compared on computed criteria, ending with a generated recommendation.
#
# ## 6. Explorer
#
# Pick an op, a strategy and a scenario: the status line, the chart (every strategy on that op and
# scenario), the dispatch-key trace and the graph diff update in place. Cells not in the matrix
# above are run on demand.

# %%
from funcbwd.views.widgets import Explorer

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
